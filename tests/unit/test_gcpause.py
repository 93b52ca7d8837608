"""Garbage-collector pauses are counted and the young threshold follows the setting."""

from __future__ import annotations

import gc

from operators import gcpause


def test_pauses_are_counted_and_the_threshold_is_set() -> None:
    before_threshold = gc.get_threshold()
    try:
        gcpause.configure(12_345)
        assert gc.get_threshold()[0] == 12_345
        before = gcpause.pause_seconds()
        garbage = []
        for _ in range(1_000):  # cycles, so the collection has something to do
            node: list[object] = []
            node.append(node)
            garbage.append(node)
        del garbage, node
        gc.collect()
        assert gcpause.pause_seconds() > before
    finally:
        gc.set_threshold(*before_threshold)
