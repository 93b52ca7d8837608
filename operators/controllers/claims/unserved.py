"""Pods that ask for DRA extended resources no claim serves: they came past the webhook.

dralloc's admission webhook turns a pod's extended resources that a DeviceClass backs into a
claim. A pod created while the webhook was unavailable, or before the class named the resource,
has no such claim, and kube-scheduler may allocate devices dralloc manages to it. Such a pod is
told where the user looks; where a ReplicaSet or StatefulSet owns it, it is deleted for its
owner to make it again (its next pod passes the webhook). Other owners are not asked: a Job
counts a deleted pod as failed, and others may not make it again at all.
"""

from __future__ import annotations

import contextlib
import datetime
import time

import structlog

from operators.api.deviceclass import DeviceClass
from operators.api.extendedresources import served_mapping
from operators.cache.core import Namespace, Pod
from operators.cache.informer import Informer, Key
from operators.controllers import claimrules, podcondition
from operators.controllers.runtime import Runtime
from operators.kube import PODS, NotFound

log = structlog.get_logger(__name__)

REASON_EXTENDED_NOT_SERVED = "ExtendedResourcesNotServed"  # event, and condition of a bare pod
RECREATE_MEMORY = 600.0  # s: one untranslated pod per controller is deleted to be made again
RECREATED_OWNERS = ("ReplicaSet", "StatefulSet")  # make a deleted pod again, no harm done


class UnservedExtended:
    def __init__(
        self,
        runtime: Runtime,
        namespaces: Informer[Namespace],
        classes: Informer[DeviceClass],
    ) -> None:
        self.runtime = runtime
        self.client = runtime.client
        self.namespaces = namespaces
        self.classes = classes
        self.translates = runtime.settings.translates_extended_resources
        self._mapping: dict[str, str] | None = None
        # Controllers whose untranslated pod was deleted to be made again: when (the API
        # server's timestamp format, to compare with creationTimestamp; and monotonic).
        self.recreated_for: dict[tuple[str, str], tuple[str, float]] = {}

    def classes_changed(self) -> None:
        """Extended resource names may map elsewhere now."""
        self._mapping = None

    def _class_mapping(self) -> dict[str, str]:
        """Extended resource name -> class, for the classes dralloc serves them for."""
        if self._mapping is None:
            scheduler_classes = self.runtime.settings.scheduler_classes
            self._mapping = served_mapping(self.classes.values(), scheduler_classes)
        return self._mapping

    def of(self, pod: Pod) -> list[str]:
        """The extended resources a pod in a served namespace asks for that nobody turned
        into a claim (see claimrules.unserved_extended_resources)."""
        if not self.translates or not any("/" in name for name in pod.needs.requests):
            return []
        namespace: Namespace | None = self.namespaces.get(Key("", pod.namespace))
        if not self.runtime.settings.serves_namespace(
            pod.namespace, namespace.labels if namespace else None
        ):
            return []
        return claimrules.unserved_extended_resources(pod, self._class_mapping())

    async def report(self, pod: Pod, unserved: list[str]) -> float | None:
        """Say why the pod waits, and have it made again where its owner can; the seconds
        after which to look at the pod again (None: at its next change)."""
        owner = (pod.namespace, pod.controller)
        now = time.monotonic()
        deleted_at = self.recreated_for.get(owner)
        # A pod the owner made after we deleted one of its pods came back untranslated too
        # (no webhook configured for it?): no loop of deletes; looked at again later.
        came_back = (
            deleted_at is not None
            and now - deleted_at[1] < RECREATE_MEMORY
            and pod.created >= deleted_at[0]
        )
        recreate = (
            pod.controller.partition("/")[0] in RECREATED_OWNERS
            and self.runtime.settings.recreate_refused_pods
            and not came_back
        )
        if recreate:
            outcome = f"the pod is deleted so that {pod.controller} creates it again"
        elif came_back:
            outcome = (
                f"{pod.controller}'s pods keep arriving untranslated: is dralloc's mutating "
                "webhook configured for them (components/gate-by-policy removes it)?"
            )
        else:
            outcome = "delete the pod and create it again"
        message = (
            f"the pod asks for {', '.join(unserved)} as extended resources, but it was "
            "created without dralloc's admission webhook (unavailable, or the class is "
            "newer than the pod), so no claim serves them and kube-scheduler may not "
            f"allocate devices dralloc manages; {outcome}"
        )
        if recreate:
            # A conflict (the pod changed) raises: the work queue reads it again.
            with contextlib.suppress(NotFound):
                await self.client.delete(
                    PODS,
                    pod.name,
                    namespace=pod.namespace,
                    uid=pod.uid,
                    resource_version=pod.resource_version,
                )
            self._remember_recreated(owner, now)
            await self.runtime.events.post(
                pod.involved(), REASON_EXTENDED_NOT_SERVED, message, warning=True
            )
            log.info("pod deleted for its controller to recreate", pod=pod.ref)
            return None
        await self.runtime.events.post(
            pod.involved(), REASON_EXTENDED_NOT_SERVED, message, warning=True
        )
        await podcondition.set_condition(
            self.client,
            pod,
            "False",
            REASON_EXTENDED_NOT_SERVED,
            message,
            still_needed=lambda fresh: bool(self.of(fresh)),
            protocol=self.runtime.protocol,
        )
        if came_back and deleted_at is not None:
            return RECREATE_MEMORY - (now - deleted_at[1])
        return None

    def _remember_recreated(self, owner: tuple[str, str], now: float) -> None:
        for key, (_, at) in list(self.recreated_for.items()):
            if now - at >= RECREATE_MEMORY:
                del self.recreated_for[key]
        wall = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.recreated_for[owner] = (wall, now)
