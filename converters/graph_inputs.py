"""What each published graph reads, as the graph itself declares it: a Triton config gives a
graph those inputs and no other, and the model's metadata records them for the gateway.

A kind's config names what the gateway can give (its tokenizer's outputs); the exported graph
declares what it reads, the exporter having dropped any input nothing in it reads (DeBERTa-v2's
token types, which its tokenizer gives and its embeddings, of no token types, never read).
Triton refuses a config input its ONNX graph does not declare, and the Python backend would
feed it and fail: such an input is taken out of the config. A graph that reads an input the
config does not give could not be served: the conversion is refused, naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as pb

from embedgate.contract.errors import ConversionError
from embedgate.contract.spec import ONNX_FILE
from embedgate.converters.library.module_stack import graph_inputs


def graphs(directory: Path) -> list[Path]:
    """The ONNX graphs of a staged model, one per version directory (a route's version)."""
    return sorted(path for path in directory.glob(f"*/{ONNX_FILE}") if path.parent.name.isdigit())


def fitted(name: str, directory: Path, config: pb.ModelConfig) -> list[str]:
    """``config``'s inputs narrowed to those its graphs read (each version's graph must read
    the same), in the config's order: the names recorded for ``name``. A model with no ONNX
    graph (a TorchScript-only or gateway-computed one) keeps its config's."""
    offered = [value.name for value in config.input]
    declared: set[str] | None = None
    for graph in graphs(directory):
        reads = set(graph_inputs(graph))
        if declared is not None and reads != declared:
            raise ConversionError(f"{name}'s graphs read different inputs: {sorted(declared)} and {sorted(reads)}")
        declared = reads
    if declared is None:
        return offered
    missing = sorted(declared - set(offered))
    if missing:
        raise ConversionError(
            f"the exported graph reads {', '.join(missing)}, which the gateway does not give "
            f"(it gives {', '.join(offered)})"
        )
    for index in reversed(range(len(config.input))):
        if config.input[index].name not in declared:
            del config.input[index]
    return [value.name for value in config.input]


def recorded(names: Sequence[str], directories: Sequence[Path], configs: Sequence[pb.ModelConfig]) -> dict[str, list[str]]:
    """Each Triton model's inputs (``names[i]`` staged in ``directories[i]``, its config
    ``configs[i]``), its config narrowed to them."""
    return {
        name: fitted(name, directory, config)
        for name, directory, config in zip(names, directories, configs, strict=True)
    }
