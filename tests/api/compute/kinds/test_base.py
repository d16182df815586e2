"""Each kind answers its own tasks and refuses the others, saying where to go."""

import pytest

from embedgate.api.compute.kinds import KINDS, Task, kind_of
from embedgate.api.errors import WrongModelKind
from tests.api.conftest import fake_metadata


@pytest.mark.parametrize(
    "kind, task, pointer",
    [
        ("cross_encoder", Task.EMBED, "POST /rerank or /v1/rerank"),
        ("sentence_transformer", Task.RERANK, "POST /infer or /v1/embeddings"),
        ("sparse_encoder", Task.EMBED, "POST /infer (sparse_embeddings)"),
        ("sentence_transformer", Task.IMAGES, "dense embeddings of texts"),
    ],
)
def test_a_task_the_kind_does_not_give_is_refused_with_what_it_gives(kind, task, pointer):
    served = kind_of(fake_metadata("org/model", kind=kind))
    with pytest.raises(WrongModelKind, match="model 'org/model' is ") as refused:
        served.require(task, "org/model")
    assert task.value in str(refused.value) and pointer in str(refused.value)
    assert refused.value.code == "wrong_model_kind"


def test_every_task_is_given_by_some_kind_and_every_kind_gives_one():
    assert set().union(*(kind.tasks for kind in KINDS.values())) == set(Task)
    assert all(kind.tasks for kind in KINDS.values())
    for name, kind in KINDS.items():
        assert kind.name == name
        served = kind(fake_metadata("m", kind=name))
        for task in kind.tasks:
            served.require(task, "m")  # answers its own
