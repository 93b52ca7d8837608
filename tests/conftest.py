"""Suite-wide hooks.

Under ``CI=true`` a test skipped because something the suite builds is missing (the testbed's
binaries, the operator image, helm, the benchmarks' Go harnesses) fails instead: CI builds
them (``make test``), so a missing build is a broken build, and a green run must mean the
tests ran. On a developer machine without Go such tests still skip, with the build's reason.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Final

import pytest

MISSING_BUILD: Final = (
    "testbed unavailable",
    "is not built",
    "helm unavailable",
    "kubectl unavailable",
    "operator image unavailable",
    "real-node binaries missing",  # testbed/build records a failed real-node build, exits 0
    "Debian packages missing",
)
"""Prefixes and phrases of the skip reasons that mean a build is missing."""


def _missing_build(reason: str) -> bool:
    return any(phrase in reason for phrase in MISSING_BUILD)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if os.environ.get("CI") != "true" or not report.skipped:
        return report
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    if _missing_build(reason):
        report.outcome = "failed"
        report.longrepr = f"CI=true: a build the tests need is missing, not skipped: {reason}"
    return report
