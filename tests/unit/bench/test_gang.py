"""The gang benchmark on a tiny workload (benchmarks are not tests: no figure is asserted,
only that the strategies run, that upstream's row is counted as dralloc's per-pod row is,
and, when the Go harness is built, that upstream places every member as dralloc first-fit)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import gang_bench as gang
from bench import level1

TINY = gang.Workload(nodes=12, gangs=8, seed=1, used_share=0.3)


@pytest.fixture(scope="module")
def pod() -> gang.Figures:
    return gang.per_pod(TINY)


def test_strategies_count_every_gang(pod: gang.Figures) -> None:
    joint = gang.joint(TINY)
    members = sum(len(g) for g in gang.stream(TINY))
    assert len(pod.placements) == len(pod.taken) == members
    for figures in (pod, joint):
        assert figures.whole + figures.half + figures.none == TINY.gangs
        assert len(figures.seconds) == TINY.gangs
    assert joint.half == joint.held_by_half == 0
    assert joint.missed == 0


def test_upstream_figures_are_counted_as_dralloc_counts_its_state(pod: gang.Figures) -> None:
    """upstream_figures, given the devices dralloc first-fit took per member, finds what
    per_pod counted from its state (so equal placements mean equal rows)."""
    times = [0.001] * len(pod.taken)
    counted = gang.upstream_figures(TINY, list(pod.taken), times)
    assert counted.placements == pod.placements
    assert (counted.whole, counted.half, counted.held_by_half, counted.none) == (
        pod.whole,
        pod.half,
        pod.held_by_half,
        pod.none,
    )
    assert (counted.satisfiable, counted.missed) == (pod.satisfiable, pod.missed)
    assert sum(counted.seconds) == pytest.approx(0.001 * len(pod.taken))


def test_upstream_scenario_holds_the_same_state() -> None:
    scenario = gang.upstream_scenario(TINY)
    in_use = sorted(
        (r["pool"], r["device"])
        for claim in scenario["preallocated"]
        for r in claim["status"]["allocation"]["devices"]["results"]
    )
    assert in_use == sorted(gang.used_devices(TINY))
    steps = scenario["measureSteps"]
    assert [s["pod"] for s in steps] == [
        gang.pod_name(name) for g in gang.stream(TINY) for name, _ in g
    ]
    assert all(len(s["newClaims"]) == 1 and not s["release"] for s in steps)


def test_upstream_places_every_member_as_dralloc_first_fit(pod: gang.Figures) -> None:
    try:
        binary = level1.upstream_binary(build=False)
    except level1.UpstreamUnavailable as error:
        pytest.skip(f"the Go harness is not built (bench/upstream/build): {error}")
    upstream, digest = gang.run_upstream(TINY, binary)
    row = gang.Row(TINY, pod, gang.joint(TINY), upstream, digest)
    assert row.same_placements()
    assert "placed every member on the same node" in gang.upstream_note([row])
    assert "per-pod first-fit (upstream)" in gang.table([row])


def test_markdown_without_upstream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def unavailable(*_args: object, **_kwargs: object) -> Path:
        raise gang.GoProgramUnavailable("no go here")

    monkeypatch.setattr(gang, "go_binary", unavailable)
    monkeypatch.setattr(gang, "Workload", lambda *_args: TINY)
    out = tmp_path / "gang.md"
    assert gang.main(["--quick", "--markdown", str(out)]) == 0
    text = out.read_text()
    assert "per-pod first-fit (dralloc)" in text and "(upstream)" not in text.split("\n\n")[2]
    assert "not run (no go here)" in text
