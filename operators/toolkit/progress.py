"""A progress bar on stderr for long simulations.

It stays silent on short runs and when stderr is not a terminal (``auto``), so that piping
``--output json`` into another tool never mixes bars into the data: the data goes to stdout,
the bar to stderr, and the bar only after a run has taken ``delay`` seconds.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

BAR_WIDTH = 30


class Progress:
    def __init__(
        self,
        total: int,
        label: str,
        *,
        mode: str = "auto",
        stream: TextIO | None = None,
        delay: float = 0.5,
        interval: float = 0.1,
    ) -> None:
        self.total = max(total, 0)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.delay = 0.0 if mode == "always" else delay
        self.interval = 0.0 if mode == "always" else interval
        interactive = getattr(self.stream, "isatty", lambda: False)()
        self.enabled = mode == "always" or (mode == "auto" and interactive)
        self.done = 0
        self.started = time.monotonic()
        self._last_draw = 0.0
        self._drawn = False

    def advance(self, steps: int = 1) -> None:
        self.done = min(self.total, self.done + steps)
        if not self.enabled:
            return
        now = time.monotonic()
        due = now - self.started >= self.delay and now - self._last_draw >= self.interval
        if due or (self._drawn and self.done == self.total):
            self._draw(now)

    def close(self) -> None:
        if self.enabled and self._drawn:
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()

    def _draw(self, now: float) -> None:
        share = self.done / self.total if self.total else 1.0
        filled = int(share * BAR_WIDTH)
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        elapsed = now - self.started
        self.stream.write(
            f"\r{self.label} [{bar}] {self.done}/{self.total} {share:4.0%} {elapsed:5.1f}s"
        )
        self.stream.flush()
        self._last_draw = now
        self._drawn = True

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
