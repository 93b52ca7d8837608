"""testbed/matrix files a version's row from a run made elsewhere (a `make test` on the
default version), counting only its e2e cases, by API mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

MATRIX = Path(__file__).resolve().parents[3] / "testbed" / "matrix"

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.e2e.test_operator_flow" name="test_flow[crd]"/>
<testcase classname="tests.e2e.test_operator_flow" name="test_flow[in-tree]"/>
<testcase classname="tests.e2e.test_operator_flow" name="test_other[in-tree-4]">
  <failure message="boom"/></testcase>
<testcase classname="tests.e2e.test_testbed" name="test_up"/>
<testcase classname="tests.e2e.test_testbed" name="test_skip"><skipped message="why"/></testcase>
<testcase classname="tests.unit.allocator.test_quota" name="test_unit"/>
<testcase classname="tests.unit.allocator.test_quota" name="test_broken"><error/></testcase>
</testsuite></testsuites>
"""


def test_a_row_from_a_junit_file_counts_only_e2e_cases_by_mode(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    out = tmp_path / "table.md"
    env = dict(os.environ, DRALLOC_TESTBED_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, str(MATRIX), "--versions", "1.37", "--from-junit", str(junit),
         "--results", str(out)],
        env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr  # the in-tree failure
    row = json.loads((tmp_path / "cache" / "matrix" / "results.json").read_text())["1.37"]
    modes = row["modes"]
    assert (modes["crd"]["passed"], modes["crd"]["failed"]) == (1, 0)
    assert (modes["in-tree"]["passed"], modes["in-tree"]["failed"]) == (1, 1)
    assert (modes["other"]["passed"], modes["other"]["skipped"], modes["other"]["failed"]) == (
        1,
        1,
        0,
    )
    table = out.read_text()
    assert "| pass (1) | FAIL (1 of 2) | pass (1), 1 skipped |" in table
    assert "test_other[in-tree-4]" in table
