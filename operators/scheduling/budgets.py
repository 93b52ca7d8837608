"""PodDisruptionBudgets as evictions and preemption weigh them: whose pods they cover, and how
many of those may go now.

The operator reads them (policy/v1) to choose preemption victims as kube-scheduler does (the
fewest budget violations first); the toolkit reads them from snapshots to tell which simulated
evictions a budget would refuse.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from operators.scheduling.model import LabelSelector


@dataclass(frozen=True)
class Budget:
    """A PodDisruptionBudget as far as an eviction asks it: whose pods, how many may go."""

    namespace: str
    name: str
    selector: LabelSelector | None
    allowed: int
    """status.disruptionsAllowed; 0 while the disruption controller has not processed the
    budget's current generation (the API server then refuses every eviction it covers)."""

    @property
    def weighs_on_preemption(self) -> bool:
        """Whether preemption counts this budget: upstream's preemption takes a budget with
        a null or empty selector to match nothing (the Eviction API takes an empty one to
        match every pod of the namespace, which :meth:`covers` follows)."""
        return self.selector is not None and bool(self.selector.requirements)

    def covers(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return (
            namespace == self.namespace
            and self.selector is not None
            and self.selector.matches(labels)
        )


def parse_budget(body: Mapping[str, Any]) -> Budget:
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    processed = int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0)
    spec = body.get("spec") or {}
    return Budget(
        str(meta.get("namespace") or "default"),
        str(meta.get("name") or ""),
        LabelSelector.parse(spec.get("selector")),
        int(status.get("disruptionsAllowed") or 0) if processed and status else 0,
    )
