"""Differential: one workload allocated by in-tree DRA and by dralloc in in-tree mode.

The same workload (realistically sized kwok nodes, one node-local ResourceSlice each with
plain devices and one NoExecute-tainted device, a DeviceClass with config, claim templates
for plain, tolerating, prioritized-list and adminAccess requests, a named claim two pods
share) runs three times, each in a namespace, on nodes and with a driver of its own, so the
runs never compete for a device:

1. ``in-tree``: in-tree DRA alone on the DRA testbed (kube-scheduler's DynamicResources plugin,
   kube-controller-manager's resourceclaim and device-taint-eviction controllers); no dralloc
   runs meanwhile;
2. ``dralloc-beside-kcm``: on the same testbed, dralloc in in-tree mode as allocator only
   (``--api-group=resource.k8s.io --no-claims-controller --no-taints-controller``): its
   webhook gates the pods of its namespace, kcm creates the claims from templates, dralloc
   allocates and lifts the gate, kube-scheduler binds;
3. ``dralloc-replacing-kcm``: on a testbed whose kcm runs neither DRA controller, dralloc with
   all its controllers: it also creates the claims and records them on the pods.

The resulting objects are reduced to their *shape* (names, UIDs and timestamps dropped; the
node, the driver and the device replaced by what they stand for: "the pod's node", "a plain
device") and each dralloc shape must equal the in-tree one, except for the differences in
:data:`INTENDED`, each with its reason (and one spelling normalized, see
:func:`config_scope`). kube-scheduler must have bound every pod, to the node of its claims'
``allocation.nodeSelector``; the field managers show who created, allocated and recorded
what; and every claim must pass the API server's validation again (a server-side dry run of
its status, and of its allocation written afresh onto a copy of the claim). Two tests show
that the checks can fail (a missing toleration copy, an invalid allocation).

``DRALLOC_DRA_KUBECONFIG`` and ``DRALLOC_KCMLESS_KUBECONFIG`` reuse running testbeds.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .kube_helpers import (
    JsonObject,
    Testbed,
    find_binaries,
    start_testbed,
    stop_testbed,
    unique_name,
    wait_for,
)
from .operator_fixtures import OperatorProcess, ensure_lease_namespace

pytestmark = pytest.mark.timeout(600)

V1 = "resource.k8s.io/v1"
FINALIZER = "resource.kubernetes.io/delete-protection"
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
GATE_LABEL = "e2e.dralloc.test/gated-by"
TAINT_KEY = "example.com/maintenance"
NODES = 3
PLAIN_PER_NODE = 3
SCHEDULER = "default-scheduler"
EXPLAIN_PERIOD_S = 10.0  # dralloc explains a waiting pod again after this long

# The systems compared: in-tree DRA alone, and dralloc in in-tree mode beside kcm's DRA
# controllers (allocator only) or in their place (all its controllers).
IN_TREE = "in-tree"
BESIDE = "dralloc-beside-kcm"
REPLACING = "dralloc-replacing-kcm"
DRALLOC_SYSTEMS = (BESIDE, REPLACING)

# --- the workload ------------------------------------------------------------------------


@dataclass
class Run:
    """One system's copy of the workload: its namespace, driver, class and nodes."""

    system: str
    namespace: str
    driver: str
    device_class: str
    label: str
    nodes: list[str] = field(default_factory=list)
    gate_label: str = ""  # value of GATE_LABEL on the namespace ("" = not labelled)

    @property
    def slice_names(self) -> list[str]:
        return [f"{node}-diff" for node in self.nodes]


def new_run(system: str) -> Run:
    label = unique_name(f"diff-{system}")
    return Run(
        system=system,
        namespace=label,
        driver=f"{label}.diff.dralloc.test",
        device_class=label,
        label=label,
    )


def device(name: str, kind: str, index: int, **extra: Any) -> JsonObject:
    return {
        "name": name,
        "attributes": {"kind": {"string": kind}, "index": {"int": index}},
        "capacity": {"memory": {"value": "16Gi"}},
        **extra,
    }


def slice_for(run: Run, node: str) -> JsonObject:
    """One node-local slice: plain devices, and one device with a NoExecute taint."""
    devices = [device(f"dev-{i}", "plain", i) for i in range(PLAIN_PER_NODE)]
    devices.append(
        device(
            "tainted-0",
            "tainted",
            PLAIN_PER_NODE,
            taints=[{"key": TAINT_KEY, "value": "planned", "effect": "NoExecute"}],
        )
    )
    return {
        "apiVersion": V1,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-diff"},
        "spec": {
            "driver": run.driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def kind_is(run: Run, kind: str) -> list[JsonObject]:
    # Unqualified attribute names are in the driver's domain.
    return [{"cel": {"expression": f'device.attributes["{run.driver}"].kind == "{kind}"'}}]


def opaque(driver: str, **parameters: Any) -> JsonObject:
    return {"opaque": {"driver": driver, "parameters": parameters}}


def claim_template(run: Run, name: str, devices: JsonObject, **metadata: Any) -> JsonObject:
    return {
        "apiVersion": V1,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": run.namespace},
        "spec": {"metadata": metadata, "spec": {"devices": devices}},
    }


def exactly(run: Run, kind: str, **more: Any) -> JsonObject:
    return {"deviceClassName": run.device_class, "selectors": kind_is(run, kind), **more}


def workload_pod(run: Run, name: str, claims: list[JsonObject]) -> JsonObject:
    """A pod of a realistic size asking for ``claims``; each container uses every claim."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": run.namespace, "labels": {"app": "diff"}},
        "spec": {
            "nodeSelector": {"e2e-pool": run.label},
            "resourceClaims": claims,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/diff",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi"},
                        "claims": [{"name": c["name"]} for c in claims],
                    },
                }
            ],
        },
    }


def from_template(name: str, template_name: str) -> JsonObject:
    return {"name": name, "resourceClaimTemplateName": template_name}


POD_NAMES = (
    "plain-0",
    "plain-1",
    "plain-2",
    "shared-a",
    "shared-b",
    "tolerating",
    "fallback",
    "admin",
)


def workload(run: Run) -> tuple[list[JsonObject], list[JsonObject]]:
    """(everything but the pods, the pods) of one run."""
    labels = {ADMIN_ACCESS_LABEL: "true"}
    if run.gate_label:
        labels[GATE_LABEL] = run.gate_label
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": run.namespace, "labels": labels},
    }
    device_class = {
        "apiVersion": V1,
        "kind": "DeviceClass",
        "metadata": {"name": run.device_class},
        "spec": {
            "selectors": [{"cel": {"expression": f'device.driver == "{run.driver}"'}}],
            "config": [opaque(run.driver, source="class")],
        },
    }
    plain = claim_template(
        run,
        "plain",
        {
            "requests": [{"name": "dev", "exactly": exactly(run, "plain")}],
            "config": [{"requests": ["dev"], **opaque(run.driver, source="claim")}],
        },
        labels={"from-template": "plain"},
        annotations={"example.com/note": "copied"},
    )
    tolerating = claim_template(
        run,
        "tolerating",
        {
            "requests": [
                {
                    "name": "dev",
                    "exactly": exactly(
                        run,
                        "tainted",
                        tolerations=[
                            {"key": TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}
                        ],
                    ),
                }
            ]
        },
    )
    fallback = claim_template(
        run,
        "fallback",
        {
            "requests": [
                {
                    "name": "dev",
                    "firstAvailable": [
                        {
                            "name": "huge",
                            "deviceClassName": run.device_class,
                            "selectors": kind_is(run, "huge"),
                        },
                        {
                            "name": "plain",
                            "deviceClassName": run.device_class,
                            "selectors": kind_is(run, "plain"),
                        },
                    ],
                }
            ]
        },
    )
    admin = claim_template(
        run,
        "admin",
        {"requests": [{"name": "dev", "exactly": exactly(run, "plain", adminAccess=True)}]},
    )
    shared = {
        "apiVersion": V1,
        "kind": "ResourceClaim",
        "metadata": {"name": "shared", "namespace": run.namespace},
        "spec": {"devices": {"requests": [{"name": "dev", "exactly": exactly(run, "plain")}]}},
    }
    objects = [
        namespace,
        device_class,
        *[slice_for(run, node) for node in run.nodes],
        plain,
        tolerating,
        fallback,
        admin,
        shared,
    ]
    pods = [
        *[workload_pod(run, f"plain-{i}", [from_template("dev", "plain")]) for i in range(3)],
        workload_pod(run, "shared-a", [{"name": "dev", "resourceClaimName": "shared"}]),
        workload_pod(run, "shared-b", [{"name": "dev", "resourceClaimName": "shared"}]),
        workload_pod(run, "tolerating", [from_template("dev", "tolerating")]),
        workload_pod(run, "fallback", [from_template("dev", "fallback")]),
        workload_pod(run, "admin", [from_template("dev", "admin")]),
    ]
    return objects, pods


# --- running and reading back --------------------------------------------------------------


@dataclass
class Observed:
    """What one run left in the cluster, as the API server returns it."""

    run: Run
    pods: dict[str, JsonObject]
    claims: list[JsonObject]
    slices: list[JsonObject]
    scheduled_by: dict[str, str]  # pod -> reporting component of its Scheduled event
    testbed: Testbed
    operator: OperatorProcess | None = None

    @staticmethod
    def writers(obj: JsonObject, *path: str) -> set[str]:
        """The field managers that own ``path`` (e.g. ``f:status``, ``f:allocation``)."""
        found = set()
        for entry in obj["metadata"].get("managedFields") or []:
            fields = entry.get("fieldsV1") or {}
            for step in path:
                fields = fields.get(step) if isinstance(fields, dict) else None
            if fields is not None:
                found.add(entry["manager"])
        return found


def items(testbed: Testbed, *args: str) -> list[JsonObject]:
    return list((testbed.get(*args) or {}).get("items") or [])


def all_bound(testbed: Testbed, run: Run) -> dict[str, JsonObject] | None:
    pods = {p["metadata"]["name"]: p for p in items(testbed, "pods", "-n", run.namespace)}
    if set(pods) == set(POD_NAMES) and all(p["spec"].get("nodeName") for p in pods.values()):
        return pods
    return None


def run_workload(testbed: Testbed, run: Run, timeout: float = 120.0) -> Observed:
    run.nodes = testbed.create_nodes(
        NODES, {"e2e-pool": run.label}, prefix=run.label, cpu="8", memory="32Gi", pods=110
    )
    objects, pods = workload(run)
    testbed.apply(*objects)
    testbed.apply(*pods)
    try:
        wait_for(
            f"every pod of the {run.system} run bound",
            lambda: all_bound(testbed, run),
            timeout=timeout,
        )
    except AssertionError as error:
        state = {
            p["metadata"]["name"]: {
                "nodeName": p["spec"].get("nodeName"),
                "gates": p["spec"].get("schedulingGates"),
                "conditions": p.get("status", {}).get("conditions"),
            }
            for p in items(testbed, "pods", "-n", run.namespace)
        }
        raise AssertionError(f"{error}\npods: {json.dumps(state, indent=1)}") from None

    # The claim statuses are final once every reservation is there (the bind comes after).
    def settled() -> list[JsonObject] | None:
        claims = items(testbed, "resourceclaims", "-n", run.namespace, "--show-managed-fields")
        reserved = sum(len((c.get("status") or {}).get("reservedFor") or []) for c in claims)
        return claims if reserved == len(POD_NAMES) else None

    claims = wait_for("every claim reserved", settled, timeout=30)
    pods_now = {
        p["metadata"]["name"]: p
        for p in items(testbed, "pods", "-n", run.namespace, "--show-managed-fields")
    }
    events = items(testbed, "events", "-n", run.namespace, "--field-selector=reason=Scheduled")
    scheduled_by = {
        e["involvedObject"]["name"]: e.get("reportingComponent")
        or e.get("source", {}).get("component", "")
        for e in events
    }
    slices = [s for s in items(testbed, "resourceslices") if s["spec"]["driver"] == run.driver]
    return Observed(run, pods_now, claims, slices, scheduled_by, testbed)


def cleanup(testbed: Testbed, run: Run, *, wait: bool = False) -> None:
    """Delete what the run made. ``wait``: until the namespace is gone (while the operator
    that holds finalizers on its claims still runs), at most a minute."""
    testbed.kubectl(
        "delete", "namespace", run.namespace, f"--wait={str(wait).lower()}", "--timeout=60s",
        "--ignore-not-found", check=False, timeout=90,
    )  # fmt: skip
    if run.nodes:
        testbed.kubectl(
            "delete", "resourceslices", *run.slice_names, "--ignore-not-found", check=False
        )
        testbed.kubectl("delete", "nodes", *run.nodes, "--ignore-not-found", check=False)
    testbed.kubectl("delete", "deviceclass", run.device_class, "--ignore-not-found", check=False)


# --- shapes -------------------------------------------------------------------------------

GENERATED_SUFFIX = re.compile(r"-[a-z0-9]{5}$")


def claim_key(claim: JsonObject) -> str:
    """A name for a claim that is the same in both runs: the named claim's name, or
    ``<pod>/<pod claim entry>`` for a generated one."""
    meta = claim["metadata"]
    pod_claim = (meta.get("annotations") or {}).get(POD_CLAIM_NAME)
    owner = next(
        (o["name"] for o in meta.get("ownerReferences") or [] if o.get("kind") == "Pod"), None
    )
    if pod_claim is not None and owner is not None:
        return f"{owner}/{pod_claim}"
    return str(meta["name"])


def normalized_name(name: str | None) -> str | None:
    """A generated name without its random suffix (``plain-0-dev-`` + 5 characters)."""
    return None if name is None else GENERATED_SUFFIX.sub("-*", name)


def device_kinds(slices: list[JsonObject]) -> dict[tuple[str, str], str]:
    """(pool, device) -> the device's ``kind`` attribute: equivalent devices look the same."""
    return {
        (s["spec"]["pool"]["name"], d["name"]): d["attributes"]["kind"]["string"]
        for s in slices
        for d in s["spec"]["devices"]
    }


def node_placeholder(value: str, node: str | None) -> str:
    return "<pod's node>" if node is not None and value == node else value


EVERY_REQUEST = "<every request>"


def config_scope(claim: JsonObject, requests: list[str] | None, results: list[JsonObject]) -> Any:
    """An allocated config's ``requests``, with "applies to every request" in one spelling.

    Empty means every request. kube-scheduler 1.36 (the testbed's) lists the request names
    even when they are all of them; from 1.37 upstream's allocator leaves such a list empty,
    and so does dralloc, which follows 1.37. To a driver both say the same.
    """
    if not requests:
        return EVERY_REQUEST
    chosen = {r.get("request") for r in results}
    for request in claim["spec"]["devices"]["requests"]:
        name = request["name"]
        subs = {f"{name}/{sub['name']}" for sub in request.get("firstAvailable") or []}
        if name not in requests and not (subs & chosen & set(requests)):
            return requests
    return EVERY_REQUEST


def claim_shape(claim: JsonObject, observed: Observed) -> JsonObject:
    meta = claim["metadata"]
    status = claim.get("status") or {}
    allocation = copy.deepcopy(status.get("allocation") or {})
    uids = {p["metadata"]["uid"]: name for name, p in observed.pods.items()}
    reserved = status.get("reservedFor") or []
    nodes = {
        observed.pods[uids[r["uid"]]]["spec"]["nodeName"] for r in reserved if r.get("uid") in uids
    }
    node = next(iter(nodes)) if len(nodes) == 1 else None
    kinds = device_kinds(observed.slices)
    results = []
    for result in (allocation.get("devices") or {}).get("results") or []:
        result = dict(result)
        device_kind = kinds.get((result.get("pool", ""), result.get("device", "")))
        result["device"] = f"<a {device_kind} device>" if device_kind else result.get("device")
        result["pool"] = node_placeholder(result.get("pool", ""), node)
        result["driver"] = (
            "<driver>" if result.get("driver") == observed.run.driver else result.get("driver")
        )
        results.append(result)
    config = []
    for entry in (allocation.get("devices") or {}).get("config") or []:
        entry = copy.deepcopy(entry)
        entry["requests"] = config_scope(claim, entry.get("requests"), results)
        config.append(entry)
    selector = copy.deepcopy(allocation.get("nodeSelector"))
    for term in (selector or {}).get("nodeSelectorTerms") or []:
        for requirement in [*term.get("matchFields", []), *term.get("matchExpressions", [])]:
            requirement["values"] = [
                node_placeholder(v, node) for v in requirement.get("values", [])
            ]
    shape_allocation = {
        key: value for key, value in allocation.items() if key not in ("devices", "nodeSelector")
    }
    if "allocationTimestamp" in shape_allocation:
        shape_allocation["allocationTimestamp"] = "<set>"
    if allocation:
        shape_allocation.update(
            {"devices": {"results": results, "config": config}, "nodeSelector": selector}
        )
    owners = []
    for owner in meta.get("ownerReferences") or []:
        owner = dict(owner)
        pod = observed.pods.get(owner.get("name", ""))
        owner["uid"] = (
            "<the pod's uid>"
            if pod and pod["metadata"]["uid"] == owner.get("uid")
            else owner.get("uid")
        )
        owners.append(owner)
    return {
        "name": normalized_name(meta.get("name")) if meta.get("generateName") else meta.get("name"),
        "generateName": meta.get("generateName"),
        "labels": meta.get("labels") or {},
        "annotations": meta.get("annotations") or {},
        "finalizers": sorted(meta.get("finalizers") or []),
        "ownerReferences": owners,
        "spec": claim.get("spec"),
        "status fields": sorted(status),
        "allocation": shape_allocation,
        "reservedFor": sorted(
            (
                {
                    **r,
                    "uid": "<the pod's uid>"
                    if uids.get(r.get("uid", "")) == r.get("name")
                    else r.get("uid"),
                }
                for r in reserved
            ),
            key=lambda r: str(r.get("name")),
        ),
    }


def pod_shape(
    pod: JsonObject, observed: Observed, claims_by_name: Mapping[str, JsonObject]
) -> JsonObject:
    spec = pod["spec"]
    status = pod.get("status") or {}
    node = spec.get("nodeName")
    claim_nodes = set()
    for entry in spec.get("resourceClaims") or []:
        name = entry.get("resourceClaimName") or next(
            (
                s.get("resourceClaimName")
                for s in status.get("resourceClaimStatuses") or []
                if s["name"] == entry["name"]
            ),
            None,
        )
        claim = claims_by_name.get(name or "")
        selector = ((claim or {}).get("status") or {}).get("allocation", {}).get("nodeSelector")
        for term in (selector or {}).get("nodeSelectorTerms") or []:
            for requirement in term.get("matchFields", []):
                claim_nodes.update(requirement.get("values", []))
    return {
        "bound": bool(node),
        "bound by": observed.scheduled_by.get(pod["metadata"]["name"]),
        "on the node of its claims' nodeSelector": claim_nodes == {node},
        "annotations": sorted(pod["metadata"].get("annotations") or {}),
        "schedulingGates": spec.get("schedulingGates"),
        "affinity": spec.get("affinity"),
        "resourceClaims": spec.get("resourceClaims"),
        "resourceClaimStatuses": [
            {**s, "resourceClaimName": normalized_name(s.get("resourceClaimName"))}
            for s in status.get("resourceClaimStatuses") or []
        ],
        "conditions": sorted((c["type"], c["status"]) for c in status.get("conditions") or []),
    }


def shape(observed: Observed) -> JsonObject:
    by_name = {c["metadata"]["name"]: c for c in observed.claims}
    tree = {
        "pods": {
            name: pod_shape(pod, observed, by_name) for name, pod in sorted(observed.pods.items())
        },
        "claims": {
            claim_key(c): claim_shape(c, observed) for c in sorted(observed.claims, key=claim_key)
        },
    }
    # The run's own names (in CEL expressions, class references, opaque config) read alike.
    run = observed.run
    text = json.dumps(tree)
    for name, placeholder in ((run.driver, "<driver>"), (run.device_class, "<class>")):
        text = text.replace(name, placeholder)
    result: JsonObject = json.loads(text)
    return result


@dataclass(frozen=True)
class Intended:
    """A difference between the systems that is by design: where, and why."""

    systems: tuple[str, ...]
    path: tuple[str, ...]  # "*" matches any key at that level
    why: str
    drop: tuple[str, ...] = ()
    """At ``path`` a list: these names are dropped from it, or these keys from each of its
    objects. Empty: the whole field at ``path`` is dropped."""


INTENDED = (
    Intended(
        DRALLOC_SYSTEMS,
        ("pods", "*", "annotations"),
        "dralloc reports what it allocated on the pod (the devices annotation, readable by the "
        "workload through the downward API) and who allocated it (the record that lets two "
        "misconfigured allocators find each other, docs/design.md 'Trust')",
        drop=("resource.dralloc.dev/devices", "resource.dralloc.dev/allocated-by"),
    ),
    Intended(
        (REPLACING,),
        ("claims", "*", "ownerReferences"),
        "dralloc's claim controller sets blockOwnerDeletion on the pod reference of a claim "
        "it generates, in both API modes (so that a pod deleted in the foreground goes only "
        "after its claims); kcm's leaves it unset. Generated claims go with their pod either "
        "way (garbage collection)",
        drop=("blockOwnerDeletion",),
    ),
    Intended(
        (IN_TREE, *DRALLOC_SYSTEMS),
        ("pods", "*", "affinity"),
        "dralloc pins a pod it releases to the node it chose (a required node affinity, "
        "written with the gate's removal), in-tree too: unpinned, kube-scheduler's DRA plugin "
        "may clear the claim when no node passes and then bind the pod on a stale view of it "
        "(PodProtocol.pins_node). The pin is checked on its own: the node the pod is bound to",
    ),
)


def without_intended(tree: JsonObject, system: str) -> JsonObject:
    tree = copy.deepcopy(tree)
    for intended in INTENDED:
        if system not in intended.systems:
            continue
        for parent, key in _walk(tree, intended.path):
            value = parent.get(key)
            if not intended.drop or not isinstance(value, list):
                parent.pop(key, None)
                continue
            kept = []
            for item in value:
                if isinstance(item, dict):
                    kept.append({k: v for k, v in item.items() if k not in intended.drop})
                elif item not in intended.drop:
                    kept.append(item)
            parent[key] = kept
    return tree


def _walk(tree: Any, path: tuple[str, ...]) -> Iterator[tuple[dict[str, Any], str]]:
    if not isinstance(tree, dict) or not path:
        return
    head, rest = path[0], path[1:]
    keys = list(tree) if head == "*" else [head]
    for key in keys:
        if key not in tree:
            continue
        if rest:
            yield from _walk(tree[key], rest)
        else:
            yield tree, key


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Every path where ``a`` and ``b`` differ, with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                out.append(
                    f"{path}/{key}: {a.get(key, '<absent>')!r} != {b.get(key, '<absent>')!r}"
                )
            else:
                out.extend(differences(a[key], b[key], f"{path}/{key}"))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in differences(x, y, f"{path}[{i}]")
        ]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


# --- validation by the API server ----------------------------------------------------------


def dry_run_status(testbed: Testbed, claim: JsonObject) -> None:
    """The claim as read, sent back as a status update: the server validates it (and keeps
    nothing: a dry run)."""
    testbed.kubectl(
        "replace", "--subresource=status", "--dry-run=server", "-f", "-", input=json.dumps(claim)
    )


def dry_run_fresh_allocation(
    testbed: Testbed, claim: JsonObject
) -> subprocess.CompletedProcess[str]:
    """The claim's allocation written onto a fresh copy of the claim (same spec, no
    allocation yet): the server validates an allocation fully only when it is first set
    (later updates only check it is unchanged). The copy is created for real, then deleted."""
    meta = claim["metadata"]
    name = f"{meta['name'][:50]}-copy"
    body = {
        "apiVersion": V1,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": meta["namespace"]},
        "spec": claim["spec"],
    }
    testbed.apply(body)
    try:
        created = testbed.get("resourceclaim", name, "-n", meta["namespace"])
        assert created is not None
        created["status"] = {
            "allocation": claim["status"]["allocation"],
            "reservedFor": claim["status"].get("reservedFor"),
        }
        return testbed.kubectl(
            "replace",
            "--subresource=status",
            "--dry-run=server",
            "-f",
            "-",
            input=json.dumps(created),
            check=False,
        )
    finally:
        testbed.kubectl(
            "delete", "resourceclaim", name, "-n", meta["namespace"], "--wait=false", check=False
        )


# --- the test -----------------------------------------------------------------------------


# Field managers that write what, per system: kcm (its claim controller) or dralloc.
WRITERS = {
    IN_TREE: {"claim": "kube-controller-manager", "allocation": "kube-scheduler",
              "claim statuses": "ResourceClaimController"},
    BESIDE: {"claim": "kube-controller-manager", "allocation": "dralloc",
             "claim statuses": "ResourceClaimController"},
    REPLACING: {"claim": "dralloc", "allocation": "dralloc", "claim statuses": "dralloc"},
}  # fmt: skip


def dralloc_in_tree(
    testbed: Testbed, log_path: Path, gate_label: str, *, allocator_only: bool
) -> OperatorProcess:
    """dralloc in in-tree mode, gating the pods of labelled namespaces only (so that nothing
    else on the testbed is gated by it); as allocator only beside kcm's DRA controllers, or
    with its own claim and taint controllers in their place."""
    ensure_lease_namespace(testbed)
    extra = ["--api-group=resource.k8s.io", f"--gate-namespace-label={GATE_LABEL}={gate_label}"]
    if allocator_only:
        extra += ["--no-claims-controller", "--no-taints-controller"]
    return OperatorProcess(testbed, log_path, unique_name("dralloc-diff"), extra=extra)


@pytest.fixture(scope="module")
def kcmless_testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """In-tree DRA's scheduler plugin on, kcm's two DRA controllers off (dralloc's take their
    place). ``DRALLOC_KCMLESS_KUBECONFIG`` reuses a running one (``testbed/up --dra
    --no-kcm-dra``)."""
    binaries = find_binaries()
    reused = os.environ.get("DRALLOC_KCMLESS_KUBECONFIG")
    if reused:
        yield Testbed(Path(reused), binaries, None, dra=True)
        return
    state_dir = tmp_path_factory.mktemp("testbed-kcmless")
    testbed = start_testbed(state_dir, binaries, dra=True, kcm_dra=False)
    try:
        yield testbed
    finally:
        stop_testbed(testbed)


@pytest.fixture(scope="module")
def in_tree(dra_testbed: Testbed) -> Iterator[Observed]:
    """Run 1: in-tree DRA alone (no dralloc runs while kube-scheduler allocates)."""
    run = new_run(IN_TREE)
    try:
        yield run_workload(dra_testbed, run)
    finally:
        cleanup(dra_testbed, run)


def dralloc_run(
    testbed: Testbed, system: str, log_dir: Path, *, allocator_only: bool
) -> Iterator[Observed]:
    run = new_run(system)
    run.gate_label = run.label
    operator = dralloc_in_tree(
        testbed, log_dir / "operator.log", run.gate_label, allocator_only=allocator_only
    )
    try:
        operator.start()
        operator.wait_ready()
        try:
            observed = run_workload(testbed, run)
        except AssertionError as error:
            raise AssertionError(f"{error}\noperator log:\n{operator.log()[-4000:]}") from None
        observed.operator = operator
        yield observed
    finally:
        # With kcm's claim controller off, only dralloc's lets go of the claims.
        cleanup(testbed, run, wait=operator.process is not None)
        operator.stop()


@pytest.fixture(scope="module")
def beside(
    dra_testbed: Testbed, in_tree: Observed, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Observed]:
    """Run 2: dralloc as allocator only, beside kcm's DRA controllers (after run 1)."""
    yield from dralloc_run(
        dra_testbed, BESIDE, tmp_path_factory.mktemp("beside"), allocator_only=True
    )


@pytest.fixture(scope="module")
def replacing(
    kcmless_testbed: Testbed, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Observed]:
    """Run 3: dralloc with all its controllers, on the testbed without kcm's DRA ones."""
    yield from dralloc_run(
        kcmless_testbed, REPLACING, tmp_path_factory.mktemp("replacing"), allocator_only=False
    )


@pytest.fixture(params=DRALLOC_SYSTEMS)
def dralloc(request: pytest.FixtureRequest) -> Observed:
    found: Observed = request.getfixturevalue(
        {BESIDE: "beside", REPLACING: "replacing"}[request.param]
    )
    return found


@pytest.fixture(params=(IN_TREE, *DRALLOC_SYSTEMS))
def any_run(request: pytest.FixtureRequest) -> Observed:
    name = {IN_TREE: "in_tree", BESIDE: "beside", REPLACING: "replacing"}[request.param]
    found: Observed = request.getfixturevalue(name)
    return found


def test_kube_scheduler_binds_every_pod_where_its_claims_are(any_run: Observed) -> None:
    system = any_run.run.system
    by_name = {c["metadata"]["name"]: c for c in any_run.claims}
    for name, pod in any_run.pods.items():
        shape_of = pod_shape(pod, any_run, by_name)
        assert shape_of["bound by"] == SCHEDULER, f"{system}: pod {name}: {shape_of}"
        assert shape_of["on the node of its claims' nodeSelector"], f"{system}: pod {name}"
    writers = WRITERS[system]
    for claim in any_run.claims:
        name = claim["metadata"]["name"]
        assert any_run.writers(claim, "f:status", "f:allocation") == {writers["allocation"]}, name
        if claim["metadata"].get("generateName"):
            assert any_run.writers(claim, "f:spec") == {writers["claim"]}, name
    for name, pod in any_run.pods.items():
        if pod["spec"].get("resourceClaims", [{}])[0].get("resourceClaimTemplateName"):
            got = any_run.writers(pod, "f:status", "f:resourceClaimStatuses")
            assert got == {writers["claim statuses"]}, f"pod {name}: {got}"
    # The device taint (NoExecute) is tolerated through the result's copy of the request's
    # tolerations, which is all the eviction controller (kcm's or dralloc's) reads.
    still = any_run.testbed.get("pod", "tolerating", "-n", any_run.run.namespace)
    assert still is not None, f"{system}: the tolerating pod was evicted"
    assert still["metadata"]["uid"] == any_run.pods["tolerating"]["metadata"]["uid"]
    kinds = {c["type"] for c in still.get("status", {}).get("conditions") or []}
    assert "DisruptionTarget" not in kinds, f"{system}: the tolerating pod is being evicted"
    if system == IN_TREE:
        return
    # dralloc gated its pods and released them pinned to the node kube-scheduler bound them to.
    for name, pod in any_run.pods.items():
        assert "resource.dralloc.dev/allocated-by" in pod["metadata"].get("annotations", {}), name
        terms = (
            (pod["spec"].get("affinity") or {}).get("nodeAffinity", {})
            .get("requiredDuringSchedulingIgnoredDuringExecution", {})
            .get("nodeSelectorTerms")
        ) or [{}]  # fmt: skip
        pins = {
            value
            for term in terms
            for field in term.get("matchFields") or []
            if field.get("key") == "metadata.name"
            for value in field.get("values") or []
        }
        assert pins == {pod["spec"]["nodeName"]}, f"pod {name}: pinned to {pins}"


def test_claims_and_pods_have_the_same_shape(in_tree: Observed, dralloc: Observed) -> None:
    expected = without_intended(shape(in_tree), IN_TREE)
    got = without_intended(shape(dralloc), dralloc.run.system)
    found = differences(expected, got)
    assert not found, f"in-tree DRA != {dralloc.run.system}:\n" + "\n".join(found)
    # The workload exercised what it is meant to (a shape both systems got wrong alike
    # would pass the comparison).
    claims = expected["claims"]
    result = claims["tolerating/dev"]["allocation"]["devices"]["results"][0]
    assert result["device"] == "<a tainted device>"
    assert result["tolerations"] == [
        {"key": TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}
    ]
    assert claims["fallback/dev"]["allocation"]["devices"]["results"][0]["request"] == "dev/plain"
    assert claims["admin/dev"]["allocation"]["devices"]["results"][0]["adminAccess"] is True
    assert [r["name"] for r in claims["shared"]["reservedFor"]] == ["shared-a", "shared-b"]
    assert claims["plain-0/dev"]["finalizers"] == [FINALIZER]
    assert claims["plain-0/dev"]["annotations"][POD_CLAIM_NAME] == "dev"
    assert claims["plain-0/dev"]["labels"] == {"from-template": "plain"}
    assert expected["pods"]["plain-0"]["resourceClaimStatuses"] == [
        {"name": "dev", "resourceClaimName": "plain-0-dev-*"}
    ]


def test_the_comparison_notices_a_missing_toleration_copy(
    in_tree: Observed, beside: Observed
) -> None:
    """The comparison can fail: a dralloc that forgot to copy the request's tolerations into
    the result (kcm's eviction controller reads only the result) is told apart."""
    broken = dataclasses.replace(beside, claims=copy.deepcopy(beside.claims))
    (claim,) = [c for c in broken.claims if claim_key(c) == "tolerating/dev"]
    for result in claim["status"]["allocation"]["devices"]["results"]:
        result.pop("tolerations", None)
    found = differences(
        without_intended(shape(in_tree), IN_TREE), without_intended(shape(broken), BESIDE)
    )
    assert found and all(
        "/claims/tolerating/dev/allocation/devices/results[0]/tolerations" in d for d in found
    ), found


def test_every_claim_passes_validation_again(any_run: Observed) -> None:
    for claim in any_run.claims:
        dry_run_status(any_run.testbed, claim)
        fresh = dry_run_fresh_allocation(any_run.testbed, claim)
        assert fresh.returncode == 0, (
            f"{any_run.run.system}: the allocation of {claim['metadata']['name']} is refused "
            f"when written afresh: {fresh.stderr.strip()}"
        )


def test_the_fresh_dry_run_refuses_an_invalid_allocation(in_tree: Observed) -> None:
    """The validation check can fail: a result naming a request the claim does not have."""
    claim = copy.deepcopy(in_tree.claims[0])
    claim["status"]["allocation"]["devices"]["results"][0]["request"] = "no-such-request"
    refused = dry_run_fresh_allocation(in_tree.testbed, claim)
    assert refused.returncode != 0
    assert "no-such-request" in refused.stderr, refused.stderr


def claim_status_patches(testbed: Testbed) -> float:
    """The API server's count of PATCH requests to ResourceClaim status, of all clients."""
    total = 0.0
    for line in testbed.kubectl("get", "--raw", "/metrics").stdout.splitlines():
        if line.startswith("apiserver_request_total{") and all(
            part in line
            for part in ('resource="resourceclaims"', 'subresource="status"', 'verb="PATCH"')
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_waiting_claim_costs_no_status_writes(dralloc: Observed) -> None:
    """A pod dralloc cannot place is explained on the pod (condition, Events); its in-tree
    claim has no ``status.conditions`` to carry the reason, so nothing is written to it, at
    the first explanation or a later one (a node added to the pool changes what the next one
    says, so it is seen to happen).

    (dralloc wrote its ``Allocated`` condition there at every explanation, every 10 s per
    waiting claim: requests the API server answered "no change", warning about an unknown
    field.)"""
    run, testbed = dralloc.run, dralloc.testbed
    testbed.apply(
        claim_template(
            run, "huge", {"requests": [{"name": "dev", "exactly": exactly(run, "huge")}]}
        ),
        workload_pod(run, "waiting", [from_template("dev", "huge")]),
    )

    def explanation() -> str:
        pod = testbed.get("pod", "waiting", "-n", run.namespace) or {}
        for c in (pod.get("status") or {}).get("conditions") or []:
            if c["type"] == "resource.dralloc.dev/DevicesAllocated" and c["status"] == "False":
                return str(c.get("message") or "")
        return ""

    added: list[str] = []
    try:
        first = wait_for("the waiting pod explained", explanation, timeout=30)
        before = claim_status_patches(testbed)
        added = testbed.create_nodes(1, {"e2e-pool": run.label}, prefix=f"{run.label}-more")
        again = wait_for(
            "the waiting pod explained again (one more node judged)",
            lambda: (found := explanation()) != first and found,
            timeout=3 * EXPLAIN_PERIOD_S,
        )
        print(f"\n[differential] explained: {first!r}, then {again!r}")
        assert claim_status_patches(testbed) == before
    finally:
        testbed.kubectl("delete", "pod", "waiting", "-n", run.namespace, "--wait=false")
        for node in added:
            testbed.kubectl("delete", "node", node, "--wait=false", check=False)


def settle_after_pods_end(observed: Observed, pods: tuple[str, ...]) -> dict[str, JsonObject]:
    """Delete ``pods`` and wait until their claims are released (generated ones deleted,
    reservations trimmed, a claim nobody uses deallocated); the claims left, by key."""
    testbed, namespace = observed.testbed, observed.run.namespace
    testbed.kubectl("delete", "pods", *pods, "-n", namespace, "--wait=false")
    ended = set(pods)
    remaining = [p for p in POD_NAMES if p not in ended]

    def released() -> dict[str, JsonObject] | None:
        claims = {claim_key(c): c for c in items(testbed, "resourceclaims", "-n", namespace)}
        if any(key.split("/")[0] in ended for key in claims):
            return None  # a generated claim of an ended pod is still there
        for claim in claims.values():
            status = claim.get("status") or {}
            users = {r["name"] for r in status.get("reservedFor") or []}
            if users - set(remaining):
                return None
            if not users and (status.get("allocation") or claim["metadata"].get("finalizers")):
                return None
        return claims

    found: dict[str, JsonObject] = wait_for(
        f"{observed.run.system}: claims released after {', '.join(pods)} ended",
        released,
        timeout=90,
    )
    return found


@pytest.fixture(scope="module")
def released() -> dict[str, JsonObject]:
    """Per system, what :func:`test_claims_are_released_alike_when_their_pods_end` found
    (the in-tree run's pods end once, for both dralloc systems)."""
    return {}


def test_claims_are_released_alike_when_their_pods_end(
    in_tree: Observed, dralloc: Observed, released: dict[str, JsonObject]
) -> None:
    """Run last (it deletes pods): what kcm's claim controller does when pods end, dralloc's
    (where it replaces kcm's) does the same: generated claims go, reservations are trimmed,
    a shared claim is deallocated and let go (finalizer removed) with its last user."""
    shapes = released
    for seen in (in_tree, dralloc):
        if seen.run.system in shapes:
            continue
        first = settle_after_pods_end(seen, ("plain-0", "shared-a", "tolerating"))
        assert first["shared"]["status"]["reservedFor"][0]["name"] == "shared-b"
        assert first["shared"]["status"].get("allocation"), "deallocated while still in use"
        last = settle_after_pods_end(seen, ("shared-b",))
        shared = last["shared"]
        shapes[seen.run.system] = {
            "claims left": sorted(last),
            "shared status": shared.get("status") or {},
            "shared finalizers": shared["metadata"].get("finalizers") or [],
        }
    expected, got = shapes[IN_TREE], shapes[dralloc.run.system]
    assert expected["shared status"] == {} and expected["shared finalizers"] == []
    assert got == expected
