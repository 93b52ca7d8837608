"""The port of upstream's allocator table, run through upstream's own allocator.

``test_allocator_upstream.py`` runs each case of the port through dralloc; this module runs
the same cases, as data, through ``k8s.io/dynamic-resource-allocation`` (the Go program in
``upstream_table/``, built with the module version its ``go.mod`` names). Both must give the
port's expectation: a case written wrong fails here, where dralloc alone could agree with it,
and when the program is built against a newer module the failures are the cases upstream
changed (``DRALLOC_UPSTREAM_TABLE`` names another binary; the README's fidelity section
says how).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from bench.goprogram import GoProgramUnavailable, go_binary
from operators.allocator import Features
from tests.conformance.test_allocator_upstream import CASES, Case, _normalise

BUILD = Path(__file__).with_name("upstream_table") / "build"

#: dralloc's allocator flags by the name of upstream's ``structured.Features`` field, where
#: the two names are not the same words.
UPSTREAM_FEATURE = {"device_binding_conditions": "DeviceBindingAndStatus"}
#: dralloc flags that are no allocator feature upstream (its allocator has no such switch).
NOT_UPSTREAM = frozenset({"device_taint_rules"})


def upstream_feature(name: str) -> str:
    return UPSTREAM_FEATURE.get(name) or "".join(part.title() for part in name.split("_"))


def as_upstream_input(tc: Case) -> dict[str, Any]:
    """The case as the Go program reads it."""
    known = {f.name for f in fields(Features)}
    unknown = set(tc.features) - known
    assert not unknown, f"{tc.name}: unknown features {unknown}"
    return {
        "name": tc.name,
        "features": {upstream_feature(f): True for f in tc.features if f not in NOT_UPSTREAM},
        "node": {
            "metadata": {"name": tc.node.name, "labels": dict(tc.node.labels)},
            "status": {"declaredFeatures": sorted(tc.node.declared_features)},
        },
        "classes": tc.classes,
        "slices": tc.slices,
        "claims": tc.claims,
        "allocated": [list(device) for device in tc.allocated],
        "allocatedCapacity": [
            {"device": list(device), "capacity": consumed}
            for device, consumed in tc.allocated_capacity.items()
        ],
    }


@pytest.fixture(scope="module")
def upstream() -> dict[str, dict[str, Any]]:
    """Every case's answer from upstream's allocator, by case name (one run of the program)."""
    try:
        binary = go_binary(BUILD, "DRALLOC_UPSTREAM_TABLE")
    except GoProgramUnavailable as error:
        pytest.skip(f"upstream-table is not built: {error}")
    stdin = "".join(json.dumps(as_upstream_input(tc)) + "\n" for tc in CASES)
    proc = subprocess.run(
        [str(binary)], input=stdin, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [a["name"] for a in answers] == [tc.name for tc in CASES]
    return {a["name"]: a for a in answers}


def _comparable(results: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """As the port compares (``_normalise``), and without the empty lists Go's JSON leaves
    out, device results in an order that does not hang on the order of their keys."""
    normalised = _normalise(results)
    if normalised is None:
        return None
    for allocation in normalised:
        items = [
            {k: v for k, v in item.items() if v != []} for item in allocation["devices"]["results"]
        ]
        allocation["devices"]["results"] = sorted(
            items, key=lambda i: json.dumps(i, sort_keys=True)
        )
    return normalised


@pytest.mark.parametrize("tc", CASES, ids=[c.name for c in CASES])
def test_upstream_gives_the_ported_answer(tc: Case, upstream: dict[str, dict[str, Any]]) -> None:
    answer = upstream[tc.name]
    if tc.error is not None:
        assert answer["error"] is not None, f"upstream allocated: {answer['results']}"
        for part in (tc.error,) if isinstance(tc.error, str) else tc.error:
            assert part in answer["error"]
        return
    assert answer["error"] is None, answer["error"]
    results = answer["results"]
    expected = tc.expect if tc.expect != [] or tc.claims else []
    if results == [] and expected is None:
        results = None
    assert _comparable(results) == _comparable(expected)
    if tc.steps is not None and answer["steps"] is not None:
        assert answer["steps"] == tc.steps


def test_the_program_names_the_module_versions() -> None:
    """The fidelity section of the README names the version the table follows."""
    try:
        binary = go_binary(BUILD, "DRALLOC_UPSTREAM_TABLE")
    except GoProgramUnavailable as error:
        pytest.skip(f"upstream-table is not built: {error}")
    proc = subprocess.run(
        [str(binary), "-versions"], capture_output=True, text=True, timeout=60, check=True
    )
    version = json.loads(proc.stdout)["k8s.io/dynamic-resource-allocation"]
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert f"k8s.io/dynamic-resource-allocation {version}" in readme
