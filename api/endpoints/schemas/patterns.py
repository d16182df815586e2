"""The model names the server accepts, as JSON Schema patterns for the OpenAPI document.

The server checks names in one place (``api/models/names.py``); these patterns say the
same thing to clients and to contract testers, so that a name the document allows is never
refused as ``invalid_model_name`` and one it forbids always is. They are documentation
only: pydantic does not enforce them (the checks in ``names.py`` do, with their own error
code). ``tests/api/http/test_patterns.py`` holds the two to each other.

Written for ECMA-262 and Python ``re`` alike (JSON Schema patterns are ECMA-262).
"""

from __future__ import annotations

# One part of a name: 1-96 characters, starting with a letter or digit, ending with one or '_'.
_SEGMENT = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?"
# '--' stands for '/' in Triton names and '..' walks directories: refused anywhere in a name.
_NO_DOUBLES = r"(?!.*--)(?!.*\.\.)"
_NAME = rf"{_NO_DOUBLES}{_SEGMENT}(?:/{_SEGMENT})?(?:@optimized|@int8)?"

# An OpenCLIP architecture, as a CLIP model's model_name: one part, no variant. At most 80
# characters, so that with any pretrained tag (at most 96) both tower names fit Triton's
# 191 (``<model_name>_<pretrained>_image_encoder``); the server refuses longer pairs.
CLIP_ARCHITECTURE_MAX = 80
_ARCHITECTURE = rf"[A-Za-z0-9](?:[A-Za-z0-9._-]{{0,{CLIP_ARCHITECTURE_MAX - 2}}}[A-Za-z0-9_])?"
# A pretrained is a tag or a checkpoint path: anything, but it must not end in a newline
# (a tag followed by one is refused).
_PRETRAINED = r"[\s\S]*[^\n]"

# model_name: 'name' or 'org/name', optionally '@optimized' or '@int8'.
MODEL_NAME = rf"^{_NAME}$"
# model_name of a CLIP model (given with its pretrained).
CLIP_ARCHITECTURE = rf"^{_NO_DOUBLES}{_ARCHITECTURE}$"
PRETRAINED = rf"^{_PRETRAINED}$"
# A hub repository as an OpenCLIP pretrained names it: 'hf-hub:' and a model name without a variant.
HUB_PRETRAINED = rf"hf-hub:{_NO_DOUBLES}{_SEGMENT}(?:/{_SEGMENT})?"
# A pretrained to load: a hub repository, a tag, or a checkpoint by its absolute path (a
# relative path is refused), without a NUL character (no file path holds one; the server
# refuses it).
PRETRAINED_TO_LOAD = rf"^(?:{HUB_PRETRAINED}|(?!hf-hub:)(?![^/][\s\S]*/)(?![\s\S]*\x00){_PRETRAINED})$"
# A hub revision: a branch, a tag or a commit; no '..', no empty part, no '/' at either end.
REVISION = r"^(?!.*\.\.)(?!.*//)(?!.*/$)[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$"
# A model directory on the server, by its absolute path.
ABSOLUTE_PATH = r"^/"
# OpenAI's single model string: a model name, or a CLIP model as '<model_name>:<pretrained>'
# (the '--' and '..' rule applies to the architecture, the part before the first ':').
OPENAI_MODEL = rf"^(?:{_NAME}|(?![^:]*--)(?![^:]*\.\.){_ARCHITECTURE}:{_PRETRAINED})$"
# Names that already carry a variant (load requests that ask for one must not).
VARIANT_SUFFIX = r"@(?:optimized|int8)$"
