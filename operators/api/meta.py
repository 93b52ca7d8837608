"""The parts of core/v1 and meta/v1 that the DRA kinds embed.

Only the fields dralloc reads or writes are modelled; the rest of an object's metadata
(managedFields and friends) is ignored on input.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, ValidatorFunctionWrapHandler, model_validator

from operators.api import limits
from operators.api.base import ConditionType, KubeModel, Shared, json_copy, json_text


class OwnerReference(KubeModel):
    """An object that owns this one; deleting the owner garbage-collects it."""

    api_version: str
    """API version of the owner, for example v1."""
    kind: str
    """Kind of the owner, for example Pod."""
    name: str
    """Name of the owner."""
    uid: str
    """UID of the owner."""
    controller: bool | None = None
    """True if the owner is the managing controller."""
    block_owner_deletion: bool | None = None
    """True if the owner cannot be deleted before this object is."""


class ObjectMeta(KubeModel):
    """Standard object metadata (the subset dralloc uses)."""

    name: str | None = None
    """Name of the object, unique within its namespace (or cluster for cluster-scoped kinds)."""
    generate_name: str | None = None
    """Prefix the server uses to generate a unique name when name is empty."""
    namespace: str | None = None
    """Namespace of the object; empty for cluster-scoped kinds."""
    uid: str | None = None
    """Unique ID the server assigns at creation."""
    resource_version: str | None = None
    """Opaque version the server changes on every write; used for optimistic concurrency."""
    generation: int | None = None
    """Sequence number of spec changes, assigned by the server."""
    creation_timestamp: datetime | None = None
    """When the object was created."""
    deletion_timestamp: datetime | None = None
    """When deletion was requested; the object goes once its finalizers are gone."""
    deletion_grace_period_seconds: int | None = None
    """Seconds the object has to terminate gracefully once deleted."""
    labels: dict[str, str] | None = None
    """Key/value pairs for selecting objects."""
    annotations: dict[str, str] | None = None
    """Key/value pairs for tools; not used for selection."""
    owner_references: tuple[OwnerReference, ...] | None = None
    """Objects this one depends on."""
    finalizers: tuple[str, ...] | None = None
    """Names that must be removed before the object is deleted."""


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(KubeModel):
    """One aspect of an object's current state (metav1.Condition)."""

    type: ConditionType
    """Type of the condition, in CamelCase or foo.example.com/CamelCase."""
    status: ConditionStatus
    """True, False or Unknown."""
    observed_generation: Annotated[int, Field(ge=0)] | None = None
    """The .metadata.generation the condition was set from."""
    last_transition_time: datetime
    """When the condition last changed status."""
    reason: Annotated[
        str,
        Field(
            pattern=limits.CONDITION_REASON_PATTERN,
            max_length=limits.CONDITION_REASON_MAX_LENGTH,
            min_length=1,
        ),
    ]
    """Programmatic identifier of the reason for the last transition, in CamelCase."""
    message: Annotated[str, Field(max_length=limits.CONDITION_MESSAGE_MAX_LENGTH)] = ""
    """Human-readable details of the last transition."""


NodeSelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]


class NodeSelectorRequirement(KubeModel):
    """A selector that compares a node label or field with values."""

    key: str
    """The label key (matchExpressions) or field name (matchFields)."""
    operator: NodeSelectorOperator
    """In, NotIn, Exists, DoesNotExist, Gt or Lt."""
    values: tuple[str, ...] | None = None
    """Values to compare with: non-empty for In/NotIn, empty for Exists/DoesNotExist, one integer for Gt/Lt."""


class NodeSelectorTerm(KubeModel):
    """Requirements that must all hold (AND). An empty term selects no node."""

    match_expressions: tuple[NodeSelectorRequirement, ...] | None = None
    """Requirements on node labels."""
    match_fields: tuple[NodeSelectorRequirement, ...] | None = None
    """Requirements on node fields (only metadata.name is supported)."""


class NodeSelector(KubeModel):
    """Terms of which at least one must hold (OR)."""

    node_selector_terms: tuple[NodeSelectorTerm, ...]
    """The terms; a node matches if it matches any of them."""

    @model_validator(mode="wrap")
    @classmethod
    def _shared(cls, data: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        # An allocation's selector names its node: the claims on one node all carry it.
        return _SHARED_SELECTORS(cls, data, handler, info)


_SHARED_SELECTORS = Shared(json_text, fresh=json_copy)
