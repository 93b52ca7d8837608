"""Suite-wide hooks.

Under ``CI=true`` a test skipped because something the suite builds is missing (the testbed's
binaries, the operator image, helm, the benchmarks' Go harnesses) fails instead: CI builds
them (``make test``), so a missing build is a broken build, and a green run must mean the
tests ran. On a developer machine without Go such tests still skip, with the build's reason.

Under ``CI=true`` a whole run (no ``-k``, ``-m`` or paths) also fails when it skipped more
tests than ``tests/known-skips.txt`` allows: each line is a count and a pattern of skip
reasons (a regular expression), the skips this suite has by design (a feature the other API
mode lacks, say). A skip no line allows, or more of one kind than its count, fails the run
with the list in the terminal summary: skips that creep in unnoticed are tests that stopped
running. Expected failures (xfail) are not skips here.

``make test`` runs the suite on two workers (pytest-xdist, ``-n 2 --dist loadscope``): each
worker has a control plane of its own per testbed kind, so two modules never share a cluster.
A module is one unit of work, kept on one worker (its module-scoped operators and modes run in
order); the modules that start real nodes are one unit together, since a real node uses
host-wide paths and one runs per host at a time. The slowest modules are handed out first, so
that the two workers finish together instead of one waiting for the last long module.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator
from pathlib import Path
from typing import Any, Final

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


REAL_NODE_MODULES: Final = (
    "tests/e2e/test_real_node.py",
    "tests/e2e/test_real_node_helm.py",
    "tests/e2e/test_testbed_realnode.py",
)
"""The modules marked ``real_node`` (checked as workers collect): one unit of work."""

REAL_NODE_UNIT: Final = "real nodes"

SLOWEST_FIRST: Final = (
    "tests/e2e/test_robustness.py",
    "tests/e2e/test_responsive.py",
    "tests/e2e/test_faults.py",
    "tests/e2e/test_operator_ha.py",
    REAL_NODE_UNIT,
)
"""Units of work by their duration on CI (``--durations``), longest first: each is handed to
the first idle worker in this order, then the other e2e modules, then the rest (many short
modules that fill the gaps at the end)."""


def unit_of_work(nodeid: str) -> str:
    """The unit of work of a test under xdist: its module, or all the real-node modules."""
    module = nodeid.split("::", 1)[0]
    return REAL_NODE_UNIT if module in REAL_NODE_MODULES else module


def _rank(nodeid: str) -> tuple[int, int]:
    unit = unit_of_work(nodeid)
    if unit in SLOWEST_FIRST:
        return (0, SLOWEST_FIRST.index(unit))
    return (1 if unit.startswith("tests/e2e/") else 2, 0)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadscope`` with this suite's units of work (xdist's own scopes are modules
    and classes, and its groups are lost on pytest 9.2, where a test's id is no longer the
    attribute xdist rewrites)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class UnitsOfWork(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return unit_of_work(nodeid)

    return UnitsOfWork(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker (workers collect; the controller hands out the units in the order
    they collected them): the units slowest first, in a stable sort that keeps each unit's
    tests in their order; and every module marked ``real_node`` is in REAL_NODE_MODULES."""
    if not hasattr(config, "workerinput"):
        return
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        if item.get_closest_marker("real_node") is not None and module not in REAL_NODE_MODULES:
            raise pytest.UsageError(f"{module} is marked real_node: list it in REAL_NODE_MODULES")
    items.sort(key=lambda item: _rank(item.nodeid))


def _missing_build(reason: str) -> bool:
    return any(phrase in reason for phrase in MISSING_BUILD)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if os.environ.get("CI") != "true" or not report.skipped or hasattr(report, "wasxfail"):
        return report
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    if _missing_build(reason):
        report.outcome = "failed"
        report.longrepr = f"CI=true: a build the tests need is missing, not skipped: {reason}"
    return report


KNOWN_SKIPS: Final = Path(__file__).with_name("known-skips.txt")
_LINE: Final = re.compile(r"(\d+)\s+(\S.*)")
_skipped: list[tuple[str, str]] = []
_problems: list[str] = []


class KnownSkipsError(ValueError):
    """known-skips.txt has a line that is not ``COUNT PATTERN``."""


def known_skips(text: str) -> list[tuple[int, re.Pattern[str]]]:
    """``(count, pattern)`` per line of known-skips.txt: a count of at least 1, blanks, then
    a non-empty regular expression. Lines starting with ``#`` and blank lines are left out."""
    allowed = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.fullmatch(line)
        if match is None or int(match.group(1)) < 1:
            raise KnownSkipsError(f"{KNOWN_SKIPS.name}:{number}: expected COUNT PATTERN: {raw!r}")
        allowed.append((int(match.group(1)), re.compile(match.group(2).strip())))
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


def _judged(config: pytest.Config) -> bool:
    """A CI run of the suite as ``make test`` runs it: its test paths, no selection."""
    selected = config.getoption("keyword") or config.getoption("markexpr")
    whole = config.args_source is pytest.Config.ArgsSource.TESTPATHS and not selected
    return os.environ.get("CI") == "true" and whole


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "real_node: the module starts real nodes (host-wide paths): its tests share one unit "
        "of work with every other such module under xdist",
    )
    if os.environ.get("CI") == "true":
        known_skips(KNOWN_SKIPS.read_text())  # a broken allowance fails at once, not at the end


def _record_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    # An expected failure reports as skipped too; it is not a test that stopped running.
    if report.skipped and not hasattr(report, "wasxfail"):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        _skipped.append((report.nodeid, reason))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _record_skip(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """A module skipped as it is collected counts too (its tests never appear)."""
    _record_skip(report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _judged(session.config):
        return
    _problems.extend(unexpected_skips(_skipped, known_skips(KNOWN_SKIPS.read_text())))
    if _problems and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    if os.environ.get("CI") != "true":
        return
    if not _judged(config):
        terminalreporter.write_line(
            "CI=true: a selection of the suite; skips are not judged against tests/known-skips.txt"
        )
        return
    if _problems:
        terminalreporter.section("skips beyond tests/known-skips.txt", red=True)
        terminalreporter.write_line("tests that stopped running (CI fails on them):", red=True)
        for problem in _problems:
            terminalreporter.write_line(problem, red=True)
