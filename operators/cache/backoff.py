"""Exponential backoff without jitter, so that retries are reproducible in tests and logs."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Backoff:
    """Delays ``base, 2*base, 4*base, ...`` capped at ``cap``; ``reset`` after a success."""

    base: float = 0.2
    cap: float = 30.0
    failures: int = 0

    def next(self, cap: float | None = None) -> float:
        """The next delay; ``cap`` lowers the ceiling for this one (the count still grows)."""
        ceiling = self.cap if cap is None else min(cap, self.cap)
        delay = min(ceiling, self.base * (2 ** min(self.failures, 62)))
        self.failures += 1
        return delay

    def reset(self) -> None:
        self.failures = 0
