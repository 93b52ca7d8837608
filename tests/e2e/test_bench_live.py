"""Smoke tests of the benchmarks that start a control plane of their own and run the operator
on it (``bench.responsiveness``, ``bench.gang_arrival``): tiny runs that check they run to
their table, nothing about speed. Benchmarks are not tests; without these, a harness broken
by a change elsewhere is found only by the next person who wants its figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(600)


def bench(module: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert proc.returncode == 0, f"bench.{module} failed:\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_the_responsiveness_benchmark_runs_both_phases() -> None:
    out = bench("responsiveness", "--pods", "3", "--nodes", "2", "--devices", "4")
    figures = json.loads(out.strip().splitlines()[-1])
    assert set(figures) == {"quiet", "with costly claim"}
    assert figures["quiet"]["bound"] == 3
    assert figures["with costly claim"]["bound"] == 3


def test_the_gang_arrival_benchmark_runs_a_reference_and_a_gang(tmp_path: Path) -> None:
    out = bench(
        "gang_arrival", "--sizes", "30", "--nodes", "2", "--probes", "2",
        "--json", str(tmp_path / "gangs.json"),
    )  # fmt: skip
    phases = json.loads((tmp_path / "gangs.json").read_text())
    assert [p["members"] for p in phases] == [0, 30]
    assert all(p["probes"] >= 2 for p in phases), phases
    assert phases[1]["operator_cpu_s"] > 0, phases
    assert "| gang of 30 | 30 |" in out, out
