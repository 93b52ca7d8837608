"""The selectors of a DeviceClass, ResourceClaim or ResourceClaimTemplate that upstream's API
server would refuse when the object is created or changed.

In-tree, the API server compiles every selector of a new object as a *new* expression (the
feature gates decide which fields and functions exist) and refuses the object on a compile
error, a type error or an estimated cost over the limit, naming the field. dralloc's CRDs
cannot compile CEL, so its admission webhook and ``dralloc check`` of manifests ask this
module instead, and a manifest that the API server would refuse in-tree is refused with the
same field path and message in CRD mode too. A claim's derived attributes (alpha,
DRADerivedAttributes) are CEL too and checked alike, with their estimated costs added up
per claim as upstream does.

Upstream's rules for what counts as new: a claim's and a template's spec is immutable, so
only a create is checked; a class update whose selectors are exactly the old ones is not
checked at all (its expressions are stored and were valid when stored), any change to them
(even a reordering) checks every selector of the class again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from operators.api import DeviceClass, ResourceClaim, ResourceClaimTemplate
from operators.api.common import DeviceSelector
from operators.api.limits import DEVICE_CLAIM_DERIVED_ATTRIBUTE_CEL_MAX_COST
from operators.api.resourceclaim import ResourceClaimSpec

from .derived import compile_derived
from .errors import CELCompileError
from .selector import MAX_COST, MAX_EXPRESSION_LENGTH, compile_selector

Checked = DeviceClass | ResourceClaim | ResourceClaimTemplate

#: Upstream's limit on the estimated costs of a claim's derived attributes together.
MAX_DERIVED_COST_PER_CLAIM = DEVICE_CLAIM_DERIVED_ATTRIBUTE_CEL_MAX_COST


@dataclass(frozen=True, slots=True)
class SelectorProblem:
    """One refused selector, worded as upstream's field error."""

    path: str
    """e.g. ``spec.devices.requests[0].exactly.selectors[0].cel.expression``."""
    kind: Literal["Invalid value", "Forbidden", "Too long"]
    detail: str
    expression: str

    def __str__(self) -> str:
        if self.kind == "Invalid value":
            # Go's %q of the bad value; JSON quoting agrees on everything a selector holds.
            body = f"{self.kind}: {json.dumps(self.expression, ensure_ascii=False)}"
        else:
            body = self.kind
        return f"{self.path}: {body}: {self.detail}"


def selector_paths(obj: Checked) -> Iterator[tuple[str, str]]:
    """``(field path, expression)`` of every selector of the object, in the object's order."""
    if isinstance(obj, DeviceClass):
        yield from _selectors("spec.selectors", obj.spec.selectors)
    elif isinstance(obj, ResourceClaim):
        yield from _claim_selectors("spec", obj.spec)
    else:
        yield from _claim_selectors("spec.spec", obj.spec.spec)


def _claim_selectors(prefix: str, spec: ResourceClaimSpec) -> Iterator[tuple[str, str]]:
    for i, request in enumerate(spec.devices.requests):
        at = f"{prefix}.devices.requests[{i}]"
        if request.exactly is not None:
            yield from _selectors(f"{at}.exactly.selectors", request.exactly.selectors)
        for j, sub in enumerate(request.first_available):
            yield from _selectors(f"{at}.firstAvailable[{j}].selectors", sub.selectors)


def _selectors(path: str, selectors: Sequence[DeviceSelector]) -> Iterator[tuple[str, str]]:
    for i, selector in enumerate(selectors):
        yield f"{path}[{i}].cel.expression", selector.cel.expression


def refused_selectors(
    obj: Checked,
    old: Checked | None = None,
    *,
    list_attributes: bool = False,
    consumable_capacity: bool = True,
) -> list[SelectorProblem]:
    """What upstream's validation says about the selectors of ``obj`` (``old``: the stored
    object on an update). The two flags are the DRAListTypeAttributes and
    DRAConsumableCapacity gates of the cluster."""
    if old is not None and not _changed(obj, old):
        return []
    problems: list[SelectorProblem] = []
    for path, expression in selector_paths(obj):
        problem = _check(path, expression, list_attributes, consumable_capacity)
        if problem is not None:
            problems.append(problem)
    if not isinstance(obj, DeviceClass):
        problems.extend(_refused_derived(obj, list_attributes, consumable_capacity))
    return problems


def derived_paths(obj: ResourceClaim | ResourceClaimTemplate) -> Iterator[tuple[str, str]]:
    """``(field path, expression)`` of every derived attribute of a claim or template."""
    prefix = "spec" if isinstance(obj, ResourceClaim) else "spec.spec"
    spec = obj.spec if isinstance(obj, ResourceClaim) else obj.spec.spec
    for i, request in enumerate(spec.devices.requests):
        at = f"{prefix}.devices.requests[{i}]"
        if request.exactly is not None:
            for k, attr in enumerate(request.exactly.derived_attributes):
                yield f"{at}.exactly.derivedAttributes[{k}].expression", attr.expression
        for j, sub in enumerate(request.first_available):
            for k, attr in enumerate(sub.derived_attributes):
                yield f"{at}.firstAvailable[{j}].derivedAttributes[{k}].expression", attr.expression


def _refused_derived(
    obj: ResourceClaim | ResourceClaimTemplate, list_attributes: bool, consumable_capacity: bool
) -> list[SelectorProblem]:
    """Upstream's checks of derived-attribute expressions: each as a new expression (too
    long, not compiling, not a scalar or list result, estimated over the cost limit), and
    their estimated costs together over the claim's limit (``spec.devices``: they are
    evaluated per device for the same claim)."""
    problems: list[SelectorProblem] = []
    total = 0
    for path, expression in derived_paths(obj):
        if len(expression.encode()) > MAX_EXPRESSION_LENGTH:
            detail = f"may not be more than {MAX_EXPRESSION_LENGTH} bytes"
            problems.append(SelectorProblem(path, "Too long", detail, expression))
            continue
        try:
            compiled = compile_derived(
                expression, list_attributes=list_attributes, consumable_capacity=consumable_capacity
            )
        except CELCompileError as exc:
            problems.append(SelectorProblem(path, "Invalid value", str(exc), expression))
            continue
        if compiled.estimated_cost > min(MAX_COST, MAX_DERIVED_COST_PER_CLAIM):
            detail = "too complex, exceeds cost limit"
            problems.append(SelectorProblem(path, "Forbidden", detail, expression))
        total += compiled.estimated_cost
    if total > MAX_DERIVED_COST_PER_CLAIM:
        devices = "spec.devices" if isinstance(obj, ResourceClaim) else "spec.spec.devices"
        detail = (
            "too complex, total cost of derived attribute CEL expressions in the claim "
            "exceeds cost limit"
        )
        problems.append(SelectorProblem(devices, "Forbidden", detail, ""))
    return problems


def _changed(obj: Checked, old: Checked) -> bool:
    """Whether an update brings new expressions (upstream: claim and template specs are
    immutable, so an update never does; a class's do when its selectors differ at all)."""
    if isinstance(obj, DeviceClass) and isinstance(old, DeviceClass):
        return obj.spec.selectors != old.spec.selectors
    return False


def _check(
    path: str, expression: str, list_attributes: bool, consumable_capacity: bool
) -> SelectorProblem | None:
    # Upstream counts bytes, and does not compile an expression that is too long.
    if len(expression.encode()) > MAX_EXPRESSION_LENGTH:
        detail = f"may not be more than {MAX_EXPRESSION_LENGTH} bytes"
        return SelectorProblem(path, "Too long", detail, expression)
    try:
        compiled = compile_selector(
            expression,
            list_attributes=list_attributes,
            consumable_capacity=consumable_capacity,
            check_cost=False,
        )
    except CELCompileError as exc:
        return SelectorProblem(path, "Invalid value", str(exc), expression)
    if compiled.estimated_cost > MAX_COST:
        return SelectorProblem(path, "Forbidden", "too complex, exceeds cost limit", expression)
    return None


def invalid_message(kind: str, group: str, name: str, problems: Sequence[SelectorProblem]) -> str:
    """The API server's message for an invalid object: ``Kind.group "name" is invalid: ...``
    (several problems in brackets, as Go's aggregated error prints them)."""
    shown = [str(p) for p in problems]
    body = shown[0] if len(shown) == 1 else "[" + ", ".join(shown) + "]"
    return f'{kind}.{group} "{name}" is invalid: {body}'


__all__ = [
    "SelectorProblem",
    "derived_paths",
    "invalid_message",
    "refused_selectors",
    "selector_paths",
]
