"""Pods released to a node that kube-scheduler then refuses: report, and recreate what can be.

The allocation loop pins a pod to a node that passes every filter dralloc models, then
removes the gate. kube-scheduler can still refuse the pod there: something dralloc does not
model (volumes, a plugin of a custom profile), or a race (a pod bound by the scheduler takes
the last cpu between the release and the bind). The pinned pod then waits forever with its
devices held, and a gate cannot be put back. So a pod that stays unbound for
``release_grace`` seconds while the scheduler reports it Unschedulable is not left alone:

- a pod a controller owns (ReplicaSet, Job, StatefulSet, ...) is deleted, with a UID and
  resourceVersion precondition, so the controller makes a new pod that dralloc places
  afresh (``recreate_refused_pods``); its claims go with it;
- a bare pod keeps its devices (and its pin): the pod condition says why with the
  scheduler's own message, and a Warning Event tells the user what to do. Freeing its claims
  would race kube-scheduler: its verdict may come from a view that lags (after an API server
  restart its watches take up to a minute to recover), and on that view it binds the pod
  with the allocation it still sees, so the pod would run on a node where its claims hold
  nothing (the robustness suite caught that: four pods bound without devices for a second).

In-tree, kube-scheduler also holds back, without a condition or an Event, a pod one of whose
claims is being deleted or gone (its DRA plugin's PreEnqueue keeps the pod out of its queue):
a user deleting a released pod's claim before its binding left the pod Pending forever with
nothing said (the robustness suite found one). dralloc says it instead (``held_back``), and a
pod a controller owns is recreated as above.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog

from operators.api.models import ResourceClaim
from operators.cache.core import DEVICES_ANNOTATION, Pod
from operators.cache.informer import Change, Informer, Key
from operators.controllers import podcondition
from operators.controllers.runtime import Runtime, register_controller, retry_forever
from operators.kube import PODS, RESOURCE_CLAIMS, Conflict, NotFound, failure_kind

log = structlog.get_logger(__name__)

REASON_REFUSED = "SchedulerRefused"
CHECK_PERIOD = 1.0
REFUSAL_MEMORY = 300.0  # seconds a controller's new pods keep off a node that refused one


def scheduler_refusal(pod: Pod) -> str | None:
    """kube-scheduler's message if it last found the pod unschedulable, else None."""
    for condition in pod.conditions:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return str(condition.get("message") or "no reason given")
    return None


def held_back(pod: Pod, claims: Informer[ResourceClaim]) -> str | None:
    """Why kube-scheduler holds the pod back without saying so, if it does: a claim of the
    pod is being deleted or gone (in-tree, where kube-scheduler reads the pod's claims)."""
    for name in pod.claim_names():
        claim = claims.get(Key(pod.namespace, name))
        if claim is None:
            what = "does not exist"
        elif claim.metadata.deletion_timestamp is not None:
            what = "is being deleted"
        else:
            continue
        return (
            f"its ResourceClaim {name} {what}, and kube-scheduler holds such a pod back "
            "without a condition or an Event"
        )
    return None


def is_released_unbound(pod: Pod, pinned: bool = True) -> bool:
    """Released by the allocation loop (ungated, its devices written, and pinned to one node
    where the API mode pins) and not bound yet."""
    needs = pod.needs
    return (
        bool(pod.claims)
        and DEVICES_ANNOTATION in pod.annotations
        and not pod.gated
        and not pod.node_name
        and not pod.done
        and not pod.deleting
        and (bool(needs.pinned_node) or not pinned)
    )


class ReleasedPodsController:
    name = "released-pods"

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.client = runtime.client
        self.settings = runtime.settings
        self.pods = runtime.cache[PODS]
        self.claims = runtime.cache[RESOURCE_CLAIMS]
        # In-tree, kube-scheduler reads the pod's claims, and holds it back silently when one
        # is being deleted or gone (``held_back``).
        self.scheduler_reads_claims = runtime.protocol.claims_in_spec
        # In-tree, dralloc also allocates pods that passed the gate by, which it cannot pin:
        # they are released pods too (unbound, they hold their devices).
        self.pinned = runtime.protocol.pins_node and not runtime.protocol.allocates_ungated
        self.since: dict[Key, float] = {}
        self.undone = 0
        self.pods.add_handler(self._on_pod)

    def _on_pod(self, change: Change[Pod]) -> None:
        pod = change.new
        if pod is not None and is_released_unbound(pod, self.pinned):
            self.since.setdefault(change.key, time.monotonic())
        else:
            self.since.pop(change.key, None)

    async def run(self) -> None:
        await retry_forever(self.name, self._loop)

    def health(self) -> dict[str, Any]:
        return {"released_unbound": len(self.since), "undone": self.undone}

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(CHECK_PERIOD)
            now = time.monotonic()
            for key, since in sorted(self.since.items()):
                if now - since < self.settings.release_grace:
                    continue
                pod = self.pods.get(key)
                if pod is None or not is_released_unbound(pod, self.pinned):
                    self.since.pop(key, None)
                    continue
                message = scheduler_refusal(pod)
                if message is None and self.scheduler_reads_claims:
                    message = held_back(pod, self.claims)
                if message is None:
                    continue  # the scheduler has not said no (yet): keep waiting
                try:
                    await self._undo(pod, message)
                except (Conflict, NotFound):
                    continue  # changed under us: look again next period
                except Exception as error:
                    if failure_kind(error) is None:
                        raise
                    log.warning("undoing a refused release failed", pod=pod.ref, error=str(error))
                    continue
                self.since.pop(key, None)
                self.undone += 1

    async def _undo(self, pod: Pod, message: str) -> None:
        """The first write is conditional on the pod version that was refused: if the
        scheduler binds the pod meanwhile, nothing is done (the deletion conflicts; the
        condition is no longer needed)."""
        node = pod.needs.pinned_node  # '' for a pod that passed the gate by (in-tree)
        # Deleting (with the refused version as precondition) is the one undo that cannot
        # race kube-scheduler binding the pod meanwhile; freeing the claims of a bare pod
        # can (see the module's docstring), so a bare pod keeps them.
        recreate = bool(pod.controller) and self.settings.recreate_refused_pods
        where = f" to node {node}" if node else ""
        summary = (
            f"kube-scheduler did not bind the pod{where} within "
            f"{self.settings.release_grace:g}s: {message}"
        )
        if recreate:
            # Its claims go with it (the claim controller frees them once the pod is gone);
            # its controller's next pod keeps off this node for a while.
            await self.client.delete(
                PODS,
                pod.name,
                namespace=pod.namespace,
                uid=pod.uid,
                resource_version=pod.resource_version,
            )
            if node:
                self.runtime.refusals.add(
                    pod.namespace, pod.controller, node, time.monotonic() + REFUSAL_MEMORY
                )
            outcome = f"the pod is deleted so that {pod.controller} recreates it"
        else:
            outcome = (
                "the pod keeps its devices (kube-scheduler may yet bind it); delete it to give "
                "them back, or free what it needs on the node"
            )
            written = await podcondition.set_condition(
                self.client,
                pod,
                "True",
                REASON_REFUSED,
                f"{summary}; {outcome}",
                still_needed=lambda fresh: not fresh.node_name,
                protocol=self.runtime.protocol,
            )
            if not written:
                return  # bound meanwhile, gone, or said already: nothing new to tell
        await self.runtime.events.post(
            pod.involved(), REASON_REFUSED, f"{summary}; {outcome}", warning=True
        )
        log.warning("released pod refused by the scheduler", pod=pod.ref, node=node)


register_controller(
    ReleasedPodsController.name,
    lambda runtime: (
        ReleasedPodsController(runtime) if runtime.settings.allocation_controller else None
    ),
)
