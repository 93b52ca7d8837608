"""The pod condition dralloc keeps, ``resource.dralloc.dev/DevicesAllocated``, and its write.

The condition tells the user where they look whether the pod got devices: False with the
reason while it waits (or while its claims annotation is refused), True once allocated.
Others write the pod at the same moments (kube-scheduler binds a pod as soon as its gate is
gone, the kubelet writes its status), so a write conditional on the resourceVersion we read
often conflicts. Giving up then leaves the condition stale for good: nothing else makes us
write it again (a running pod kept "False" with an old reason). So a conflicting write is
retried from a fresh read, a bounded number of times, and only while the fresh pod is the
same pod (UID) and still needs the change; the precondition stays, so the decision and the
write are about the same version of the pod.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import structlog

from operators.api.podprotocol import DRALLOC, PodProtocol
from operators.cache.core import DEVICES_ALLOCATED_CONDITION, DEVICES_ANNOTATION, Pod, parse_pod
from operators.controllers import conditions
from operators.kube import PODS, STRATEGIC_MERGE_PATCH, Conflict, KubeClient, NotFound

log = structlog.get_logger(__name__)

CONDITION_TYPE = DEVICES_ALLOCATED_CONDITION
REASON_ALLOCATED = "Allocated"
"""The reason of the True condition: the pod's claims are allocated for it."""
MAX_ATTEMPTS = 5  # writes of one condition, the first included


def current(pod: Pod) -> dict[str, Any] | None:
    """The pod's DevicesAllocated condition, if it has one."""
    for condition in pod.conditions:
        if condition.get("type") == CONDITION_TYPE:
            return dict(condition)
    return None


def says(pod: Pod, status: str, reason: str, message: str) -> bool:
    """Whether the pod's condition already says exactly this."""
    found: Mapping[str, Any] = current(pod) or {}
    return (found.get("status"), found.get("reason"), found.get("message")) == (
        status,
        reason,
        message,
    )


def has_devices(pod: Pod) -> bool:
    """The True condition is still needed: the pod still shows the devices we wrote.

    Only whether to retry a condition write hangs on this; whether the pod is allocated is
    its claims' answer, never the annotation's."""
    return DEVICES_ANNOTATION in pod.annotations


def no_devices(pod: Pod) -> bool:
    """The False condition is still needed: the pod shows no devices (yet)."""
    return DEVICES_ANNOTATION not in pod.annotations


async def set_condition(
    client: KubeClient,
    pod: Pod,
    status: str,
    reason: str,
    message: str,
    *,
    still_needed: Callable[[Pod], bool],
    resource_version: str | None = None,
    protocol: PodProtocol = DRALLOC,
) -> bool:
    """Write the condition on ``pod`` (at ``resource_version``, default the pod's own).

    On a conflict, read the pod again and write again if it is the same pod, ``still_needed``
    holds for it and its condition does not already say this; at most :data:`MAX_ATTEMPTS`
    writes, then the last :class:`Conflict` is raised. Returns whether it was written; False
    also when the pod is gone.
    """
    if says(pod, status, reason, message):
        return False
    version = resource_version or pod.resource_version
    condition = conditions.condition(CONDITION_TYPE, status, reason, message)
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            await client.request(
                "PATCH",
                PODS.path(pod.namespace, pod.name, "status"),
                body={
                    "metadata": {"resourceVersion": version},
                    "status": {"conditions": [condition]},
                },
                content_type=STRATEGIC_MERGE_PATCH,
            )
            return True
        except NotFound:
            return False
        except Conflict:
            if attempt == MAX_ATTEMPTS:
                raise
        try:
            fresh = parse_pod(await client.get(PODS, pod.name, pod.namespace), protocol)
        except NotFound:
            return False
        if fresh.uid != pod.uid or not still_needed(fresh) or says(fresh, status, reason, message):
            return False
        log.info("pod condition conflicted; writing again", pod=pod.ref, status=status)
        version = fresh.resource_version
    raise AssertionError("unreachable")  # pragma: no cover
