"""The fragmentation benchmark's per-step series and plot, on a tiny sequence (benchmarks are
not tests: no figure is asserted, only that the series are counted alike and the plot is
written)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import fragmentation_bench as frag

TINY = frag.Sequence(nodes=2, steps=120, seed=1)


@pytest.fixture(scope="module")
def row() -> frag.Row:
    runs = {(d, n): frag.replay(TINY, d, n) for d, n in frag.VARIANTS}
    first_fit = runs[frag.VARIANTS[0]]
    # Stands in for upstream's answer (the Go program is not needed here).
    upstream = frag.Upstream(
        placed=sum(first_fit.placed.values()), digest="", taken=list(first_fit.taken)
    )
    return frag.Row(TINY, runs, upstream)


def test_series_from_the_devices_taken_match_the_state(row: frag.Row) -> None:
    """What the plot draws for upstream (counted from the devices it took at each step) is
    counted as dralloc's replay counts from its state."""
    for figures in row.runs.values():
        assert len(figures.whole_free_steps) == len(figures.taken) == TINY.steps
        assert frag.whole_free_series(TINY, figures.taken) == figures.whole_free_steps
        # The table's mean still samples every 10th step.
        assert figures.whole_free == figures.whole_free_steps[::10]
    assert row.first_fit.whole_free_steps[0] == TINY.nodes * frag.GPUS_PER_NODE - 1


def test_moving_mean() -> None:
    assert frag.moving_mean([2, 4, 6, 8], window=2) == [2.0, 3.0, 5.0, 7.0]


def test_plot_and_its_note(row: frag.Row, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    picture = frag.plot([row, row, row], tmp_path / "fragmentation.png")
    assert picture is not None and picture.read_bytes().startswith(b"\x89PNG")
    note = frag.plot_note([row], picture)
    assert "](fragmentation.png)" in note
    assert "took the same devices at every step of every sequence" in note
