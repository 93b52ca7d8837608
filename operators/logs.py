"""Structured logs: one JSON object a line (or a console line, ``--log-format console``),
for our records and for kopf's and aiohttp's.

Log lines carry object references (``pod=ns/name``), never object bodies, and tracebacks are
rendered without local variables (structlog's default would include them, and with them
tokens and bodies).
"""

from __future__ import annotations

import logging
import sys

import structlog


def configure(level: str = "INFO", fmt: str = "json") -> None:
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        structlog.stdlib.ExtraAdder(allow=["k8s_ref"]),
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *_render(fmt)],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # kopf's per-object "Handler succeeded" chatter and aiohttp's access log are noise here.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)


def _render(fmt: str) -> list[structlog.types.Processor]:
    """The last processors: the exception, then the line.

    JSON carries the exception as structured frames. The console renderer wants text (given
    the frames it fails on every record with an exception and the line is lost), so it
    formats the exception itself, as a plain traceback: the default one, rich's, would
    print local variables.
    """
    if fmt == "json":
        return [
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
            ),
            structlog.processors.JSONRenderer(),
        ]
    return [
        structlog.dev.ConsoleRenderer(
            colors=False, exception_formatter=structlog.dev.plain_traceback
        )
    ]
