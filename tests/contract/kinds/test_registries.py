"""The three registries of kinds, each found by discovery: the contract's declarations
(``contract/kinds/``), the converters (``converters/kinds/``) and the gateway's served kinds
(``api/compute/requests/kinds/``). They name the same kinds, and both sides take a kind's
name and library class from its declaration, so a new kind is one module in each and
nothing else."""

from __future__ import annotations

import subprocess
import sys

from embedgate.api.compute.requests.kinds import KINDS as SERVED
from embedgate.contract.kinds import KINDS, RECORDS
from embedgate.converters.kinds import CONVERTERS, LIBRARY_KINDS, ONE_KIND_LIBRARIES
from embedgate.converters.kinds import KINDS as CONVERTED
from embedgate.converters.library.declared import KNOWN_KINDS


def test_the_three_registries_name_the_same_kinds():
    assert list(KINDS) == list(CONVERTERS) == list(CONVERTED) == list(SERVED)


def test_each_side_takes_the_kind_the_contract_declares():
    for name, kind in KINDS.items():
        assert CONVERTERS[name].kind is kind
        assert SERVED[name].name == kind.name == name


def test_each_library_class_is_converted_by_its_kinds_converter():
    classes = {kind.library_class for kind in KINDS.values() if kind.library_class is not None}
    assert set(LIBRARY_KINDS) == set(KNOWN_KINDS) == classes
    for library_class, converter in LIBRARY_KINDS.items():
        # The class it loads a directory as.
        assert converter(None, print, None, None).model_class == library_class
    # A library of one kind is told by the load, not by a directory.
    assert {library: converter.kind.name for library, converter in ONE_KIND_LIBRARIES.items()} == {"open_clip": "clip"}


def test_the_kinds_and_keys_metadata_json_has_always_held():
    on_disk = {
        "sentence_transformer": "dense",
        "sparse_encoder": "sparse",
        "cross_encoder": "cross_encoder",
        "multi_vector_encoder": "multi_vector",
        "clip": "clip",
    }
    declared = {name: kind.record.key if kind.record else None for name, kind in KINDS.items()}
    assert on_disk.items() <= declared.items()
    assert set(RECORDS) == {key for key in declared.values() if key}


def test_the_contracts_kinds_import_no_torch():
    # The gateway imports them (the serving path never imports torch).
    code = "import sys, embedgate.contract.kinds, embedgate.contract.spec; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
