"""Ranges for int8/uint8 embeddings, calibrated once per model at conversion.

``sentence_transformers.quantization.quantize_embeddings`` maps each dimension's
``[min, max]`` onto 256 steps. Computed per request, the ranges would depend on what else
the request holds (the same text would get other bytes in other company), so they are
computed here, once, from a fixed set of texts, and stored in the model's metadata: the
gateway quantizes every vector with the same ranges, and the same text always gives the
same bytes.

The texts are built from templates over a varied vocabulary (questions, statements, short
queries, code, numbers), deterministic, so a conversion is reproducible; a model's
embeddings of ordinary text then set the ranges, and values beyond them clip, as
``quantize_embeddings`` clips.
"""

from __future__ import annotations

import numpy as np

from embedgate.contract.spec import Calibration

CALIBRATION_TEXTS = 256

_SUBJECTS = (
    "the committee", "a small dog", "my grandmother", "the new database", "this recipe", "our team",
    "the river", "a quantum computer", "the stock market", "your order", "the museum", "an old violin",
    "the vaccine", "a solar panel", "the train to Berlin", "the neural network", "this contract", "the volcano",
)
_VERBS = (
    "approved", "chased", "explained", "indexes", "needs", "won", "flooded", "simulates", "fell after",
    "was shipped with", "displays", "was repaired by", "prevents", "powers", "was delayed by", "predicts",
    "requires", "erupted near",
)
_OBJECTS = (
    "the annual budget", "a red ball", "the history of jazz", "millions of rows", "two cups of flour",
    "the championship", "the old bridge", "molecular structures", "interest rate news", "express delivery",
    "impressionist paintings", "a skilled luthier", "seasonal influenza", "a remote village",
    "heavy snowfall", "customer churn", "a termination clause", "the coastal town",
)
_QUERIES = (
    "how to {verb} {obj}", "what is {obj}", "best {obj} near me", "why {subject} {verb} {obj}",
    "{obj} price", "{subject} vs {obj}", "define {obj}", "when was {obj} invented",
)
_OTHER = (
    "def add(a, b):\n    return a + b",
    "SELECT name, count(*) FROM orders GROUP BY name;",
    "Error 404: the page you requested could not be found.",
    "Temperature: 21.5 °C, humidity 63%, wind 12 km/h NW",
    "Le chat dort sur le canapé depuis ce matin.",
    "Der Zug nach München fährt um 14:32 von Gleis 7.",
    "El mercado abre a las nueve de la mañana.",
    "東京の天気は晴れのち曇りです。",
    "https://example.com/docs/getting-started?lang=en#install",
    "Q3 revenue grew 12% year over year to $4.2B.",
    "Thanks! See you tomorrow :)",
    "URGENT!!! Reply before Friday.",
)


def calibration_texts(count: int = CALIBRATION_TEXTS) -> list[str]:
    """``count`` deterministic texts of varied shape and length."""
    rng = np.random.default_rng(20240531)
    texts = list(_OTHER)
    while len(texts) < count:
        subject, verb, obj = (str(rng.choice(words)) for words in (_SUBJECTS, _VERBS, _OBJECTS))
        shape = int(rng.integers(0, 4))
        if shape == 0:
            texts.append(f"{subject.capitalize()} {verb} {obj}.")
        elif shape == 1:
            texts.append(str(rng.choice(_QUERIES)).format(subject=subject, verb=verb, obj=obj))
        elif shape == 2:
            clauses = [f"{s} {v} {o}" for s, v, o in zip(*(rng.choice(w, 3) for w in (_SUBJECTS, _VERBS, _OBJECTS)))]
            texts.append(", and ".join(clauses).capitalize() + ".")
        else:
            texts.append(obj)
    return texts[:count]


def ranges(vectors: np.ndarray) -> list[list[float]]:
    vectors = np.asarray(vectors, dtype=np.float32)
    return [vectors.min(axis=0).tolist(), vectors.max(axis=0).tolist()]


def calibrate(vectors: np.ndarray) -> Calibration:
    """The ranges of ``vectors`` (the model's embeddings of :func:`calibration_texts`), as
    they are and at unit length."""
    vectors = np.asarray(vectors, dtype=np.float32)
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return Calibration(texts=len(vectors), ranges=ranges(vectors), normalized_ranges=ranges(unit))
