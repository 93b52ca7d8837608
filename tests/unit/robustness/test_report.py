"""The report keeps earlier runs (a section per invocation, the JSON a growing list) and
names claims pods that admission let through without the gate."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

from robustness.__main__ import rerun_command
from robustness.checker import check
from robustness.cluster import MODES
from robustness.history import History
from robustness.run import Options, Result, created_ungated, write_report


def _result(seed: int) -> Result:
    history = History()
    return Result(
        options=Options(mode=MODES["crd"], seed=seed),
        report=check(history),
        traffic=Counter({"template_pod": 3 + seed}),
        failed=Counter(),
        fired=[],
        pods_bound=2,
        bound_per_s=0.5,
        latency_p50_s=0.1,
        latency_p99_s=random.Random(seed).uniform(1, 2),
        relists=0,
        settled_in_s=1.0,
        slowest=[],
        created_ungated=[],
        stand_downs={},
        operator_relists=0,
        history=history,
    )


def test_a_second_report_adds_a_section_and_keeps_the_first(tmp_path: Path) -> None:
    out = tmp_path / "robustness"
    write_report([_result(1)], out, "python -m robustness --seeds 1")
    write_report([_result(2), _result(3)], out, "python -m robustness --seeds 2-3")

    md = out.with_suffix(".md").read_text()
    assert md.count("# Robustness runs") == 1
    assert md.count("## Run of ") == 2
    assert md.index("`python -m robustness --seeds 1`") < md.index("--seeds 2-3")
    rows = [line for line in md.splitlines() if line.startswith("| crd |")]
    assert [row.split(" | ")[1] for row in rows] == ["1", "2", "3"]
    assert [run["options"]["seed"] for run in json.loads(out.with_suffix(".json").read_text())] == [
        1,
        2,
        3,
    ]


def test_the_rerun_command_leaves_out_this_machines_places() -> None:
    argv = ["--mode", "crd", "--out", "/somewhere/r", "--state-dir=/x", "--faults", "a b"]
    assert rerun_command(argv) == "python -m robustness --mode crd --faults 'a b'"


def test_claims_pods_that_were_created_without_the_gate_are_named() -> None:
    """Only a pod's first recorded state counts (dralloc lifts the gate later), only claims
    pods, only the namespaces asked about."""
    from dataclasses import replace

    from tests.unit.robustness.test_checker import NS, history, pod

    gated_then_lifted = pod("a", "c", gated=True)
    report = history(
        gated_then_lifted,
        replace(gated_then_lifted, gated=False, node="n1"),
        pod("b", "c", gated=False),
        pod("no-claims", gated=False),
        replace(pod("elsewhere", "c", gated=False), namespace="other"),
    )
    assert created_ungated(report, [NS]) == [f"{NS}/b"]
