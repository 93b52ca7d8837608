"""One workload definition, expanded into the exact objects and steps every harness replays.

Why one expander: the Python harness (dralloc's allocator), the Go harness (upstream's
structured allocator) and the end-to-end harness must do the *same* job, or their ratio means
nothing. A workload file in ``bench/workloads/`` is compact (node count, devices per node, the
class and claim specs of scheduler_perf's templates); :func:`expand` turns it into
``resource.k8s.io/v1`` dicts plus an ordered list of pod steps, and the Go program reads that
expanded form (written by :func:`write_scenario`), never the compact one.

Steps follow scheduler_perf:

* ``fill`` workloads (SchedulingWithResourceClaimTemplate / ...WithResourceClaim): ``initPods``
  unmeasured pods, then ``measurePods`` measured ones; each pod either gets a new claim from
  the template or shares a named claim with four other pods.
* ``steady`` workloads (SteadyStateClusterResourceClaimTemplate): ``initClaims`` claims are
  pre-allocated the way scheduler_perf's allocResourceClaims op does it (for each claim a
  random node with room, the first free device there), then ``steady.pods`` measured pods run
  with at most ``steady.inFlight`` of them holding devices: before a new pod is placed, the
  oldest is deleted and its generated claim released, so utilisation stays constant.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WORKLOAD_DIR = Path(__file__).resolve().parent / "workloads"
API_VERSION = "resource.k8s.io/v1"
NODE_NAME_FIELD = "metadata.name"

Obj = dict[str, Any]


@dataclass(frozen=True)
class Workload:
    """A compact workload definition, as stored in ``bench/workloads/<name>.json``."""

    name: str
    mode: str  # "fill" or "steady"
    nodes: int
    devices_per_node: int
    classes: tuple[Obj, ...]
    claim_spec: Obj
    driver: str = "test-driver.cdi.k8s.io"
    numa_modulo: int = 0  # 0: numa = device index (upstream); n: numa = index % n
    init_pods: int = 0
    measure_pods: int = 0
    pods_per_claim: int = 1  # 1: a claim per pod from the template; 5: shared named claims
    init_claims: int = 0
    steady_pods: int = 0
    in_flight: int = 10
    seed: int = 1
    tags: tuple[str, ...] = ()
    upstream: str = ""
    description: str = ""
    key: str = ""  # the file name without .json

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Workload:
        steady = data.get("steady") or {}
        return cls(
            name=str(data["name"]),
            mode=str(data["mode"]),
            nodes=int(data["nodes"]),
            devices_per_node=int(data["devicesPerNode"]),
            classes=tuple(data["classes"]),
            claim_spec=dict(data["claimSpec"]),
            driver=str(data.get("driver", cls.driver)),
            numa_modulo=int(data.get("numaModulo", 0)),
            init_pods=int(data.get("initPods", 0)),
            measure_pods=int(data.get("measurePods", 0)),
            pods_per_claim=int(data.get("podsPerClaim", 1)),
            init_claims=int(data.get("initClaims", 0)),
            steady_pods=int(steady.get("pods", 0)),
            in_flight=int(steady.get("inFlight", 10)),
            seed=int(data.get("seed", 1)),
            tags=tuple(data.get("tags", ())),
            upstream=str(data.get("upstream", "")),
            description=str(data.get("description", "")),
        )

    @property
    def measured_pods(self) -> int:
        return self.steady_pods if self.mode == "steady" else self.measure_pods

    @property
    def devices(self) -> int:
        return self.nodes * self.devices_per_node

    def scaled(self, factor: float) -> Workload:
        """The same shape with fewer pods (``--quick``); nodes and devices stay."""
        if factor >= 1:
            return self

        def shrink(n: int) -> int:
            return (
                max(
                    self.pods_per_claim,
                    int(n * factor) // self.pods_per_claim * self.pods_per_claim,
                )
                if n
                else 0
            )

        return dataclasses.replace(
            self,
            init_pods=shrink(self.init_pods),
            measure_pods=shrink(self.measure_pods),
            steady_pods=shrink(self.steady_pods),
        )


def load(name_or_path: str | Path) -> Workload:
    """A workload by file path or by name (``template_2000pods_100nodes``)."""
    path = Path(name_or_path)
    if not path.suffix:
        path = WORKLOAD_DIR / f"{name_or_path}.json"
    return dataclasses.replace(Workload.from_dict(json.loads(path.read_text())), key=path.stem)


def load_all(tag: str | None = None) -> list[Workload]:
    """Every workload in ``bench/workloads/``, optionally only those carrying ``tag``."""
    found = [load(p) for p in sorted(WORKLOAD_DIR.glob("*.json"))]
    return [w for w in found if tag is None or tag in w.tags]


# --- objects ----------------------------------------------------------------------------


def node_name(index: int) -> str:
    return f"scheduler-perf-dra-{index}"


def make_node(index: int) -> Obj:
    """The node-with-dra-test-driver template (capacity pods 110, cpu 4, memory 32Gi)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node_name(index), "labels": {"node-with-dra": "true"}},
        "spec": {},
        "status": {
            "capacity": {"pods": "110", "cpu": "4", "memory": "32Gi"},
            "allocatable": {"pods": "110", "cpu": "4", "memory": "32Gi"},
            "conditions": [{"type": "Ready", "status": "True"}],
            "phase": "Running",
        },
    }


def make_slice(workload: Workload, index: int) -> Obj:
    """scheduler_perf's createResourceDriver: one slice per node, pool named after the node."""
    name = node_name(index)
    devices = []
    for i in range(workload.devices_per_node):
        numa = i % workload.numa_modulo if workload.numa_modulo else i
        devices.append(
            {
                "name": f"instance-{i}",
                "attributes": {
                    "model": {"string": "A100"},
                    "family": {"string": "GPU"},
                    "driverVersion": {"version": "1.2.3"},
                    "dra.example.com/numa": {"int": numa},
                },
                "capacity": {"memory": {"value": "1Gi"}},
            }
        )
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": name, "uid": f"slice-{index}", "resourceVersion": "1"},
        "spec": {
            "driver": workload.driver,
            "nodeName": name,
            "pool": {"name": name, "generation": 0, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def make_claim(namespace: str, name: str, spec: Obj, uid: str) -> Obj:
    """A claim as the API server returns it: with request defaults applied."""
    spec = copy.deepcopy(spec)
    for request in spec.get("devices", {}).get("requests", ()):
        if "exactly" in request:
            _default_count(request["exactly"])
        for sub in request.get("firstAvailable", ()):
            _default_count(sub)
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"namespace": namespace, "name": name, "uid": uid, "resourceVersion": "1"},
        "spec": spec,
    }


def _default_count(request: Obj) -> None:
    request.setdefault("allocationMode", "ExactCount")
    if request["allocationMode"] == "ExactCount":
        request.setdefault("count", 1)


def node_selector_for(node: str) -> Obj:
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}]}
        ]
    }


PLAIN_CLAIM_SPEC: Obj = {
    "devices": {"requests": [{"name": "req-0", "exactly": {"deviceClassName": "test-class"}}]}
}


@dataclass(frozen=True)
class Step:
    """One pod: claims released first (deleted pods), then the pod placed."""

    pod: str
    claims: tuple[str, ...]  # "namespace/name" of every claim the pod uses
    new_claims: tuple[Obj, ...] = ()  # claims created for this pod (from the template)
    release: tuple[str, ...] = ()  # claims whose pods were deleted just before this one

    def to_json(self) -> Obj:
        return {
            "pod": self.pod,
            "claims": list(self.claims),
            "newClaims": list(self.new_claims),
            "release": list(self.release),
        }


@dataclass(frozen=True)
class Scenario:
    """A workload expanded into objects and steps (what every harness replays)."""

    workload: Workload
    nodes: tuple[Obj, ...]
    slices: tuple[Obj, ...]
    classes: tuple[Obj, ...]
    shared_claims: tuple[Obj, ...]  # named claims created up front (SchedulingWithResourceClaim)
    preallocated: tuple[Obj, ...]  # claims with status.allocation already set (steady state)
    init_steps: tuple[Step, ...]
    measure_steps: tuple[Step, ...] = field(default=())

    def to_json(self) -> Obj:
        return {
            "name": self.workload.name,
            "nodes": list(self.nodes),
            "slices": list(self.slices),
            "classes": list(self.classes),
            "sharedClaims": list(self.shared_claims),
            "preallocated": list(self.preallocated),
            "initSteps": [s.to_json() for s in self.init_steps],
            "measureSteps": [s.to_json() for s in self.measure_steps],
        }


def expand(workload: Workload) -> Scenario:
    nodes = tuple(make_node(i) for i in range(workload.nodes))
    slices = tuple(make_slice(workload, i) for i in range(workload.nodes))
    classes = tuple(
        {"apiVersion": API_VERSION, "kind": "DeviceClass", **copy.deepcopy(c)}
        for c in workload.classes
    )
    if workload.mode == "fill":
        shared: list[Obj] = []
        init = tuple(_fill_steps(workload, "init", workload.init_pods, shared))
        measure = tuple(_fill_steps(workload, "test", workload.measure_pods, shared))
        return Scenario(workload, nodes, slices, classes, tuple(shared), (), init, measure)
    if workload.mode == "steady":
        pre = tuple(_preallocate(workload))
        return Scenario(
            workload, nodes, slices, classes, (), pre, (), tuple(_steady_steps(workload))
        )
    raise ValueError(f"{workload.name}: unknown mode {workload.mode!r}")


def _fill_steps(workload: Workload, namespace: str, pods: int, shared: list[Obj]) -> Iterator[Step]:
    for i in range(pods):
        pod = f"{namespace}/test-dra-{i}"
        if workload.pods_per_claim > 1:
            # pod-with-claim-ref.yaml: pod i uses test-claim-(i / 5)
            claim_name = f"test-claim-{i // workload.pods_per_claim}"
            if i % workload.pods_per_claim == 0:
                shared.append(
                    make_claim(
                        namespace, claim_name, workload.claim_spec, f"{namespace}-{claim_name}"
                    )
                )
            yield Step(pod, (f"{namespace}/{claim_name}",))
        else:
            claim_name = f"test-dra-{i}-resource"
            claim = make_claim(
                namespace, claim_name, workload.claim_spec, f"{namespace}-{claim_name}"
            )
            yield Step(pod, (f"{namespace}/{claim_name}",), new_claims=(claim,))


def _preallocate(workload: Workload) -> Iterator[Obj]:
    """allocResourceClaims: per claim, a random node with room, its first free device."""
    rng = random.Random(workload.seed)
    used = [0] * workload.nodes
    open_nodes = list(range(workload.nodes))
    for i in range(workload.init_claims):
        if not open_nodes:
            raise ValueError(f"{workload.name}: more initClaims than devices")
        pick = rng.randrange(len(open_nodes))
        node_index = open_nodes[pick]
        device = used[node_index]
        used[node_index] += 1
        if used[node_index] == workload.devices_per_node:
            open_nodes[pick] = open_nodes[-1]
            open_nodes.pop()
        node = node_name(node_index)
        claim = make_claim("init", f"test-claim-{i}", PLAIN_CLAIM_SPEC, f"init-test-claim-{i}")
        claim["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "req-0",
                            "driver": workload.driver,
                            "pool": node,
                            "device": f"instance-{device}",
                        }
                    ]
                },
                "nodeSelector": node_selector_for(node),
            }
        }
        yield claim


def _steady_steps(workload: Workload) -> Iterator[Step]:
    holding: list[str] = []
    for i in range(workload.steady_pods):
        release: tuple[str, ...] = ()
        if len(holding) >= workload.in_flight:
            release = (holding.pop(0),)
        claim_name = f"test-dra-{i}-resource"
        key = f"test/{claim_name}"
        claim = make_claim("test", claim_name, workload.claim_spec, f"test-{claim_name}")
        holding.append(key)
        yield Step(f"test/test-dra-{i}", (key,), new_claims=(claim,), release=release)


def write_scenario(scenario: Scenario, path: Path) -> Path:
    path.write_text(json.dumps(scenario.to_json(), separators=(",", ":")))
    return path


def placement_digest(placements: Sequence[tuple[str, str]]) -> str:
    """A short hash of (pod, node) pairs, to check both harnesses made the same choices."""
    import hashlib

    text = "\n".join(f"{pod}={node}" for pod, node in placements)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
