"""The garbage collector set for serving: startup's objects frozen, young collections later."""

import gc
import weakref

import pytest

from embedgate.api import collector


@pytest.fixture
def restored_collector():
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_settle_freezes_what_exists_and_waits_longer_between_young_collections(restored_collector):
    gc.set_threshold(700, 10, 10)  # Python's defaults
    collector.settle()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (collector.YOUNG_THRESHOLD, 10, 10)


def test_cycles_made_after_settling_are_still_collected(restored_collector):
    collector.settle()

    class Node:
        pass

    node = Node()
    node.itself = node  # a cycle: reference counting alone never frees it
    gone = weakref.ref(node)
    del node
    assert gone() is not None
    gc.collect()
    assert gone() is None


def test_a_higher_threshold_set_by_hand_is_kept(restored_collector):
    gc.set_threshold(50_000, 10, 10)
    collector.settle()
    assert gc.get_threshold()[0] == 50_000
