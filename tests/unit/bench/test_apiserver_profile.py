"""The API server's profile, read into parts per bound pod, and its report table."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bench import apiserver_profile, report
from bench.apiserver_profile import PARTS, Profile, ProfileUnavailable, parse_top
from bench.level2 import Level2Result, _apiserver_parts

TOP = """File: kube-apiserver
Type: cpu
Time: 2026-12-05 12:49:11 UTC
Duration: 15.01s, Total samples = 16.04s (106.88%)
Showing nodes accounting for 7.80s, 48.63% of 16.04s total
      flat  flat%   sum%        cum   cum%
     0.02s  0.12%  0.12%      4.35s 27.12%  k8s.io/apiserver/pkg/registry/generic/registry.(*Store).Update
     0.01s  0.06%  0.18%      1.54s  9.60%  k8s.io/apiserver/pkg/endpoints/handlers.(*patcher).applyPatch
         0     0%  0.18%      1.19s  7.42%  k8s.io/apimachinery/pkg/util/managedfields/internal.(*FieldManager).UpdateNoErrors
         0     0%  0.18%       200ms  1.25%  k8s.io/apimachinery/pkg/util/managedfields/internal.(*FieldManager).Apply
     0.10s  0.62%  0.80%      0.12s  0.75%  k8s.io/client-go/tools/cache.handleWatch
         0     0%  0.80%      0.91s  5.67%  k8s.io/apiserver/pkg/endpoints/handlers.handleWatch
     0.67s  4.18%  5.00%      0.67s  4.18%  runtime.spanClass.sizeclass (inline)
"""


def test_a_pprof_top_listing_gives_each_parts_time_per_bound_pod() -> None:
    profile = parse_top(TOP)
    assert profile.duration == pytest.approx(15.01)
    assert profile.total == pytest.approx(16.04)
    assert profile.cumulative["runtime.spanClass.sizeclass"] == pytest.approx(0.67)
    parts = profile.per_pod(pods_per_second=20.0)  # 300.2 pods in the profile
    pods = 20.0 * 15.01
    assert parts["total"] == pytest.approx(16040 / pods)
    assert parts["updates (PUT, PATCH)"] == pytest.approx(4350 / pods)
    # A part of several functions sums them (units as pprof prints them: s and ms).
    assert parts["field manager (managedFields, every write)"] == pytest.approx(1390 / pods)
    # client-go's handleWatch (a watch of the API server's own) is not the serving of one.
    assert parts["watch serving"] == pytest.approx(910 / pods)
    assert parts["custom-resource schema coercion"] == 0.0
    assert list(parts) == ["total", *(label for label, _ in PARTS)]
    assert Profile(0.0, 1.0, {}).per_pod(20.0) == {}


def test_text_that_is_not_a_cpu_profile_is_refused() -> None:
    with pytest.raises(ProfileUnavailable, match="not a CPU profile"):
        parse_top("File: kube-apiserver\nType: inuse_space\n")


def test_a_real_go_profile_is_read(tmp_path: Path) -> None:
    go = shutil.which("go")
    if go is None:
        pytest.skip("the go command is not on PATH: no Go profile can be made here")
    (tmp_path / "go.mod").write_text("module burn\n\ngo 1.22\n")
    (tmp_path / "main.go").write_text(
        """package main

import (
\t"os"
\t"runtime/pprof"
\t"syscall"
\t"time"
)

// cpu is the process's CPU time so far.
func cpu() time.Duration {
\tvar usage syscall.Rusage
\tsyscall.Getrusage(syscall.RUSAGE_SELF, &usage)
\treturn time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
}

// burn spins until it has had 0.7 s of CPU (not of wall time: on a busy machine the
// profiler samples only the time the process runs), or 60 s have passed.
//
//go:noinline
func burn() int {
\tn := 0
\tstart, deadline := cpu(), time.Now().Add(60*time.Second)
\tfor cpu()-start < 700*time.Millisecond && time.Now().Before(deadline) {
\t\tn++
\t}
\treturn n
}

func main() {
\tf, _ := os.Create(os.Args[1])
\tpprof.StartCPUProfile(f)
\tburn()
\tpprof.StopCPUProfile()
\tf.Close()
}
"""
    )
    out = tmp_path / "cpu.pprof"
    subprocess.run([go, "run", ".", str(out)], cwd=tmp_path, check=True, timeout=300)
    profile = apiserver_profile.summarize(out)
    assert profile.duration >= 0.5
    assert profile.cumulative["main.burn"] >= 0.2  # 0.7 s of CPU, however busy the machine


def test_without_go_the_profile_says_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(apiserver_profile.shutil, "which", lambda _: None)
    with pytest.raises(ProfileUnavailable, match="go command"):
        apiserver_profile.summarize(tmp_path / "any.pprof")
    result = Level2Result("w", "dralloc", pods=10, seconds=1.0, pods_per_second=10.0)
    assert _apiserver_parts(tmp_path / "missing.pprof", result) == (
        {},
        "no API server profile (the profiler did not answer)",
    )
    (tmp_path / "there.pprof").write_bytes(b"")
    parts, why = _apiserver_parts(tmp_path / "there.pprof", result)
    assert parts == {} and "go command" in why


def test_the_parts_table_has_a_column_per_profiled_system() -> None:
    rows: list[dict[str, Any]] = [
        {"workload": "w", "system": "in-tree", "apiserverMsPerPod": {"total": 37.4, "  a": 2.0}},
        {"workload": "w", "system": "dralloc", "apiserverMsPerPod": {"total": 40.1, "  a": 3.85}},
        {"workload": "w", "system": "pods without claims", "apiserverMsPerPod": {}},
        {"workload": "v", "system": "dralloc"},
    ]
    lines = report.apiserver_parts_table(rows)
    assert lines[0] == "| part | in-tree | dralloc |"
    assert lines[2] == "| total | 37.40 | 40.10 |"
    assert lines[3] == "| &nbsp;&nbsp;a | 2.00 | 3.85 |"
    assert report.apiserver_parts_table([{"workload": "w", "system": "x"}]) == []
    markdown = report.markdown({"level2": rows})
    assert "Where the API server's time goes" in markdown
