"""Log lines with an exception come out whole in both formats, traceback included, and
without local variables."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from operators import logs


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    config = structlog.get_config()
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.configure(**config)


def fail_with_a_secret() -> None:
    token = "secret-token-value"  # a local that must never reach the log
    raise ZeroDivisionError(f"division by zero ({len(token)})")


def log_failure(logger: structlog.stdlib.BoundLogger | logging.Logger) -> None:
    try:
        fail_with_a_secret()
    except ZeroDivisionError:
        if isinstance(logger, logging.Logger):
            logger.exception("kopf-style failure")
        else:
            logger.exception("write failed", pod="ns/p")


@pytest.mark.usefixtures("restore_logging")
def test_console_format_prints_the_line_and_the_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.configure("INFO", "console")
    log_failure(structlog.get_logger("operators.test"))
    log_failure(logging.getLogger("kopf.test"))  # a foreign (stdlib) record
    try:
        fail_with_a_secret()
    except ZeroDivisionError as error:  # as the work queue logs a failed sync
        structlog.get_logger("operators.test").error("sync failed", exc_info=error)
    structlog.get_logger("operators.test").info("after", n=1)
    err = capsys.readouterr().err
    assert "Logging error" not in err, err
    assert "TypeError" not in err, err
    [ours] = [line for line in err.splitlines() if "write failed" in line]
    assert "pod=ns/p" in ours and "error" in ours
    assert any("kopf-style failure" in line for line in err.splitlines())
    assert any("sync failed" in line for line in err.splitlines())
    assert err.count("Traceback (most recent call last)") == 3
    assert err.count("ZeroDivisionError: division by zero (18)") == 3
    assert "in fail_with_a_secret" in err
    assert "secret-token-value" not in err
    assert "after" in err.splitlines()[-1]


@pytest.mark.usefixtures("restore_logging")
def test_json_format_carries_the_exception_without_locals(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.configure("INFO", "json")
    log_failure(structlog.get_logger("operators.test"))
    [line] = capsys.readouterr().err.splitlines()
    record = json.loads(line)
    assert record["event"] == "write failed" and record["pod"] == "ns/p"
    [exception] = record["exception"]
    assert exception["exc_type"] == "ZeroDivisionError"
    assert "secret-token-value" not in line
