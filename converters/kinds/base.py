"""The one interface every model kind's converter has (``converters/kinds/<kind>.py``, or a
package ``converters/kinds/<kind>/``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar

from tritonclient.grpc import model_config_pb2 as pb

from embedgate.contract.kinds import Kind
from embedgate.contract.spec import ConversionSpec, ModelMetadata

Step = Callable[[str], None]


class KindConverter(ABC):
    """Turns one model of its kind into Triton models: the files of each part, their
    configs and the metadata the gateway serves it by."""

    # The kind it converts, as the contract declares it (contract/kinds/<kind>.py): the
    # registry (converters/kinds/__init__.py) finds the converter by it.
    kind: ClassVar[Kind]

    def __init__(self, spec: ConversionSpec, step: Step):
        self.spec = spec
        self.step = step

    def parts(self) -> tuple[str, ...]:
        """The Triton models it becomes. The first is published last: its arrival makes
        the model visible (the others are only reachable through it)."""
        return (self.spec.triton_name,)

    def published_parts(self, metadata: ModelMetadata) -> tuple[str, ...]:
        """Those of :meth:`parts` the converted model ``metadata`` describes is published as
        (all, but for a part it could not have: a late-chunking graph)."""
        return self.parts()

    @abstractmethod
    def convert(self, directories: Sequence[Path]) -> ModelMetadata:
        """Write each part's ``1/`` files (and the tokenizer) into its staging directory,
        check them against the model's own library, and return the metadata."""

    @abstractmethod
    def configs(self, metadata: ModelMetadata) -> list[pb.ModelConfig]:
        """Each part's config.pbtxt, in the order of :meth:`parts`; none for a model no part
        of which Triton runs (the gateway computes it from static weights)."""
