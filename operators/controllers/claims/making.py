"""Claims made for a pod: one per template entry, and the claim its extended resources became.

Each is made once: a claim the pod already owns (recorded in its claim statuses, or found by
the owner index when the record is not written yet) is the answer. A claim that exists but is
not the pod's own is never adopted: the pod is told (:class:`ClaimError`), because another
pod's claim, recorded by whoever could write the pod, would hand it devices it was not
allocated.
"""

from __future__ import annotations

import structlog

from operators import metrics
from operators.api.extendedresources import ENTRY_NAME, ExtendedClaim
from operators.api.models import ResourceClaim, ResourceClaimTemplate
from operators.cache.assume import AssumeCache
from operators.cache.core import Namespace, Pod
from operators.cache.informer import Informer, Key
from operators.controllers import claimrules
from operators.controllers.runtime import Runtime
from operators.kube import RESOURCE_CLAIMS, ApiError, FailureKind, JsonDict, failure_kind

log = structlog.get_logger(__name__)


class ClaimError(Exception):
    """A problem with one pod claim the user must fix; becomes a Warning Event on the pod."""


class ClaimMaker:
    def __init__(
        self,
        runtime: Runtime,
        claims: AssumeCache[ResourceClaim],
        templates: Informer[ResourceClaimTemplate],
        namespaces: Informer[Namespace],
    ) -> None:
        self.runtime = runtime
        self.client = runtime.client
        self.protocol = runtime.protocol
        self.claims = claims
        self.templates = templates
        self.namespaces = namespaces
        self.gates = runtime.settings.feature_gates

    async def for_template(self, pod: Pod, entry_name: str, template_name: str) -> str:
        """The name of this pod's claim for a template entry, creating it if needed."""
        entry = next(c for c in pod.claims if c.name == entry_name)
        recorded = pod.claim_name(entry)
        if recorded:
            claim = self.claims.get(Key(pod.namespace, recorded))
            if claim is not None:
                if claimrules.owner_pod_uid(claim) != pod.uid:
                    raise ClaimError(
                        f"ResourceClaim {pod.namespace}/{recorded} was not created for pod "
                        f"{pod.ref} (pod is not owner)"
                    )
                return recorded
        generated = claimrules.generated_claim_name(
            self.claims.by_index(claimrules.CLAIMS_BY_OWNER_INDEX, pod.uid),
            entry_name,
            self.protocol,
        )
        if generated:
            return generated
        if recorded and self.protocol.claims_in_spec:
            # In-tree the pod's status names its generated claim for good: as with kcm, a
            # deleted one is not made again under another name (the operator's own pod-writes
            # policy refuses renaming a recorded entry too). The pod is told instead.
            raise ClaimError(
                f"ResourceClaim {pod.namespace}/{recorded}, made for this entry, was deleted; "
                "the pod cannot get its devices: delete the pod (its controller makes a new "
                "one) to have a claim made again"
            )
        template = self.templates.get(Key(pod.namespace, template_name))
        if template is None:
            raise ClaimError(f'resource claim template "{template_name}": not found')
        namespace: Namespace | None = self.namespaces.get(Key("", pod.namespace))
        refusal = claimrules.admin_access_refusal(
            template.spec.spec, namespace, self.gates["DRAAdminAccess"]
        )
        admin = str(claimrules.requests_admin_access(template.spec.spec)).lower()
        if refusal:
            metrics.CLAIM_CREATES.labels(status="failure", admin_access=admin).inc()
            raise ClaimError(refusal)
        body = claimrules.claim_body(pod, entry_name, template, self.protocol)
        created = await self._create(pod, body, str(body["metadata"]["generateName"]), admin)
        log.info("claim created", pod=pod.ref, claim=created.metadata.name, entry=entry_name)
        return created.metadata.name or ""

    async def for_extended(self, pod: Pod, extended: ExtendedClaim) -> None:
        """The claim the pod's extended resources became, created if it does not exist."""
        theirs = [
            r.device_class_name
            for r in extended.requests
            if r.device_class_name in self.runtime.settings.scheduler_classes
        ]
        if theirs:
            raise ClaimError(
                f"DeviceClass {', '.join(theirs)}: its extended resources are kube-scheduler's "
                "(scheduler_extended_classes), not a claim dralloc allocates"
            )
        claim = self.claims.get(Key(pod.namespace, extended.claim_name))
        if claim is not None:
            if claimrules.owner_pod_uid(claim) != pod.uid:
                raise ClaimError(
                    f"ResourceClaim {pod.namespace}/{extended.claim_name} was not created for "
                    f"pod {pod.ref} (pod is not owner)"
                )
            return
        body = claimrules.extended_claim_body(pod, extended, self.protocol)
        await self._create(pod, body, extended.claim_name, "false")
        log.info("claim created", pod=pod.ref, claim=extended.claim_name, entry=ENTRY_NAME)

    async def _create(self, pod: Pod, body: JsonDict, name: str, admin: str) -> ResourceClaim:
        """Create the claim; a refusal the user must fix is a :class:`ClaimError`, anything
        else (no answer, fencing) raises as it came for the work queue to retry."""
        try:
            created = await self.client.create(RESOURCE_CLAIMS, body, pod.namespace)
        except Exception as error:
            metrics.CLAIM_CREATES.labels(status="failure", admin_access=admin).inc()
            if await self.runtime.refused_by_fencing(error, pod.ref):
                raise  # not this replica's to make (it stops), or retried soon
            if isinstance(error, ApiError) and failure_kind(error) is FailureKind.REJECTED:
                raise ClaimError(f"create ResourceClaim {name}: {error.message}") from error
            raise  # not answered, or not yet: the work queue retries
        metrics.CLAIM_CREATES.labels(status="success", admin_access=admin).inc()
        return self.claims.assume(created)
