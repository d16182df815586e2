"""The environment ``make install`` builds: the libraries a conversion uses import in a
plain interpreter, with nothing of the project run first."""

from __future__ import annotations

import subprocess
import sys

# torchvision's compiled operators load only beside the torch they were built for, and
# transformers, sentence-transformers and open_clip import torchvision when it is there.
IMPORTS = """
import torch, torchvision
from sentence_transformers import SentenceTransformer
import open_clip, transformers
boxes = torch.tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.9]])
print(torchvision.ops.nms(boxes, torch.tensor([0.9, 0.8]), 0.5).tolist())
"""


def test_the_conversion_libraries_import_in_a_plain_interpreter():
    done = subprocess.run([sys.executable, "-c", IMPORTS], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[0]"
