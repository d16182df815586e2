"""A fingerprint of the files that define a model: its configs, tokenizer and weights.

A conversion records it and every load computes it again (the gateway, before it decides
whether to convert), so it must cost little on a model of many GB. Small files (configs,
tokenizers, vocabularies, module code: every file up to ``FULL_HASH_MAX_BYTES``) are hashed
in full: an edit is always seen, and a copy or a mere touch changes nothing. A large file
(the weights) counts by its size, its modification time and the hash of its first and
last MiB: hashing every byte would cost every load seconds per GB (2 GB of weights took
3.3 s in full and 3 ms sampled on a 2-core machine, from the page cache), while a model
trained again is written anew, which sets the time. The time is what makes this sound:
the size and the header of a safetensors file stay the same when a model is trained again
with the same shapes, and its first and last MiB may hold tensors the training left alone
(frozen embeddings, an unused pooler), so without the time a retrained model could pass
for the old one. With it, touching the weights alone (or copying them without keeping
times: ``cp -a`` and ``rsync -a`` keep them) converts the model again: a conversion spent,
never an old model served (the quick check of make and rsync, for the same reason).

Names starting with ``.`` (``.git``, ``.cache``, a download's locks) and Markdown files
(the model card) are not part of a model; a broken symlink points at nothing to load.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

FULL_HASH_MAX_BYTES = 32 << 20
SAMPLE_BYTES = 1 << 20
_CHUNK = 1 << 20


def fingerprint(path: str | os.PathLike[str]) -> str:
    """``sha256:<hex>`` of a model directory's files (or of one checkpoint file): each
    file's path relative to it and what it is counted by. Blocking: call it off the
    event loop. Raises OSError for files it may not read."""
    root = Path(path)
    digest = hashlib.sha256()
    files = [(root.name, root)] if root.is_file() else _model_files(root)
    for relative, file in files:
        digest.update(relative.encode() + b"\0" + _file_digest(file) + b"\n")
    return "sha256:" + digest.hexdigest()


def _model_files(root: Path) -> list[tuple[str, Path]]:
    found = []
    for directory, subdirectories, names in os.walk(root):
        subdirectories[:] = [name for name in subdirectories if not _left_out(name)]
        for name in names:
            file = Path(directory) / name
            if _left_out(name) or name.endswith(".md") or not file.exists():
                continue
            found.append((file.relative_to(root).as_posix(), file))
    return sorted(found)


def _left_out(name: str) -> bool:
    return name.startswith(".") or name == "__pycache__"


def _file_digest(file: Path) -> bytes:
    status = file.stat()
    digest = hashlib.sha256()
    with open(file, "rb") as opened:
        if status.st_size <= FULL_HASH_MAX_BYTES:
            digest.update(b"content\0")
            while chunk := opened.read(_CHUNK):
                digest.update(chunk)
        else:
            digest.update(f"sampled\0{status.st_size}\0{status.st_mtime_ns}\0".encode())
            digest.update(opened.read(SAMPLE_BYTES))
            opened.seek(status.st_size - SAMPLE_BYTES)
            digest.update(opened.read(SAMPLE_BYTES))
    return digest.hexdigest().encode()
