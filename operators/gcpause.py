"""Garbage-collector pauses: counted as a metric, and made rarer once the cache is loaded.

The operator keeps every pod, claim and slice of the cluster as Python objects, so a full
collection walks hundreds of thousands of objects while the event loop stands still; the
pauses then land in whatever request or decision happened to allocate at that moment, which
is why a profile shows them as slow dataclass constructors. Two remedies, both standard for
long-running CPython services:

* after the initial list, :func:`settle` moves everything loaded so far into the permanent
  generation (``gc.freeze``), which collections no longer walk;
* a larger first-generation threshold makes young collections (and the older ones they
  trigger) less frequent; objects die young here (watch events, responses), so little is
  kept for longer.

``dralloc_gc_pause_seconds_total`` shows what is left, by generation.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from prometheus_client import Counter

GC_PAUSE_SECONDS = Counter(
    "dralloc_gc_pause_seconds_total",
    "Seconds the process stood still in garbage collections, by generation.",
    ["generation"],
)
DEFAULT_YOUNG_THRESHOLD = 700  # CPython's own

_started: list[float] = []
_installed = False


def _on_collection(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started.append(time.perf_counter())
    elif _started:
        GC_PAUSE_SECONDS.labels(generation=str(info.get("generation", ""))).inc(
            time.perf_counter() - _started.pop()
        )


def configure(young_threshold: int) -> None:
    """Count pauses from now on, and set the first generation's threshold."""
    global _installed
    if not _installed:
        gc.callbacks.append(_on_collection)
        _installed = True
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(young_threshold, older, oldest)


def settle() -> None:
    """Collect once, then exclude what survives (the loaded cache) from later collections."""
    gc.collect()
    gc.freeze()


def pause_seconds() -> float:
    """Total pause time counted so far (all generations)."""
    return sum(
        sample.value
        for metric in GC_PAUSE_SECONDS.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    )
