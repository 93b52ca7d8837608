"""Suite-wide hooks.

Under ``CI=true`` a test skipped because something the suite builds is missing (the testbed's
binaries, the operator image, helm, the benchmarks' Go harnesses) fails instead: CI builds
them (``make test``), so a missing build is a broken build, and a green run must mean the
tests ran. On a developer machine without Go such tests still skip, with the build's reason.

Under ``CI=true`` a whole run (no ``-k``, ``-m`` or paths) also fails when it skipped more
tests than ``tests/known-skips.txt`` allows: each line is a count and a pattern of skip
reasons (a regular expression), the skips this suite has by design (a feature the other API
mode lacks, say). A skip no line allows, or more of one kind than its count, fails the run
with the list: skips that creep in unnoticed are tests that stopped running.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator
from pathlib import Path
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


KNOWN_SKIPS: Final = Path(__file__).with_name("known-skips.txt")
_skipped: list[tuple[str, str]] = []


def known_skips(text: str) -> list[tuple[int, re.Pattern[str]]]:
    """``(count, pattern)`` per line of known-skips.txt (``#`` comments and blanks left out)."""
    allowed = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        count, _, pattern = line.partition(" ")
        allowed.append((int(count), re.compile(pattern.strip())))
    return allowed


def unexpected_skips(
    skipped: list[tuple[str, str]], allowed: list[tuple[int, re.Pattern[str]]]
) -> list[str]:
    """What the allowance does not cover: ``nodeid: reason`` for a skip no pattern matches,
    and ``N skips of PATTERN (M allowed)`` for a kind over its count."""
    counts = [0] * len(allowed)
    problems = []
    for nodeid, reason in skipped:
        for index, (_, pattern) in enumerate(allowed):
            if pattern.search(reason):
                counts[index] += 1
                break
        else:
            problems.append(f"{nodeid}: {reason}")
    for (limit, pattern), count in zip(allowed, counts, strict=True):
        if count > limit:
            problems.append(f"{count} skips of {pattern.pattern!r} ({limit} allowed)")
    return problems


def _whole_run(config: pytest.Config) -> bool:
    """The suite as ``make test`` runs it: its test paths, no selection."""
    selected = config.getoption("keyword") or config.getoption("markexpr")
    return config.args_source is pytest.Config.ArgsSource.TESTPATHS and not selected


def _record_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    if report.skipped:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        _skipped.append((report.nodeid, reason))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _record_skip(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """A module skipped as it is collected counts too (its tests never appear)."""
    _record_skip(report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("CI") != "true" or not _whole_run(session.config):
        return
    problems = unexpected_skips(_skipped, known_skips(KNOWN_SKIPS.read_text()))
    if not problems:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = ["CI=true: skips beyond tests/known-skips.txt (tests that stopped running):", *problems]
    if reporter is not None:
        reporter.write("\n")  # after the progress line
        reporter.write_line("\n".join(lines), red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
