"""The pod protocol: names and JSON payloads of dralloc's pod annotations, gate and labels.

Our CRDs cannot use pod.spec.resourceClaims (the API server drops it where in-tree DRA is
off, and in-tree controllers act on it where it is on), so pods opt in by annotation and
dralloc answers by annotation. docs/design.md "The pod protocol" describes the flow; this
module owns the exact names and shapes, and parses user-written payloads with errors that
name the annotation and the problem.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    model_validator,
)

from operators.api.base import (
    SHARED_PARTS,
    DNSLabel,
    DriverName,
    KubeModel,
    PoolName,
    RequestReference,
    Shared,
    ShareID,
    scalar_items,
)
from operators.api.fielderrors import describe, field_error
from operators.api.limits import (
    DEVICE_MAX_DOMAIN_LENGTH,
    FULLY_QUALIFIED_NAME_PATTERN,
    POD_RESOURCE_CLAIMS_MAX_SIZE,
)
from operators.api.models import (
    GROUP,
    AllocationResult,
    DeviceAllocationConfiguration,
)

# -- names ------------------------------------------------------------------------------------

CLAIMS_ANNOTATION: Final = f"{GROUP}/claims"
"""Pod annotation (user): JSON list shaped like pod.spec.resourceClaims."""
SCHEDULING_GATE: Final = f"{GROUP}/allocation"
"""Pod scheduling gate (webhook): keeps kube-scheduler away until devices are allocated."""
CLAIM_STATUSES_ANNOTATION: Final = f"{GROUP}/claim-statuses"
"""Pod annotation (claim controller; for a gated pod, the allocator with the allocation):
JSON list shaped like pod.status.resourceClaimStatuses."""
DEVICES_ANNOTATION: Final = f"{GROUP}/devices"
"""Pod annotation (allocator): per pod claim, the allocated devices and their config."""
POD_CLAIM_NAME_ANNOTATION: Final = f"{GROUP}/pod-claim-name"
"""Claim annotation (claim controller): the pod's claim entry name."""
FINALIZER: Final = f"{GROUP}/delete-protection"
"""Claim finalizer (allocator; the claim controller puts it on generated claims at creation):
held while a claim is allocated, dropped when it is released or deleted."""
ADMIN_ACCESS_LABEL: Final = f"{GROUP}/admin-access"
"""Namespace label (cluster admin): must be "true" for adminAccess requests there."""
ADMIN_ACCESS_LABEL_VALUE: Final = "true"
GANG_ANNOTATION: Final = f"{GROUP}/gang"
"""Pod annotation (user): the gang the pod belongs to (pods of one namespace with the same
name are allocated all or nothing; the same in both API modes)."""
GANG_SIZE_ANNOTATION: Final = f"{GROUP}/gang-size"
"""Pod annotation (user): how many members of the gang must be placed at once."""
GANG_SIZE_MAX: Final = 4096
GANG_TOPOLOGY_ANNOTATION: Final = f"{GROUP}/gang-topology"
"""Pod annotation (user, optional): ``LABEL``, a node label key (all placed members of the gang
go to nodes with one value of it: a rack, a zone), or ``attribute:DOMAIN/NAME``, a device
attribute (every device the gang's members are allocated has one value of it: an NVLink
domain). See :class:`GangTopology`."""
GANG_TOPOLOGY_ATTRIBUTE_PREFIX: Final = "attribute:"

# The in-tree equivalents, for the toolkit reading resource.k8s.io objects.
KUBERNETES_FINALIZER: Final = "resource.kubernetes.io/delete-protection"
KUBERNETES_POD_CLAIM_NAME_ANNOTATION: Final = "resource.kubernetes.io/pod-claim-name"
KUBERNETES_ADMIN_ACCESS_LABEL: Final = "resource.kubernetes.io/admin-access"


class AnnotationError(ValueError):
    """An annotation's payload is not valid; the message names the annotation."""

    def __init__(self, annotation: str, problems: Iterable[str]) -> None:
        self.annotation = annotation
        self.problems = tuple(problems)
        super().__init__(f"annotation {annotation}: {'; '.join(self.problems)}")


# -- payloads ---------------------------------------------------------------------------------


class PodResourceClaim(KubeModel):
    """One entry of the claims annotation (as pod.spec.resourceClaims[]).

    Written by users, so an unknown field is refused by name (a misspelt
    ``resourceClaimName`` must not read as an entry without a claim)."""

    model_config = ConfigDict(extra="forbid")

    name: DNSLabel
    """Name of the entry, unique in the pod; containers refer to it."""
    resource_claim_name: str | None = None
    """An existing ResourceClaim in the pod's namespace."""
    resource_claim_template_name: str | None = None
    """A ResourceClaimTemplate from which a claim is generated for this pod."""

    @model_validator(mode="after")
    def _check(self) -> PodResourceClaim:
        if (self.resource_claim_name is None) == (self.resource_claim_template_name is None):
            raise field_error(
                "", "exactly one of resourceClaimName or resourceClaimTemplateName must be set"
            )
        return self

    @model_validator(mode="wrap")
    @classmethod
    def _shared(cls, data: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        # The pods of one workload ask with the same entries (one template's name).
        return _SHARED_ENTRIES(cls, data, handler, info)


_SHARED_ENTRIES = Shared(scalar_items)


class PodResourceClaimStatus(KubeModel):
    """One entry of the claim-statuses annotation (as pod.status.resourceClaimStatuses[])."""

    name: DNSLabel
    """The pod claim entry this is about."""
    resource_claim_name: str | None = None
    """The generated claim; null when no claim is needed."""

    def to_kube(self) -> dict[str, Any]:
        # resourceClaimName is meaningful when null, so it is always written.
        return {"name": self.name, "resourceClaimName": self.resource_claim_name}


class PodDevice(KubeModel):
    """One allocated device, as a workload sees it."""

    request: RequestReference
    """The claim request (or request/subrequest) it was allocated for."""
    driver: DriverName
    """Driver of the device."""
    pool: PoolName
    """Pool of the device."""
    device: DNSLabel
    """Name of the device in its pool."""
    share_id: ShareID | None = None
    """Share of a multi-allocatable device."""
    admin_access: bool | None = None
    """True if allocated with admin access."""


class PodClaimDevices(KubeModel):
    """The devices of one pod claim entry."""

    name: DNSLabel
    """The pod claim entry (claims annotation name)."""
    resource_claim_name: str
    """The ResourceClaim that holds the allocation."""
    devices: tuple[PodDevice, ...] = ()
    """Allocated devices."""
    config: tuple[DeviceAllocationConfiguration, ...] = ()
    """Configuration for the devices (class configuration first)."""

    @classmethod
    def from_allocation(
        cls, name: str, resource_claim_name: str, allocation: AllocationResult
    ) -> PodClaimDevices:
        return cls(
            name=name,
            resource_claim_name=resource_claim_name,
            devices=tuple(
                PodDevice(
                    request=r.request,
                    driver=r.driver,
                    pool=r.pool,
                    device=r.device,
                    share_id=r.share_id,
                    admin_access=r.admin_access,
                )
                for r in allocation.devices.results
            ),
            config=allocation.devices.config,
        )


M = TypeVar("M", bound=BaseModel)

_claims_adapter: Final = TypeAdapter(tuple[PodResourceClaim, ...])
_statuses_adapter: Final = TypeAdapter(tuple[PodResourceClaimStatus, ...])
_devices_adapter: Final = TypeAdapter(tuple[PodClaimDevices, ...])


def _parse_list(
    annotation: str,
    text: str | None,
    adapter: TypeAdapter[tuple[M, ...]],
    *,
    max_items: int | None = None,
) -> tuple[M, ...]:
    if text is None or not text.strip():
        raise AnnotationError(annotation, ["is empty; expected a JSON list"])
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AnnotationError(
            annotation, [f"is not valid JSON: {exc.msg} at character {exc.pos}"]
        ) from None
    if not isinstance(data, list):
        raise AnnotationError(annotation, [f"must be a JSON list, not a JSON {_json_type(data)}"])
    if max_items is not None and len(data) > max_items:  # checked before any entry is
        raise AnnotationError(
            annotation, [f"has {len(data)} entries; at most {max_items} are allowed"]
        )
    try:
        items = adapter.validate_python(data, context=SHARED_PARTS)
    except ValidationError as exc:
        raise AnnotationError(annotation, [str(e) for e in describe(exc)]) from None
    seen: set[str] = set()
    for i, item in enumerate(items):
        name = getattr(item, "name", None)
        if name in seen:
            raise AnnotationError(annotation, [f"[{i}].name: duplicate value {name!r}"])
        if isinstance(name, str):
            seen.add(name)
    return items


def _json_type(value: Any) -> str:
    names = {dict: "object", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def parse_pod_claims(text: str | None) -> tuple[PodResourceClaim, ...]:
    """Parse the user's claims annotation; entry names must be unique, and there may be at
    most :data:`~operators.api.limits.POD_RESOURCE_CLAIMS_MAX_SIZE` entries."""
    return _parse_list(
        CLAIMS_ANNOTATION, text, _claims_adapter, max_items=POD_RESOURCE_CLAIMS_MAX_SIZE
    )


def parse_claim_statuses(text: str | None) -> tuple[PodResourceClaimStatus, ...]:
    return _parse_list(CLAIM_STATUSES_ANNOTATION, text, _statuses_adapter)


def parse_pod_devices(text: str | None) -> tuple[PodClaimDevices, ...]:
    return _parse_list(DEVICES_ANNOTATION, text, _devices_adapter)


def _dump(items: Iterable[KubeModel]) -> str:
    return json.dumps([item.to_kube() for item in items], separators=(",", ":"))


def format_pod_claims(items: Iterable[PodResourceClaim]) -> str:
    return _dump(items)


def format_claim_statuses(items: Iterable[PodResourceClaimStatus]) -> str:
    return _dump(items)


def format_pod_devices(items: Iterable[PodClaimDevices]) -> str:
    return _dump(items)


def pod_claims(annotations: Mapping[str, str] | None) -> tuple[PodResourceClaim, ...] | None:
    """The pod's claims if it opted in (None if the annotation is absent); raises if invalid."""
    if not annotations or CLAIMS_ANNOTATION not in annotations:
        return None
    return parse_pod_claims(annotations[CLAIMS_ANNOTATION])


_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_ATTRIBUTE_NAME = re.compile(FULLY_QUALIFIED_NAME_PATTERN)


@dataclass(frozen=True, slots=True)
class GangTopology:
    """What the placed members of a gang have in common: one value of a node label, or one
    value of a device attribute on every device they are allocated.

    Written ``LABEL`` (a node label key, e.g. ``topology.kubernetes.io/zone``) or
    ``attribute:DOMAIN/NAME`` (a fully qualified device attribute, as in a matchAttribute
    constraint, e.g. ``attribute:gpu.example.com/nvlinkDomain``). A label key cannot hold a
    ':', so the two forms never overlap."""

    key: str
    """The node label key, or the device attribute's fully qualified name."""
    device_attribute: bool = False

    @classmethod
    def parse(cls, text: str) -> GangTopology:
        """The topology an annotation value names; AnnotationError when it is neither form."""
        if text.startswith(GANG_TOPOLOGY_ATTRIBUTE_PREFIX):
            name = text.removeprefix(GANG_TOPOLOGY_ATTRIBUTE_PREFIX)
            domain = name.partition("/")[0]
            if not _ATTRIBUTE_NAME.match(name) or len(domain) > DEVICE_MAX_DOMAIN_LENGTH:
                raise AnnotationError(
                    GANG_TOPOLOGY_ANNOTATION,
                    [
                        f"{name!r} is not a fully qualified device attribute name: after "
                        "'attribute:' comes a DNS subdomain of at most 63 characters, '/', and "
                        "a C identifier of at most 32 characters, as in a matchAttribute "
                        "constraint (attribute:<domain>/<identifier>)"
                    ],
                )
            return cls(name, device_attribute=True)
        if not _LABEL_KEY.match(text):
            raise AnnotationError(
                GANG_TOPOLOGY_ANNOTATION,
                [
                    f"{text!r} is not a valid node label key (a device attribute is written "
                    "attribute:<domain>/<identifier>, e.g. attribute:gpu.example.com/nvlinkDomain)"
                ],
            )
        return cls(text)

    def __str__(self) -> str:
        """The annotation's spelling."""
        return GANG_TOPOLOGY_ATTRIBUTE_PREFIX + self.key if self.device_attribute else self.key

    def describe(self) -> str:
        """For messages: 'node label rack', 'device attribute gpu.example.com/nvlinkDomain'."""
        return f"{'device attribute' if self.device_attribute else 'node label'} {self.key}"


@dataclass(frozen=True, slots=True)
class GangRef:
    """A pod's gang: its name (in the pod's namespace) and the members needed at once."""

    name: str
    size: int
    topology: GangTopology | None = None
    """What all placed members share one value of (None: anywhere)."""
    pod_group: bool = False
    """Named by an upstream Workload API PodGroup (:mod:`operators.api.podgroup`), not by
    the gang annotations."""

    @property
    def label(self) -> str:
        """How messages name the gang: ``gang "NAME"`` or ``PodGroup "NAME"``."""
        return f'{"PodGroup" if self.pod_group else "gang"} "{self.name}"'


_GANG_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def is_label_key(text: str) -> bool:
    """Whether ``text`` is a node label key (what a gang's topology names)."""
    return _LABEL_KEY.match(text) is not None


def pod_gang(annotations: Mapping[str, str] | None) -> GangRef | None:
    """The pod's gang (None if it names none); raises AnnotationError if the two gang
    annotations are malformed or one comes without the other."""
    annotations = annotations or {}
    name = annotations.get(GANG_ANNOTATION)
    size = annotations.get(GANG_SIZE_ANNOTATION)
    if name is None and size is None:
        return None
    if name is None:
        raise AnnotationError(GANG_SIZE_ANNOTATION, [f"is set, but {GANG_ANNOTATION} is not"])
    if not _GANG_NAME.match(name):
        raise AnnotationError(
            GANG_ANNOTATION,
            [f"{name!r} is not a valid name (lower-case letters, digits, '-' and '.')"],
        )
    if size is None:
        raise AnnotationError(GANG_ANNOTATION, [f"is set, but {GANG_SIZE_ANNOTATION} is not"])
    text = size.strip()
    if not text.isdigit() or not 1 <= int(text) <= GANG_SIZE_MAX:
        raise AnnotationError(
            GANG_SIZE_ANNOTATION,
            [f"{size!r} is not a whole number from 1 to {GANG_SIZE_MAX}"],
        )
    topology = annotations.get(GANG_TOPOLOGY_ANNOTATION)
    return GangRef(name, int(text), GangTopology.parse(topology) if topology is not None else None)
