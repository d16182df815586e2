"""What work costs, in the units admission and the per-key limits count: a text's estimated
tokens (the same estimate on every side, the queue's, the measured speed's and a key's
charge, so its bias cancels out), and the work too small to read a model's speed from."""

from __future__ import annotations

from collections.abc import Sequence

# Characters per token of an English text, about; a token or two for the special tokens.
CHARS_PER_TOKEN = 4
SPECIAL_TOKENS = 2
# Work of less cost is not read for a model's speed (about five short sentences; a call's
# fixed cost is a few milliseconds, a short sentence's share of a merged call a fraction of one).
MIN_READ_COST = 64.0


def text_cost(item: str | tuple[str, ...]) -> float:
    """A text's (or a pair's) estimated tokens."""
    if isinstance(item, str):
        return len(item) / CHARS_PER_TOKEN + SPECIAL_TOKENS
    return sum(len(part) for part in item) / CHARS_PER_TOKEN + SPECIAL_TOKENS + 1


def items_cost(items: Sequence[str | tuple[str, ...]]) -> float:
    return sum(text_cost(item) for item in items)
