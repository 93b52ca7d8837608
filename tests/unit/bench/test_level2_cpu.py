"""Level 2's CPU accounting: per process, from /proc, and its report table."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import level2, report
from bench.level2 import cpu_seconds


def test_cpu_seconds_counts_a_busy_process_and_this_one_and_skips_the_gone() -> None:
    busy = subprocess.Popen(
        # Busy for 1.5 s of its own CPU time, however long a loaded machine takes to give it
        # that (a loop of 3 s wall time got less than 1 s of CPU beside a test run).
        [sys.executable, "-c", "import time\nwhile time.process_time() < 1.5: pass"]
    )
    try:
        # Exited but not reaped: its /proc entry still holds what it used.
        os.waitid(os.P_PID, busy.pid, os.WEXITED | os.WNOWAIT)
        used = cpu_seconds({"busy": busy.pid, "harness": os.getpid()})
    finally:
        busy.wait()
    assert used["busy"] >= 1.0  # 1.5 s of CPU, whatever the load
    start = time.process_time()
    while time.process_time() - start < 0.1:
        pass
    assert cpu_seconds({"harness": os.getpid()})["harness"] >= used["harness"] + 0.05
    assert cpu_seconds({"gone": 2**22 + 12345}) == {}


def test_the_cpu_table_has_a_column_per_process_and_a_total() -> None:
    rows: list[dict[str, Any]] = [
        {
            "workload": "w",
            "system": "in-tree",
            "cpuMsPerPod": {"kube-apiserver": 20.0, "etcd": 5.0},
        },
        {
            "workload": "w",
            "system": "dralloc",
            "cpuMsPerPod": {"kube-apiserver": 12.0, "operator": 3.5},
        },
        {"workload": "w", "system": "old run"},
    ]
    lines = report.level2_cpu_table(rows)
    assert lines[0] == (
        "| workload | system | kube-apiserver | etcd | operator | total "
        "| above the floor | vs in-tree |"
    )
    assert lines[2] == "| w | in-tree | 20.0 | 5.0 | - | 25.0 | - | - |"
    assert lines[3] == "| w | dralloc | 12.0 | - | 3.5 | 15.5 | - | - |"
    assert len(lines) == 4
    assert report.level2_cpu_table([{"workload": "w", "system": "s"}]) == []


def test_the_cpu_table_gives_each_systems_cost_above_the_floor_against_in_trees() -> None:
    rows = [
        {"workload": "w", "system": "in-tree", "cpuMsPerPod": {"kube-apiserver": 30.0}},
        {"workload": "w", "system": "dralloc", "cpuMsPerPod": {"kube-apiserver": 20.0}},
        {"workload": "w", "system": report.LEVEL2_FLOOR, "cpuMsPerPod": {"kube-apiserver": 10.0}},
        {"workload": "v", "system": "dralloc", "cpuMsPerPod": {"kube-apiserver": 7.0}},
    ]
    lines = report.level2_cpu_table(rows)
    assert lines[2] == "| w | in-tree | 30.0 | 30.0 | 20.0 | 1.00 |"
    assert lines[3] == "| w | dralloc | 20.0 | 20.0 | 10.0 | 0.50 |"
    assert lines[4] == f"| w | {report.LEVEL2_FLOOR} | 10.0 | 10.0 | - | - |"
    assert lines[5] == "| v | dralloc | 7.0 | 7.0 | - | - |"  # no floor measured there


def test_the_raw_profiles_are_kept_by_workload_and_system(tmp_path: Path) -> None:
    state, into = tmp_path / "testbed", tmp_path / "kept"
    state.mkdir()
    (state / "apiserver.pprof").write_bytes(b"pprof")
    level2.keep(state, into, f"steady_half_500nodes-{level2.slug('dralloc in-tree mode')}")
    assert sorted(p.name for p in into.iterdir()) == [
        "steady_half_500nodes-dralloc-in-tree-mode.apiserver.pprof"
    ]  # the operator's stacks were not taken: nothing to copy
