"""What the device-taint controller has scheduled, done and been refused: written by the
eviction worker, read by the rules' status (their condition counts pending, refused and done
evictions per rule)."""

from __future__ import annotations

import collections
import dataclasses

from operators.cache.informer import Key
from operators.controllers.taintrules import ClaimEviction


@dataclasses.dataclass
class EvictionLedger:
    scheduled: dict[Key, tuple[str, ClaimEviction]] = dataclasses.field(default_factory=dict)
    """Pod -> (its UID, its eviction): evictions due now or later."""
    refused: dict[Key, str] = dataclasses.field(default_factory=dict)
    """Pod -> the disruption budget's words, while a budget refuses its eviction."""
    evicted_by_rule: collections.Counter[str] = dataclasses.field(
        default_factory=collections.Counter
    )
    """Rule name -> pods evicted for it since this process started."""
    evictions: int = 0
    """Pods evicted since this process started."""

    def pending_for(self, rule: str) -> list[Key]:
        return [key for key, (_, eviction) in self.scheduled.items() if rule in eviction.rules]
