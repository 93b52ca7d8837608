"""DRA extended resources served as an ordinary claim of the pod (in-tree mode).

A pod may ask for devices the old way, ``resources.requests: {example.com/gpu: 1}``, where a
DeviceClass backs that name (``spec.extendedResourceName``, or implicitly
``deviceclass.resource.kubernetes.io/<class>``; DRAExtendedResource, GA in 1.37).
kube-scheduler meets such a request with a claim it makes itself in PreBind, and it takes no
such claim made by anyone else: its Filter fails a pod whose extended-resource claim already
exists and its PostFilter deletes that claim. Beside dralloc that would be a second
allocator of the same devices (or, with the claim-allocation policy, a pod refused for ever).

So dralloc turns the request into an ordinary claim when the pod is created, before anyone
schedules it: the admission webhook takes the extended resources out of the containers'
requests and limits, names one claim for the pod in ``spec.resourceClaims`` (a name it
chooses, since it is the claim controller, not kube-controller-manager, that creates it) with
one device request per container and resource (``container-<i>-request-<j>``, ``i`` counting
init containers first, ``j`` the resource's place among the container's sorted requests, as
kube-scheduler names them), points each container's ``resources.claims`` at its own request,
and records the requests in an annotation. The claim controller creates that claim, owned by
the pod. From then on the pod is a claims pod like any other: gated, allocated by dralloc
alone, counted by DeviceQuota, explained and simulated the same way, and prepared by the
kubelet and the driver as any claim (each container gets only its own devices).

The annotation is the one input dralloc takes from it, and it is checked as input: a claim of
whole devices of named classes, at most what one claim may hold, never admin access, and only
for a pod whose ``spec.resourceClaims`` names that claim under :data:`ENTRY_NAME`. Anyone who
can create the pod could have asked for the same devices with the extended resources
themselves, so a forged annotation gains nothing more.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Annotated, Any, Final

from pydantic import Field, ValidationError, model_validator

from operators.api import limits
from operators.api.base import SHARED_PARTS, DNSLabel, DNSSubdomain, KubeModel, LabelKey
from operators.api.deviceclass import DeviceClass
from operators.api.fielderrors import describe
from operators.api.models import GROUP
from operators.api.quantity import Quantity, QuantityParseError

EXTENDED_RESOURCES_ANNOTATION: Final = f"{GROUP}/extended-resources"
"""Pod annotation (admission webhook): the claim the pod's extended resources became."""
ENTRY_NAME: Final = "dralloc-extended-resources"
"""The pod's ``spec.resourceClaims`` entry (and containers' ``resources.claims`` name)."""
IMPLICIT_PREFIX: Final = "deviceclass.resource.kubernetes.io/"
"""Every class is reachable as ``<prefix><class name>``, besides its explicit name."""
CLAIM_SUFFIX: Final = "-extended-resources-"
RANDOM_LENGTH: Final = 10
"""Random characters ending a claim name: 40 bits, so the pods of one ReplicaSet (one
generateName) do not meet one another's names (about 1 in 2 million for 1,000 pods)."""
_NAME_BASE_MAX: Final = limits.DNS_LABEL_MAX_LENGTH - len(CLAIM_SUFFIX) - RANDOM_LENGTH


class ExtendedResourceError(ValueError):
    """The pod's extended resources cannot be served as a claim (the reason, for the user)."""


class ExtendedRequest(KubeModel):
    """One container's devices of one extended resource: one request of the claim."""

    name: DNSLabel
    """The claim's request, ``container-<i>-request-<j>``."""
    container: DNSLabel
    """The container (or init container) that asked."""
    resource: LabelKey
    """The extended resource it asked for (``example.com/gpu``; a qualified name, as a
    label key)."""
    device_class_name: DNSSubdomain
    """The DeviceClass that backs it."""
    count: Annotated[int, Field(ge=1, le=limits.ALLOCATION_RESULTS_MAX_SIZE)]
    """How many whole devices."""


class ExtendedClaim(KubeModel):
    """The claim a pod's extended resources became (the annotation's payload)."""

    claim_name: DNSSubdomain
    """The ResourceClaim's name, as the pod's :data:`ENTRY_NAME` entry names it."""
    requests: Annotated[
        tuple[ExtendedRequest, ...],
        Field(min_length=1, max_length=limits.DEVICE_REQUESTS_MAX_SIZE),
    ]
    """One per container and resource, in request-name order."""

    @model_validator(mode="after")
    def _one_claim_holds_them(self) -> ExtendedClaim:
        names = [r.name for r in self.requests]
        if len(set(names)) != len(names):
            raise ValueError("requests: request names must be unique")
        total = sum(r.count for r in self.requests)
        if total > limits.ALLOCATION_RESULTS_MAX_SIZE:
            raise ValueError(
                f"requests: {total} devices in all; one claim holds at most "
                f"{limits.ALLOCATION_RESULTS_MAX_SIZE}"
            )
        return self

    def to_annotation(self) -> str:
        return json.dumps(self.to_kube(), separators=(",", ":"), sort_keys=True)

    def claim_spec(self) -> dict[str, Any]:
        """The claim's ``spec``: whole devices of each class, nothing else."""
        return {
            "devices": {
                "requests": [
                    {
                        "name": r.name,
                        "exactly": {
                            "deviceClassName": r.device_class_name,
                            "allocationMode": "ExactCount",
                            "count": r.count,
                        },
                    }
                    for r in self.requests
                ]
            }
        }

    def describe(self) -> str:
        """``example.com/gpu: 2 (class gpu) for container main``, one per request."""
        return "; ".join(
            f"{r.resource}: {r.count} (DeviceClass {r.device_class_name}) for container "
            f"{r.container}"
            for r in self.requests
        )


def parse_annotation(text: str) -> ExtendedClaim:
    """The annotation's claim; raises :class:`ExtendedResourceError` naming the problem."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ExtendedResourceError(
            f"annotation {EXTENDED_RESOURCES_ANNOTATION}: not valid JSON: {error.msg}"
        ) from None
    try:
        return ExtendedClaim.model_validate(data, context=SHARED_PARTS)
    except ValidationError as error:
        problems = "; ".join(str(p) for p in describe(error))
        raise ExtendedResourceError(
            f"annotation {EXTENDED_RESOURCES_ANNOTATION}: {problems}"
        ) from None


@dataclasses.dataclass(frozen=True)
class BackingClass:
    """What the mapping needs of a DeviceClass."""

    name: str
    extended_resource_name: str | None
    created: str = ""
    """``metadata.creationTimestamp`` (RFC 3339, so it sorts as text)."""


def class_mapping(classes: Iterable[BackingClass]) -> dict[str, str]:
    """Extended resource name -> the DeviceClass that backs it.

    Every class backs its implicit name; an explicit name shared by several classes goes to
    the most recently created, and among classes created in the same second to the first by
    name (the API's documented rule), so every replica and run agrees."""
    mapping: dict[str, str] = {}
    explicit: dict[str, BackingClass] = {}
    for cls in classes:
        mapping[IMPLICIT_PREFIX + cls.name] = cls.name
        name = cls.extended_resource_name
        if name:
            held = explicit.get(name)
            if held is None or _newer(cls, held):
                explicit[name] = cls
    mapping.update({name: cls.name for name, cls in explicit.items()})
    return mapping


def served_mapping(
    classes: Iterable[DeviceClass], scheduler_classes: Collection[str]
) -> dict[str, str]:
    """Extended resource name -> class, for the names dralloc serves: a name whose class is
    kube-scheduler's (``scheduler_classes``) stays kube-scheduler's, not another class's."""
    mapping = class_mapping(backing_classes(classes))
    return {name: cls for name, cls in mapping.items() if cls not in scheduler_classes}


def backing_classes(classes: Iterable[DeviceClass]) -> Iterator[BackingClass]:
    """What :func:`class_mapping` needs of DeviceClass models."""
    for c in classes:
        created = c.metadata.creation_timestamp
        yield BackingClass(
            c.metadata.name or "",
            c.spec.extended_resource_name,
            created.isoformat() if created is not None else "",
        )


def _newer(cls: BackingClass, held: BackingClass) -> bool:
    if cls.created != held.created:
        return cls.created > held.created
    return cls.name < held.name


def backed_requests(
    pod: Mapping[str, Any], mapping: Mapping[str, str]
) -> list[tuple[int, Mapping[str, Any], str, str]]:
    """The pod's requests of extended resources a class backs: (container index counting
    init containers first, container, resource, class), in pod order."""
    spec = pod.get("spec") or {}
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    found = []
    for index, container in enumerate(containers):
        for resource in sorted(_asked(container)):
            device_class = mapping.get(resource)
            if device_class:
                found.append((index, container, resource, device_class))
    return found


def _asked(container: Mapping[str, Any]) -> dict[str, Any]:
    resources = container.get("resources") or {}
    asked = dict(resources.get("limits") or {})
    asked.update(resources.get("requests") or {})
    return asked


@dataclasses.dataclass(frozen=True)
class Translation:
    """A pod's extended resources as one claim: the new pod fields and the claim."""

    claim: ExtendedClaim
    init_containers: list[dict[str, Any]] | None
    """The new ``spec.initContainers`` (None: the pod has none)."""
    containers: list[dict[str, Any]]
    resource_claims: list[dict[str, Any]]
    """The new ``spec.resourceClaims``."""

    def annotations(self, pod: Mapping[str, Any]) -> dict[str, str]:
        current = dict((pod.get("metadata") or {}).get("annotations") or {})
        current[EXTENDED_RESOURCES_ANNOTATION] = self.claim.to_annotation()
        return current

    def apply(self, pod: dict[str, Any]) -> None:
        """Change ``pod`` (a JSON object) in place the way the webhook patches it."""
        pod.setdefault("metadata", {})["annotations"] = self.annotations(pod)
        spec = pod.setdefault("spec", {})
        if self.init_containers is not None:
            spec["initContainers"] = self.init_containers
        spec["containers"] = self.containers
        spec["resourceClaims"] = self.resource_claims


def claim_name_for(pod: Mapping[str, Any], suffix: str) -> str:
    """``<pod>-extended-resources-<suffix>``, the pod's name (or generateName) cut so the
    whole stays a DNS label."""
    metadata = pod.get("metadata") or {}
    base = str(metadata.get("name") or metadata.get("generateName") or "pod")
    base = base[:_NAME_BASE_MAX].rstrip("-.")
    return f"{base or 'pod'}{CLAIM_SUFFIX}{suffix}"


def translate(
    pod: Mapping[str, Any], mapping: Mapping[str, str], suffix: str
) -> Translation | None:
    """The pod with its class-backed extended resources as one claim, or None if it asks
    for none. ``suffix`` (5 random characters from the caller) makes the claim name unique.

    Raises :class:`ExtendedResourceError` for what no claim can serve: a count that is not
    a whole positive number, more devices or requests than one claim holds, or a pod that
    already has an entry of that name.
    """
    found = backed_requests(pod, mapping)
    if not found:
        return None
    spec = pod.get("spec") or {}
    entries = list(spec.get("resourceClaims") or ())
    if any(e.get("name") == ENTRY_NAME for e in entries):
        raise ExtendedResourceError(
            f"spec.resourceClaims: the entry name {ENTRY_NAME!r} is dralloc's, for the "
            "claim of the pod's extended resources"
        )
    if len(entries) >= limits.POD_RESOURCE_CLAIMS_MAX_SIZE:
        raise ExtendedResourceError(
            f"spec.resourceClaims: has {len(entries)} entries already; the claim of the "
            f"pod's extended resources would exceed {limits.POD_RESOURCE_CLAIMS_MAX_SIZE}"
        )
    claim_name = claim_name_for(pod, suffix)
    requests: list[ExtendedRequest] = []
    taken: dict[int, list[tuple[str, str]]] = {}
    try:
        for index, container, resource, device_class in found:
            count = _count(container, resource)
            if count == 0:
                continue
            position = sorted(_asked(container)).index(resource)
            request = f"container-{index}-request-{position}"
            requests.append(
                ExtendedRequest(
                    name=request,
                    container=str(container.get("name") or ""),
                    resource=resource,
                    device_class_name=device_class,
                    count=count,
                )
            )
            taken.setdefault(index, []).append((resource, request))
        if not requests:
            return None
        claim = ExtendedClaim(claim_name=claim_name, requests=tuple(requests))
    except ValidationError as error:
        raise ExtendedResourceError(
            "extended resources: " + "; ".join(str(p) for p in describe(error))
        ) from None
    init = list(spec.get("initContainers") or ())
    regular = list(spec.get("containers") or ())
    changed = [_without(c, taken.get(i, ())) for i, c in enumerate([*init, *regular])]
    return Translation(
        claim=claim,
        init_containers=changed[: len(init)] if init else None,
        containers=changed[len(init) :],
        resource_claims=[*entries, {"name": ENTRY_NAME, "resourceClaimName": claim_name}],
    )


def _count(container: Mapping[str, Any], resource: str) -> int:
    value = _asked(container)[resource]
    try:
        quantity = Quantity.parse(str(value))
    except QuantityParseError:
        raise ExtendedResourceError(
            f"container {container.get('name')!r}: {resource}: {value!r} is not a quantity"
        ) from None
    if not quantity.is_integer() or quantity.sign < 0:
        raise ExtendedResourceError(
            f"container {container.get('name')!r}: {resource}: {value} is not a whole number "
            "of devices"
        )
    if quantity.value() > limits.ALLOCATION_RESULTS_MAX_SIZE:
        raise ExtendedResourceError(
            f"container {container.get('name')!r}: {resource}: {value} devices; one claim "
            f"holds at most {limits.ALLOCATION_RESULTS_MAX_SIZE}"
        )
    return quantity.value()


def _without(container: Mapping[str, Any], taken: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """The container without the taken resources, pointed at their requests instead."""
    taken = list(taken)
    copy = dict(container)
    if not taken:
        return copy
    resources = dict(copy.get("resources") or {})
    names = {resource for resource, _ in taken}
    for field in ("requests", "limits"):
        if field in resources:
            kept = {k: v for k, v in (resources[field] or {}).items() if k not in names}
            if kept:
                resources[field] = kept
            else:
                resources.pop(field)
    claims = list(resources.get("claims") or ())
    claims += [{"name": ENTRY_NAME, "request": request} for _, request in taken]
    resources["claims"] = claims
    copy["resources"] = resources
    return copy
