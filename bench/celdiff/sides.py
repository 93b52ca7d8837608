"""The two sides of the differential test, each giving a ``Verdict`` per case.

Upstream: the Go program in this directory (``build`` puts it in the cache outside the
repository), fed every case as one JSON line. dralloc: ``operators.cel`` called the way
dralloc's own callers call it, admission (a new expression, the feature gates applied,
the estimate compared to the limit) and the allocator (the stored expression evaluated on
the device with the runtime limit).

dralloc's runtime cost is the one it counted (``CompiledSelector.evaluate_with_cost``);
``measured_cost`` finds the least cost limit under which the evaluation is not cut short,
for a program that does not report its count.
"""

from __future__ import annotations

import json
import subprocess
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.celdiff.cases import Case, Device
from bench.goprogram import GoProgramUnavailable, go_binary
from operators import cel
from operators.api.semver import Semver

HERE = Path(__file__).resolve().parent
BUILD = HERE / "build"
#: Upstream's CELSelectorExpressionMaxCost: the estimate's limit and the runtime limit.
COST_LIMIT = 1_000_000


UpstreamUnavailable = GoProgramUnavailable


@dataclass(frozen=True)
class Verdict:
    """One side's answer on one case."""

    #: Compile error of the expression as a new one (admission), if any.
    new_error: str | None
    #: Static worst-case cost (None after a compile error).
    estimate: int | None
    #: Admission refuses the expression for its estimated cost.
    refused: bool
    #: Compile error of the expression as a stored one (the allocator), if any.
    stored_error: str | None
    #: Result of the evaluation (None when it did not run or failed).
    result: bool | None
    #: Runtime error of the evaluation, if any.
    runtime_error: str | None
    #: Cost the evaluation counted (None when it did not run).
    actual_cost: int | None
    #: A failure of the implementation itself (dralloc: an exception that is no CELError).
    crash: str | None = None

    @property
    def kind_new(self) -> str:
        """compile / runtime / none, as a user creating the object meets it."""
        if self.new_error is not None:
            return "compile"
        return self.kind_stored

    @property
    def kind_stored(self) -> str:
        """compile / runtime / none, as the allocator meets an object already stored."""
        if self.stored_error is not None:
            return "compile"
        if self.runtime_error is not None or self.crash is not None:
            return "runtime"
        return "none"


# --- upstream ---------------------------------------------------------------------------------


def upstream_binary(build: bool = True) -> Path:
    """Path of the Go program, building it into the cache if allowed."""
    return go_binary(BUILD, "DRALLOC_CELDIFF_UPSTREAM", build=build)


def upstream_versions(binary: Path) -> dict[str, str]:
    proc = subprocess.run(
        [str(binary), "-versions"], capture_output=True, text=True, timeout=60, check=True
    )
    versions: dict[str, str] = json.loads(proc.stdout)
    return versions


def run_upstream(cases: Sequence[Case], binary: Path) -> list[Verdict]:
    stdin = "".join(case.to_json_line() + "\n" for case in cases)
    proc = subprocess.run(
        [str(binary)], input=stdin, capture_output=True, text=True, timeout=3600, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"celdiff-upstream failed: {proc.stderr.strip()}")
    verdicts = [_upstream_verdict(json.loads(line)) for line in proc.stdout.splitlines()]
    if len(verdicts) != len(cases):
        raise RuntimeError(f"celdiff-upstream answered {len(verdicts)} of {len(cases)} cases")
    return verdicts


def _upstream_verdict(row: dict[str, Any]) -> Verdict:
    new = row["new"]
    evaluation = row.get("eval") or {}
    return Verdict(
        new_error=new["error"],
        estimate=new["estimate"],
        refused=new["refused"],
        stored_error=row["storedError"],
        result=evaluation.get("result"),
        runtime_error=evaluation.get("error"),
        actual_cost=evaluation.get("actualCost"),
    )


# --- dralloc ----------------------------------------------------------------------------------


def device_view(device: Device) -> cel.DeviceView:
    """The CEL view of a case's device, with the values the allocator would give it."""
    attributes: dict[str, Any] = {}
    for name, (kind, value) in device.attributes.items():
        if kind == "version":
            value = Semver.parse(value)
        elif kind == "versions":
            value = [Semver.parse(v) for v in value]
        attributes[name] = value
    return cel.DeviceView.build(
        device.driver,
        attributes,
        # As read back from the API server: in canonical form (see main.go).
        {name: cel.Quantity(str(cel.Quantity(text))) for name, text in device.capacity.items()},
        device.allow_multiple_allocations,
    )


def _compile(case: Case, *, stored: bool) -> cel.CompiledSelector:
    # New expressions honour the gates (admission); stored ones declare everything
    # (the allocator), as upstream's two environments do.
    features = case.features
    return cel.compile_selector(
        case.expression,
        list_attributes=features.list_type_attributes,
        consumable_capacity=features.consumable_capacity,
        stored=stored,
        check_cost=False,
    )


def _completes(selector: cel.CompiledSelector, view: cel.DeviceView, limit: int) -> bool:
    try:
        selector.evaluate(view, cost_limit=limit)
    except cel.CELCostError:
        return False
    except cel.CELError:
        pass
    return True


def measured_cost(selector: cel.CompiledSelector, view: cel.DeviceView) -> int | None:
    """The least cost limit the evaluation completes under (None: not under the limit)."""
    if not _completes(selector, view, COST_LIMIT):
        return None
    low, high = -1, COST_LIMIT  # completes at high, not at low
    while high - low > 1:
        middle = (low + high) // 2
        if _completes(selector, view, middle):
            high = middle
        else:
            low = middle
    return high


def run_dralloc_case(case: Case) -> Verdict:
    try:
        return _dralloc_verdict(case)
    except Exception as error:  # a bug in dralloc, reported as such
        line = traceback.format_exception_only(error)[-1].strip()
        return Verdict(None, None, False, None, None, None, None, crash=line)


def _dralloc_verdict(case: Case) -> Verdict:
    new_error = estimate = None
    try:
        estimate = _compile(case, stored=False).estimated_cost
    except cel.CELCompileError as error:
        new_error = str(error)
    try:
        selector = _compile(case, stored=True)
    except cel.CELCompileError as error:
        return Verdict(new_error, estimate, False, str(error), None, None, None)
    refused = new_error is None and estimate is not None and estimate > COST_LIMIT
    view = device_view(case.device)
    result = runtime_error = None
    try:
        result = selector.evaluate(view, cost_limit=COST_LIMIT)
    except cel.CELError as error:
        runtime_error = str(error)
    outcome, counted = selector.evaluate_with_cost(view, cost_limit=COST_LIMIT)
    actual = None if isinstance(outcome, cel.CELCostError) else counted
    return Verdict(new_error, estimate, refused, None, result, runtime_error, actual)


def run_dralloc(cases: Sequence[Case]) -> list[Verdict]:
    return [run_dralloc_case(case) for case in cases]
