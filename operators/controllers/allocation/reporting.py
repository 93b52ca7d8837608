"""Telling the user why a pod waits: its condition, its claims' conditions, Events on both.

Each write happens only when what it says changes, so a waiting pod costs no writes while
nothing changes.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Callable

import structlog

from operators.api.models import ResourceClaim
from operators.cache.assume import AssumeCache
from operators.cache.core import Pod, PodResourceClaim
from operators.cache.informer import Key
from operators.controllers import claimstatus, podcondition
from operators.controllers.allocation.outcomes import POD_REASON_UNALLOCATABLE, Unallocatable
from operators.controllers.claimrules import is_allocated
from operators.controllers.runtime import Runtime
from operators.kube import Conflict, KubeClient, NotFound

log = structlog.get_logger("operators.controllers.allocation")

REASON_FAILED = "FailedAllocation"
MAX_DETAIL_LINES = 5  # per-node-group lines in the Event after the summary


class Reporter:
    """Where the allocation controller tells a pod's user what became of it."""

    def __init__(
        self,
        runtime: Runtime,
        claims: AssumeCache[ResourceClaim],
        claim_name: Callable[[Pod, PodResourceClaim], str | None],
    ) -> None:
        self.runtime = runtime
        self.client: KubeClient = runtime.client
        self.claims = claims
        self.claim_name = claim_name
        """The claim a pod's entry names, recorded or generated (see ``Decider.claim_name``)."""

    async def explain(self, pod: Pod, reason: Unallocatable, *, events: bool = True) -> None:
        """Tell the user why, where they look: pod and claim conditions, Events on both.
        Without ``events``, the conditions only (a gang's members: one of them carries the
        gang's Events)."""
        await self.set_claim_conditions(pod, reason)
        message = reason.summary
        current = podcondition.current(pod)
        if current is not None and current.get("message") == message:
            return  # unchanged: no write, no new Event
        log.info("pod not allocatable", pod=pod.ref, reason=message)
        if events:
            await self.post_events(pod, reason)
        # A conflict means the pod changed; the next sync explains again if still needed.
        with contextlib.suppress(Conflict, NotFound):
            await self.set_condition(pod, "False", reason.pod_reason, message)

    async def post_events(self, pod: Pod, reason: Unallocatable) -> None:
        message = reason.summary
        detailed = "\n".join([message, *reason.details[:MAX_DETAIL_LINES]])
        if reason.pod_reason != POD_REASON_UNALLOCATABLE:
            await self.runtime.events.post(pod.involved(), reason.pod_reason, detailed)
            return  # it is on its way: nothing for its claims to say
        await self.runtime.events.post(pod.involved(), REASON_FAILED, detailed, warning=True)
        for entry in pod.claims:
            name = self.claim_name(pod, entry)
            claim = self.claims.get(Key(pod.namespace, name)) if name else None
            if claim is not None and not is_allocated(claim):
                await self.runtime.events.post(
                    claimstatus.involved(claim),
                    REASON_FAILED,
                    f"pod {pod.ref}: {message}",
                    warning=True,
                )

    async def set_claim_conditions(self, pod: Pod, reason: Unallocatable) -> None:
        """Each waiting claim's Allocated=False condition, written only when it changes."""
        if not self.runtime.protocol.claim_conditions:
            return
        now = datetime.datetime.now(datetime.UTC)
        for entry in pod.claims:
            name = self.claim_name(pod, entry)
            claim = self.claims.get(Key(pod.namespace, name)) if name else None
            message = reason.claims.get(str(Key(pod.namespace, name or "")))
            if claim is None or message is None or is_allocated(claim):
                continue
            updated_conditions = claimstatus.updated_conditions(
                claim, "False", reason.reason, message, now
            )
            if updated_conditions is None:
                continue
            # A conflict means the claim changed; the next explanation writes it again.
            with contextlib.suppress(Conflict, NotFound):
                await claimstatus.patch_status(
                    self.client,
                    self.claims,
                    name or "",
                    pod.namespace,
                    claim.metadata.resource_version,
                    {"conditions": updated_conditions},
                )

    async def set_condition(
        self,
        pod: Pod,
        status: str,
        reason: str,
        message: str,
        *,
        resource_version: str | None = None,
    ) -> None:
        # A conflict is retried from a fresh read while the pod still needs this condition:
        # True once it has devices, False while it has none (see podcondition).
        await podcondition.set_condition(
            self.client,
            pod,
            status,
            reason,
            message,
            still_needed=podcondition.has_devices if status == "True" else podcondition.no_devices,
            protocol=self.runtime.protocol,
            resource_version=resource_version,
        )
