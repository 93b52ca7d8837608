"""Level 1: the allocation engine alone, dralloc's allocator against upstream's, same job.

Both engines replay the same expanded scenario (:mod:`bench.scenario`) the way their control
plane drives them:

* dralloc: one long-lived :class:`~operators.allocator.state.AllocatorState` fed by "watch
  events" (slices, classes and pre-allocated claims parsed once with ``parse_object``), and per
  pod ``find_node`` over the candidate nodes, then ``assume`` for the chosen allocations and
  ``remove_claim`` when a pod's generated claim goes away: exactly the operator's calls.
* upstream: ``bench/upstream`` (Go), a fresh structured allocator per pod over a copy of the
  allocated set and every slice, then ``Allocate`` node by node: kube-scheduler's PreFilter and
  Filter.

The replay also runs under the operator's garbage-collector settings (``operators/gcpause.py``):
the operator raises the young-generation threshold at start and, once its initial list is
loaded, collects and freezes what it holds, so collections never walk the cluster state. The
replay does the same after its setup (:func:`operator_gc`); without it, pauses walking the
replay's own parsed objects land in the measured pods (``--python-gc`` measures that way).

Only the measured steps are timed (scheduler_perf's ``collectMetrics``); parsing is not timed
on either side (the Go program unmarshals before the clock starts too). Both use first fit over
nodes in name order, so the placements must be identical: each result carries a digest of its
(pod, node) pairs and the report flags any difference.
"""

from __future__ import annotations

import gc
import tempfile
import time
import tracemalloc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench.goprogram import GoProgramUnavailable, go_binary, run_scenario
from bench.scenario import Scenario, Step, placement_digest, write_scenario
from operators import gcpause
from operators.allocator.nodes import NodeInfo, NodeSelector
from operators.allocator.state import AllocatorState
from operators.api import parse_object
from operators.settings import Settings

BENCH_DIR = Path(__file__).resolve().parent
UPSTREAM_BUILD = BENCH_DIR / "upstream" / "build"


@dataclass(frozen=True)
class EngineResult:
    """One engine on one workload."""

    engine: str  # "dralloc" | "upstream"
    workload: str
    pods: int
    unschedulable: int
    seconds: float
    pods_per_second: float
    digest: str
    init_seconds: float = 0.0
    # What the engine holds once the cluster is loaded and the init steps placed (the
    # scenario's objects and the allocator's state): Go's live heap after a collection,
    # Python's traced allocations (a separate run under tracemalloc). 0: not measured.
    heap_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class UpstreamUnavailable(RuntimeError):
    """The Go program cannot be built or found; the message says why."""


# --- dralloc --------------------------------------------------------------------------------


class DrallocReplay:
    """Replays a scenario through dralloc's allocator with the operator's calls."""

    def __init__(
        self, scenario: Scenario, policy: str = "first-fit", quotas: str | None = None
    ) -> None:
        self.policy = policy
        self.state = AllocatorState()
        for obj in scenario.slices:
            self.state.upsert_slice(parse_object(obj))
        for obj in scenario.classes:
            self.state.upsert_class(parse_object(obj))
        if quotas:
            for quota in roomy_quotas(scenario, checked=quotas == "checked"):
                self.state.upsert_quota(parse_object(quota))
        self.nodes = tuple(
            NodeInfo(n["metadata"]["name"], dict(n["metadata"].get("labels") or {}))
            for n in scenario.nodes
        )
        self.claims: dict[str, Any] = {}
        # Claims allocated so far and the node selector their allocation carries.
        self.pinned: dict[str, NodeSelector | None] = {}
        for obj in scenario.shared_claims:
            self.claims[_key(obj)] = parse_object(obj)
        for obj in scenario.preallocated:
            model = parse_object(obj)
            self.claims[_key(obj)] = model
            self.state.upsert_claim(model)
            selector = obj["status"]["allocation"].get("nodeSelector")
            self.pinned[_key(obj)] = NodeSelector.parse(selector) if selector else None
        # Claims created for pods are parsed now too: in the operator they arrive parsed from
        # the watch, and the Go side unmarshals everything before timing.
        self.new_claims = {
            _key(obj): parse_object(obj)
            for step in (*scenario.init_steps, *scenario.measure_steps)
            for obj in step.new_claims
        }

    def place(self, step: Step) -> str:
        """One pod; returns its node or "" when it does not fit."""
        state = self.state
        for key in step.release:
            state.remove_claim(self.claims.pop(key))
            self.pinned.pop(key, None)
        for obj in step.new_claims:
            key = _key(obj)
            self.claims[key] = self.new_claims.pop(key)
        pending = []
        selectors = []
        for key in step.claims:
            if key in self.pinned:
                selector = self.pinned[key]
                if selector is not None:
                    selectors.append(selector)
            else:
                pending.append(self.claims[key])
        if not pending:
            # Every claim allocated: the first node their selectors allow, found lazily as
            # the Go side does (no list of every matching node for a pod that needs none).
            return next((n.name for n in self.nodes if all(s.matches(n) for s in selectors)), "")
        candidates: Sequence[NodeInfo] = self.nodes
        if selectors:
            candidates = [n for n in self.nodes if all(s.matches(n) for s in selectors)]
        placement = state.find_node(pending, candidates, self.policy, explain=False)
        if placement.node is None:
            return ""
        for claim, allocation in zip(pending, placement.allocations, strict=True):
            state.assume(claim, allocation)
            self.pinned[allocation.claim] = allocation.node_selector
        return placement.node

    def warm_up(self, step: Step) -> None:
        """Place one pod without keeping the result: one-off costs (CEL grammar and selector
        compilation, the device index) belong to process start, not to throughput."""
        pending = [self.new_claims.get(_key(obj)) or parse_object(obj) for obj in step.new_claims]
        if pending:
            self.state.find_node(pending, self.nodes, self.policy, explain=False)

    def run(
        self, steps: Sequence[Step], placements: list[tuple[str, str]]
    ) -> tuple[int, int, float]:
        placed = failed = 0
        start = time.perf_counter()
        for step in steps:
            node = self.place(step)
            if node:
                placed += 1
            else:
                failed += 1
            placements.append((step.pod, node))
        return placed, failed, time.perf_counter() - start


def roomy_quotas(scenario: Scenario, checked: bool = False) -> list[dict[str, Any]]:
    """A DeviceQuota per namespace of the scenario's claims and class, with limits no pod
    reaches, so the placements stay upstream's and the digests still compare. Every
    allocation is counted; the search sees that no quota can refuse it and skips the check
    per device. ``checked`` adds a limit on a capacity no device publishes (it counts 0):
    no bound on it is cheap, so every device taken is checked too (the cost of quotas
    near their limits)."""
    claims = [
        *scenario.shared_claims,
        *scenario.preallocated,
        *(
            obj
            for step in (*scenario.init_steps, *scenario.measure_steps)
            for obj in step.new_claims
        ),
    ]
    namespaces = sorted({obj["metadata"].get("namespace") or "default" for obj in claims})
    return [
        {
            "apiVersion": "resource.dralloc.dev/v1",
            "kind": "DeviceQuota",
            "metadata": {"name": f"bench-{cls['metadata']['name']}", "namespace": namespace},
            "spec": {
                "deviceClassName": cls["metadata"]["name"],
                "hard": {
                    "devices": 10**9,
                    "claims": 10**9,
                    **({"capacity": {"bench.example.com/unpublished": "1"}} if checked else {}),
                },
            },
        }
        for namespace in namespaces
        for cls in scenario.classes
    ]


def _key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


@contextmanager
def operator_gc(enabled: bool = True) -> Iterator[None]:
    """The operator's collector settings from here to the end of the block: its young
    threshold, and what exists now (the loaded state) frozen, as after its initial list.
    The process's own settings come back afterwards (the bench runs more in this process).
    Disabled: a plain ``gc.collect()`` before the block and CPython's settings."""
    if not enabled:
        gc.collect()
        yield
        return
    threshold = gc.get_threshold()
    gcpause.configure(Settings().gc_young_threshold)
    gcpause.settle()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def run_dralloc(
    scenario: Scenario,
    policy: str = "first-fit",
    quotas: str | None = None,
    python_gc: bool = False,
) -> EngineResult:
    replay = DrallocReplay(scenario, policy, quotas)
    placements: list[tuple[str, str]] = []
    if scenario.init_steps:
        replay.warm_up(scenario.init_steps[0])
    _, _, init_seconds = replay.run(scenario.init_steps, placements)
    if scenario.measure_steps:
        replay.warm_up(scenario.measure_steps[0])
    with operator_gc(not python_gc):
        pods, failed, seconds = replay.run(scenario.measure_steps, placements)
    return EngineResult(
        engine="dralloc",
        workload=scenario.workload.name,
        pods=pods,
        unschedulable=failed,
        seconds=seconds,
        pods_per_second=pods / seconds if seconds > 0 else 0.0,
        digest=placement_digest(placements),
        init_seconds=init_seconds,
    )


# --- upstream -------------------------------------------------------------------------------


def upstream_binary(build: bool = True) -> Path:
    """Path of the Go program, building it into the cache if allowed."""
    try:
        return go_binary(UPSTREAM_BUILD, "DRALLOC_UPSTREAM_BENCH", build=build)
    except GoProgramUnavailable as error:
        raise UpstreamUnavailable(str(error)) from None


def dralloc_heap_bytes(scenario: Scenario) -> int:
    """Python memory held by a replay once the cluster is loaded and the init steps placed
    (as the Go program's ``heapBytes``), from a run of its own: tracemalloc slows
    allocation, so it never runs under a timed one."""
    gc.collect()
    tracemalloc.start()
    try:
        replay = DrallocReplay(scenario)
        replay.run(scenario.init_steps, [])
        if scenario.measure_steps:
            replay.warm_up(scenario.measure_steps[0])
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del replay
    return held


def run_upstream(scenario: Scenario, binary: Path) -> EngineResult:
    with tempfile.TemporaryDirectory(prefix="dralloc-bench-") as tmp:
        path = write_scenario(scenario, Path(tmp) / "scenario.json")
        data = run_scenario(binary, path, scenario.workload.name)
    measure = data["measure"]
    return EngineResult(
        engine="upstream",
        workload=scenario.workload.name,
        pods=int(measure["pods"]),
        unschedulable=int(measure["unschedulable"]),
        seconds=float(measure["seconds"]),
        pods_per_second=float(measure["podsPerSecond"]),
        digest=str(data["digest"]),
        init_seconds=float(data["init"]["seconds"]),
        heap_bytes=int(data.get("heapBytes") or 0),
    )


@dataclass(frozen=True)
class Comparison:
    """dralloc and upstream on one workload."""

    workload: str
    file: str
    nodes: int
    devices: int
    dralloc: EngineResult
    upstream: EngineResult | None
    dralloc_binpack: EngineResult | None = None  # the operator's default node policy
    smoke: bool = False
    # With quotas on: the same engine without them, run alternately in the same process, so
    # the ratios against upstream before and after quotas come from one run.
    dralloc_no_quotas: EngineResult | None = None

    @property
    def ratio(self) -> float | None:
        if self.upstream is None or self.upstream.pods_per_second <= 0:
            return None
        return self.dralloc.pods_per_second / self.upstream.pods_per_second

    @property
    def ratio_no_quotas(self) -> float | None:
        if self.dralloc_no_quotas is None or self.upstream is None:
            return None
        if self.upstream.pods_per_second <= 0:
            return None
        return self.dralloc_no_quotas.pods_per_second / self.upstream.pods_per_second

    @property
    def same_placements(self) -> bool | None:
        return None if self.upstream is None else self.dralloc.digest == self.upstream.digest

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "file": self.file,
            "nodes": self.nodes,
            "devices": self.devices,
            "dralloc": self.dralloc.to_json(),
            "upstream": self.upstream.to_json() if self.upstream else None,
            "drallocBinpack": self.dralloc_binpack.to_json() if self.dralloc_binpack else None,
            "ratio": self.ratio,
            "samePlacements": self.same_placements,
            "smoke": self.smoke,
            "drallocNoQuotas": (
                self.dralloc_no_quotas.to_json() if self.dralloc_no_quotas else None
            ),
            "ratioNoQuotas": self.ratio_no_quotas,
        }


def best(results: Sequence[EngineResult]) -> EngineResult:
    """The fastest of repeated runs: on a shared machine, noise only ever slows a run down."""
    return max(results, key=lambda r: r.pods_per_second)


def compare(
    scenario: Scenario,
    file: str,
    binary: Path | None,
    *,
    repeat: int = 1,
    binpack: bool = False,
    quotas: str | None = None,
    python_gc: bool = False,
    memory: bool = False,
) -> Comparison:
    """Upstream and dralloc (first fit) alternately ``repeat`` times, best of each; with
    ``quotas`` dralloc runs with a roomy DeviceQuota per namespace and class, with
    ``python_gc`` under CPython's collector settings instead of the operator's; with
    ``memory`` dralloc's memory is measured too (one more run, see dralloc_heap_bytes)."""
    upstream_runs: list[EngineResult] = []
    dralloc_runs: list[EngineResult] = []
    plain_runs: list[EngineResult] = []  # with quotas on: the same without them
    for _ in range(max(1, repeat)):
        if binary is not None:
            upstream_runs.append(run_upstream(scenario, binary))
        dralloc_runs.append(run_dralloc(scenario, "first-fit", quotas, python_gc))
        if quotas:
            plain_runs.append(run_dralloc(scenario, "first-fit", None, python_gc))
    w = scenario.workload
    fastest = best(dralloc_runs)
    if memory:
        fastest = replace(fastest, heap_bytes=dralloc_heap_bytes(scenario))
    return Comparison(
        w.name,
        file,
        w.nodes,
        w.devices,
        fastest,
        best(upstream_runs) if upstream_runs else None,
        dralloc_binpack=run_dralloc(scenario, "binpack", quotas, python_gc) if binpack else None,
        smoke="smoke" in w.tags,
        dralloc_no_quotas=best(plain_runs) if plain_runs else None,
    )
