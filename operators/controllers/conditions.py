"""metav1.Condition entries as the controllers write them (pods, claims, DeviceTaintRules).

One place for the rules every condition write follows: the other conditions of the list are
kept, ``lastTransitionTime`` moves only when the status changes, and a condition that already
says the same is not written again.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

from operators.api.meta import Condition
from operators.kube import timestamp


def condition(
    type_: str,
    status: str,
    reason: str,
    message: str,
    *,
    transition: datetime.datetime | str | None = None,
    observed_generation: int | None = None,
) -> dict[str, Any]:
    """One condition; ``transition`` is when its status last changed (now if None), or the
    timestamp it already carries."""
    entry: dict[str, Any] = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": transition if isinstance(transition, str) else timestamp(transition),
    }
    if observed_generation is not None:
        entry["observedGeneration"] = observed_generation
    return entry


def find(conditions: Sequence[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def set_condition(
    conditions: Sequence[Condition],
    type_: str,
    status: str,
    reason: str,
    message: str,
    *,
    now: datetime.datetime | None = None,
    observed_generation: int | None = None,
) -> list[dict[str, Any]] | None:
    """The whole list with this condition set; None if it already says exactly this."""
    current = find(conditions, type_)
    if current is not None and (
        current.status,
        current.reason,
        current.message,
        current.observed_generation,
    ) == (status, reason, message, observed_generation):
        return None
    kept = current is not None and current.status == status
    ours = condition(
        type_,
        status,
        reason,
        message,
        transition=current.to_kube()["lastTransitionTime"] if kept else now,  # type: ignore[union-attr]
        observed_generation=observed_generation,
    )
    return [*(c.to_kube() for c in conditions if c.type != type_), ours]


def remove_condition(conditions: Sequence[Condition], type_: str) -> list[dict[str, Any]] | None:
    """The list without this condition; None if it is not there."""
    if find(conditions, type_) is None:
        return None
    return [c.to_kube() for c in conditions if c.type != type_]


def event_target(obj: Any) -> dict[str, Any]:
    """The minimal object an Event needs to point at a namespaced API object of ours (a
    model with ``api_version``, ``kind`` and ``metadata``): Events go where conditions do."""
    return {
        "apiVersion": obj.api_version,
        "kind": obj.kind,
        "metadata": {
            "namespace": obj.metadata.namespace,
            "name": obj.metadata.name,
            "uid": obj.metadata.uid,
            "resourceVersion": obj.metadata.resource_version,
        },
    }
