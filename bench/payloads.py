"""What each benchmark request carries, generated offline and deterministically.

Request ``i`` always carries the same inputs for a given seed, so a run can be repeated,
and the in-process baseline can replay exactly the inputs the server got. A server with a
response cache answers a repeated run's inputs from it (the report counts them): a new
``--seed`` gives new inputs.

Sentences are built from a vocabulary of common English words that BERT-style WordPiece
tokenizers keep whole, so a sentence of ``n`` words ending in a period is ``n + 3``
tokens with ``[CLS]`` and ``[SEP]`` (a unit test checks this with MiniLM's tokenizer).
That is how the mixed 8-30-token workload is sized without a tokenizer or a data set.
"""

from __future__ import annotations

import base64
import io
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

PAYLOAD_KINDS = ("single", "batch", "long", "image", "file")

# Special tokens ([CLS], [SEP]) plus the final period.
_SENTENCE_OVERHEAD = 3

WORDS = """
the of and to in is was for on that with as by at from his her they this which have
has had not are but were one all their there been more when will would who about
time two some other people into first could after year new most only over also many
these years such may then them state world make before made through city between
both being during under well since while where great good same part work life school
day long found high number war small game family called known used water early house
name music team three group line power four order company country second public
should around form place system end set main river film based national last local
major book home later town light land point play human story field road market
""".split()


def _rng(seed: int, index: int, *salt: object) -> random.Random:
    # A string seed is hashed with SHA-512: the same inputs on every run and machine.
    return random.Random(":".join(map(str, (seed, *salt, index))))


def sentence(rng: random.Random, words: int) -> str:
    """A sentence of ``words`` words and a period (``words + 3`` tokens)."""
    chosen = [rng.choice(WORDS) for _ in range(words)]
    chosen[0] = chosen[0].capitalize()
    return " ".join(chosen) + "."


def mixed_sentence(rng: random.Random, min_tokens: int = 8, max_tokens: int = 30) -> str:
    """A sentence of uniformly ``min_tokens``..``max_tokens`` tokens."""
    return sentence(rng, rng.randint(min_tokens, max_tokens) - _SENTENCE_OVERHEAD)


def long_text(rng: random.Random, max_length: int) -> str:
    """Sentences adding up to between ~90% of ``max_length`` tokens and ``max_length``
    (never past it, so nothing is truncated and every text costs nearly the maximum)."""
    budget = max_length - 2 - rng.randint(0, max_length // 10)  # tokens besides [CLS]/[SEP]
    parts: list[str] = []
    used = 0
    while budget - used >= 2:
        words = min(rng.randint(6, 20), budget - used - 1)
        parts.append(sentence(rng, words))
        used += words + 1
    return " ".join(parts)


class Payload(Protocol):
    kind: str  # "text" or "image"
    per_request: int

    def inputs(self, index: int) -> list[str]:
        """The texts (or image URIs) request ``index`` carries."""
        ...


@dataclass(frozen=True)
class SentencePayload:
    """Short sentences of mixed length: ``single`` (one per request) and ``batch``."""

    per_request: int = 1
    seed: int = 0
    min_tokens: int = 8
    max_tokens: int = 30
    kind: str = "text"

    def inputs(self, index: int) -> list[str]:
        # Salted with the request size: the single and batch payloads of one seed share no
        # sentence (a server with a response cache would answer one's from the other's).
        rng = _rng(self.seed, index, self.per_request)
        return [mixed_sentence(rng, self.min_tokens, self.max_tokens) for _ in range(self.per_request)]


@dataclass(frozen=True)
class LongPayload:
    """Texts near the model's max sequence length."""

    max_length: int
    per_request: int = 1
    seed: int = 0
    kind: str = "text"

    def inputs(self, index: int) -> list[str]:
        rng = _rng(self.seed, index)
        return [long_text(rng, self.max_length) for _ in range(self.per_request)]


@dataclass(frozen=True)
class FilePayload:
    """Lines of a file, taken in order and wrapping around."""

    lines: tuple[str, ...]
    per_request: int = 1
    kind: str = "text"

    @classmethod
    def from_file(cls, path: Path, per_request: int) -> "FilePayload":
        lines = tuple(line for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
        if not lines:
            raise ValueError(f"{path} has no non-empty lines")
        return cls(lines, per_request)

    def inputs(self, index: int) -> list[str]:
        start = index * self.per_request
        return [self.lines[(start + k) % len(self.lines)] for k in range(self.per_request)]


# Where the hot inputs of a repeating payload come from: indices no run reaches.
_HOT_INDEX = 10**9


@dataclass(frozen=True)
class RepeatingPayload:
    """A workload with repeats: each input of a request is, with probability ``share``, one
    of ``hot`` popular inputs (drawn uniformly; the same ones on every run), else the base
    payload's own, new input. A server with a response cache answers the repeats from it."""

    base: Payload
    share: float
    hot: int = 1000
    seed: int = 0

    @property
    def kind(self) -> str:
        return self.base.kind

    @property
    def per_request(self) -> int:
        return self.base.per_request

    def inputs(self, index: int) -> list[str]:
        rng = _rng(self.seed, index, "repeat")
        return [
            self.base.inputs(_HOT_INDEX + rng.randrange(self.hot))[0] if rng.random() < self.share else own
            for own in self.base.inputs(index)
        ]


class ImagePayload:
    """JPEG images as ``data:`` URIs (no image server, nothing fetched over the network).

    A pool of distinct images is encoded once up front, so the load generator spends no
    CPU encoding while it measures; request ``i`` takes the pool in order.
    """

    kind = "image"

    def __init__(self, per_request: int = 1, seed: int = 0, size: int = 256, pool: int = 32):
        self.per_request = per_request
        self.pool = [image_data_uri(_rng(seed, n), size) for n in range(pool)]

    def inputs(self, index: int) -> list[str]:
        start = index * self.per_request
        return [self.pool[(start + k) % len(self.pool)] for k in range(self.per_request)]


def image_data_uri(rng: random.Random, size: int) -> str:
    """A ``size`` x ``size`` JPEG of smooth colour gradients plus noise, as a data URI."""
    import numpy as np
    from PIL import Image

    generator = np.random.default_rng(rng.getrandbits(64))
    y, x = np.mgrid[0:size, 0:size] / size
    channels = [np.sin(x * generator.uniform(1, 9) + y * generator.uniform(1, 9) + generator.uniform(0, 6))
                for _ in range(3)]
    pixels = (np.stack(channels, axis=-1) + 1) * 110 + generator.normal(0, 8, (size, size, 3))
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def build_payload(
    kind: str,
    *,
    batch_size: int,
    seed: int,
    max_length: int | None = None,
    input_file: Path | None = None,
    image_size: int = 256,
    repeat: float = 0.0,
    hot_inputs: int = 1000,
) -> Payload:
    payload = _build_payload(kind, batch_size, seed, max_length, input_file, image_size)
    return RepeatingPayload(payload, repeat, hot_inputs, seed) if repeat > 0 else payload


def _build_payload(
    kind: str, batch_size: int, seed: int, max_length: int | None, input_file: Path | None, image_size: int
) -> Payload:
    if kind == "single":
        return SentencePayload(1, seed)
    if kind == "batch":
        return SentencePayload(batch_size, seed)
    if kind == "long":
        if not max_length:
            raise ValueError("the long payload needs the model's max sequence length")
        return LongPayload(max_length, batch_size, seed)
    if kind == "image":
        return ImagePayload(batch_size, seed, image_size)
    if kind == "file":
        if input_file is None:
            raise ValueError("the file payload needs --input-file")
        return FilePayload.from_file(input_file, batch_size)
    raise ValueError(f"unknown payload {kind!r}; choose from {', '.join(PAYLOAD_KINDS)}")
