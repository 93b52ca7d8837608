"""``dralloc explain|simulate|check --live`` against the real control plane.

The other e2e suites read the cluster with kubectl and feed the toolkit files, so the toolkit's
own live read (its HTTP client, kubeconfig handling, group discovery, paging) was never run
against an API server. Here the CLI runs as a user runs it: a subprocess with a kubeconfig.

No operator runs: the objects an operator would act on are created directly (a pool of kwok
nodes with ResourceSlices of a test-only driver, a DeviceClass, claim templates, gated pods),
and the violation for ``check`` is written into claim statuses with kubectl, as a buggy
allocator would. The last tests read in-tree objects on the DRA testbed: pods that ask with
``spec.resourceClaims``, bound by kube-scheduler, gated for dralloc, or pending.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from operators.api.annotations import FINALIZER

from .kube_helpers import REPO_ROOT, Testbed, unique_name, wait_for
from .operator_fixtures import (
    CLAIMS_ANNOTATION,
    GATE,
    GROUP,
    Pool,
    claim,
    install_crds,
    make_pool,
    slice_manifest,
    template,
)
from .reliability_helpers import cluster_check

NODES = 2
DEVICES_PER_NODE = 2
CLI_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def pool(testbed: Testbed) -> Iterator[Pool]:
    install_crds(testbed)
    made = make_pool(testbed, NODES, DEVICES_PER_NODE, prefix="live")
    try:
        yield made
    finally:
        slices = [slice_manifest(made.driver, n, 0)["metadata"]["name"] for n in made.nodes]
        testbed.kubectl(
            "delete", f"resourceslices.{GROUP}", *slices, "--ignore-not-found", check=False
        )
        testbed.kubectl(
            "delete", f"deviceclasses.{GROUP}", made.device_class, "--ignore-not-found", check=False
        )
        testbed.kubectl("delete", "nodes", *made.nodes, "--ignore-not-found", check=False)


def dralloc(testbed: Testbed, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it; the kubeconfig comes from $KUBECONFIG (testbed.env())."""
    return subprocess.run(
        [sys.executable, "-m", "operators.cli", *args],
        cwd=REPO_ROOT,
        env=testbed.env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=CLI_TIMEOUT_S,
    )


def parsed(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(result.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(
            f"not JSON (exit {result.returncode}): {result.stdout!r} {result.stderr!r}"
        ) from exc
    return data


def gated_pod(namespace: str, name: str, pool: Pool, template_name: str) -> dict[str, Any]:
    """A pod as the webhook leaves it: claims annotation, allocation gate, pool nodes only."""
    entries = [{"name": "dev", "resourceClaimTemplateName": template_name}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {CLAIMS_ANNOTATION: json.dumps(entries)},
        },
        "spec": {
            "schedulingGates": [{"name": GATE}],
            "nodeSelector": pool.node_selector,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        },
    }


def test_explain_live_gives_the_reason_on_every_node(
    testbed: Testbed, pool: Pool, namespace: str
) -> None:
    wanted = DEVICES_PER_NODE + 1  # more than any node has
    testbed.apply(
        template(namespace, "too-many", pool, allocationMode="ExactCount", count=wanted),
        gated_pod(namespace, "stuck", pool, "too-many"),
    )

    result = dralloc(testbed, "explain", "pod/stuck", "-n", namespace, "--live", "-o", "json")

    assert result.returncode == 0, result.stderr
    explanation = parsed(result)
    assert explanation["subject"] == f"pod/{namespace}/stuck"
    assert explanation["status"] == "pending"
    assert explanation["node"] is None
    verdicts = {v["node"]: v for v in explanation["nodes"]}
    for node in pool.nodes:
        assert node in verdicts, f"no verdict for pool node {node}: {sorted(verdicts)}"
        verdict = verdicts[node]
        assert not verdict["fits"]
        reasons = " ".join(verdict["reasons"])
        assert f"need {wanted}" in reasons, f"{node}: {reasons}"
        assert pool.device_class in reasons, f"{node}: the class is not named: {reasons}"
    others = [v for name, v in verdicts.items() if name not in pool.nodes]
    assert all(not v["fits"] for v in others), "the pod's node selector was ignored"

    table = dralloc(testbed, "explain", f"pod/{namespace}/stuck", "--live")
    assert table.returncode == 0, table.stderr
    assert f"pod/{namespace}/stuck: pending" in table.stdout
    for node in pool.nodes:
        line = next(line for line in table.stdout.splitlines() if line.startswith(node))
        assert line.split()[1] == "no", line


def test_simulate_live_places_what_fits_and_fails_when_it_does_not(
    testbed: Testbed, pool: Pool, namespace: str
) -> None:
    capacity = NODES * DEVICES_PER_NODE
    testbed.apply(template(namespace, "one", pool))
    # A pod of the cluster that can never be placed does not make the scenario fail.
    testbed.apply(
        template(namespace, "too-many", pool, allocationMode="ExactCount", count=capacity),
        gated_pod(namespace, "stuck", pool, "too-many"),
    )

    fits = dralloc(
        testbed, "simulate", "--live", "-n", namespace,
        "--add-pods", str(capacity), "--template", "one", "-o", "json", "--progress", "never",
    )  # fmt: skip

    assert fits.returncode == 0, fits.stdout + fits.stderr
    report = parsed(fits)
    assert report["fits"] is True
    added = [p for p in report["placed"] if p["origin"] == "added"]
    assert len(added) == capacity
    assert sorted(p["node"] for p in added) == sorted(pool.nodes * DEVICES_PER_NODE)
    devices = [d["device"] for p in added for d in p["devices"]]
    assert len(devices) == len(set(devices)) == capacity, "a device was handed out twice"
    assert all(d.startswith(f"{pool.driver}/") for d in devices)
    mine = [p["pod"] for p in report["pending"] if p["pod"].startswith(f"{namespace}/")]
    assert mine == [f"{namespace}/stuck"]

    too_many = dralloc(
        testbed, "simulate", "--live", "-n", namespace,
        "--add-pods", str(capacity + 1), "--template", "one", "--progress", "never",
    )  # fmt: skip

    assert too_many.returncode == 1, too_many.stdout + too_many.stderr
    assert "DOES NOT FIT" in too_many.stdout
    placed, _, pending = too_many.stdout.partition("\nPENDING\n")
    last = f"{namespace}/one-sim-{capacity}"
    assert last in pending and last not in placed, too_many.stdout
    assert f"{namespace}/one-sim-0" in placed


def _allocate(testbed: Testbed, namespace: str, name: str, pool: Pool, device: str) -> None:
    """Write status.allocation as an allocator would (the status subresource)."""
    node = pool.nodes[0]
    allocation = {
        "devices": {
            "results": [{"request": "dev", "driver": pool.driver, "pool": node, "device": device}]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }
    testbed.kubectl(
        "patch", f"resourceclaims.{GROUP}", name, "-n", namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": {"allocation": allocation}}),
    )  # fmt: skip


def test_check_live_is_clean_then_reports_a_device_allocated_twice(
    testbed: Testbed, pool: Pool, namespace: str
) -> None:
    # The testbed is shared with other suites: what the independent kubectl-based checker
    # finds is what `check --live` must report (on a fresh testbed that is nothing).
    baseline = cluster_check(testbed)
    clean = dralloc(testbed, "check", "--live", "-o", "json")
    report = parsed(clean)
    assert report["ok"] is baseline.ok
    assert clean.returncode == (0 if baseline.ok else 1), clean.stdout + clean.stderr
    expected = sorted(f"{v.rule}: {v.subject}" for v in baseline.violations)
    assert sorted(f"{v['rule']}: {v['subject']}" for v in report["violations"]) == expected

    names = ("first", "second")
    for name in names:
        body = claim(namespace, name, pool)
        body["metadata"]["finalizers"] = [FINALIZER]  # as the allocator keeps them
        testbed.apply(body)
    try:
        for name in names:
            _allocate(testbed, namespace, name, pool, "dev-0")

        broken = dralloc(testbed, "check", "--live", "-o", "json")

        assert broken.returncode == 1, broken.stdout + broken.stderr
        found = parsed(broken)
        assert found["ok"] is False
        twice = [v for v in found["violations"] if v["rule"] == "device-allocated-twice"]
        mine = [v for v in twice if f"{pool.driver}/{pool.nodes[0]}/dev-0" in v["subject"]]
        assert len(mine) == 1, twice
        for name in names:
            assert f"{namespace}/{name}" in mine[0]["message"]

        table = dralloc(testbed, "check", "--live", "--rule", "device-allocated-twice")
        assert table.returncode == 1
        assert "device-allocated-twice" in table.stdout

        # Deallocate the second claim (an allocation can only be cleared, not changed): the
        # violation goes, and so does exit 1.
        testbed.kubectl(
            "patch", f"resourceclaims.{GROUP}", "second", "-n", namespace,
            "--subresource=status", "--type=merge", "-p", '{"status":{"allocation":null}}',
        )  # fmt: skip
        fixed = dralloc(testbed, "check", "--live", "-o", "json")
        assert not any(pool.driver in v["subject"] for v in parsed(fixed)["violations"]), (
            fixed.stdout
        )
        assert fixed.returncode == (0 if baseline.ok else 1), fixed.stdout + fixed.stderr
    finally:
        for name in names:
            testbed.kubectl(
                "patch", f"resourceclaims.{GROUP}", name, "-n", namespace, "--type=merge",
                "-p", '{"metadata":{"finalizers":null}}', check=False,
            )  # fmt: skip


def test_the_api_group_decides_which_objects_are_read(
    testbed: Testbed, pool: Pool, namespace: str
) -> None:
    """dralloc's CRDs are read by default; ``--api-group resource.k8s.io`` reads in-tree DRA."""
    served = testbed.kubectl("api-versions").stdout.split()
    if "resource.k8s.io/v1" not in served:
        pytest.skip("this testbed does not serve in-tree resource.k8s.io/v1")
    in_tree = "resource.k8s.io/v1"
    driver = f"in-tree-{pool.driver}"
    node = pool.nodes[0]
    class_name = f"{pool.device_class}-in-tree"
    slice_name = f"{node}-in-tree"
    body = template(namespace, "in-tree-one", pool)
    body["apiVersion"] = in_tree
    body["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = class_name
    in_tree_slice = slice_manifest(driver, node, 1)
    in_tree_slice["apiVersion"] = in_tree
    in_tree_slice["metadata"]["name"] = slice_name
    testbed.apply(
        {
            "apiVersion": in_tree,
            "kind": "DeviceClass",
            "metadata": {"name": class_name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        },
        in_tree_slice,
        body,
    )
    try:
        args = ("simulate", "--live", "-n", namespace, "--add-pods", "1", "--template",
                "in-tree-one", "--progress", "never", "-o", "json")  # fmt: skip
        read = dralloc(testbed, *args, "--api-group", "resource.k8s.io")
        assert read.returncode == 0, read.stdout + read.stderr
        (added,) = [p for p in parsed(read)["placed"] if p["origin"] == "added"]
        assert added["node"] == node
        assert [d["device"] for d in added["devices"]] == [f"{driver}/{node}/dev-0"]

        default = dralloc(testbed, *args)
        assert default.returncode == 2, default.stdout + default.stderr
        assert f"ResourceClaimTemplate {namespace}/in-tree-one is not in the snapshot" in (
            default.stderr
        )
    finally:
        testbed.kubectl(
            "delete", "resourceslices.resource.k8s.io", slice_name, "--ignore-not-found",
            check=False,
        )  # fmt: skip
        testbed.kubectl(
            "delete", "deviceclasses.resource.k8s.io", class_name, "--ignore-not-found",
            check=False,
        )  # fmt: skip


# --- in-tree objects: pods with spec.resourceClaims, read from the DRA testbed ----------------

IN_TREE = "resource.k8s.io/v1"


@pytest.fixture
def in_tree_cluster(dra_testbed: Testbed) -> Iterator[dict[str, str]]:
    """Two kwok nodes with one in-tree device each, and three pods asking with
    spec.resourceClaims: ``bound`` (kube-scheduler allocated its claim and bound it),
    ``gated`` (behind dralloc's gate, as the webhook leaves it in in-tree mode: kcm created its
    claim, nobody allocates it) and ``stuck`` (ungated, kube-scheduler finds no free device).
    No operator runs."""
    testbed = dra_testbed
    label = unique_name("live-in-tree")
    nodes = testbed.create_nodes(2, {"e2e-pool": label}, prefix=label)
    driver = f"{label}.example.com"
    namespace = label
    testbed.kubectl("create", "namespace", namespace)

    def slice_of(node: str) -> dict[str, Any]:
        body = slice_manifest(driver, node, 1)
        body["apiVersion"] = IN_TREE
        return body

    def in_tree_pod(name: str, *, gated: bool) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "nodeSelector": {"e2e-pool": label},
            "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": "one"}],
            "containers": [
                {
                    "name": "c",
                    "image": "registry.invalid/x",
                    "resources": {"claims": [{"name": "dev"}]},
                }
            ],
        }
        if gated:
            spec["schedulingGates"] = [{"name": GATE}]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }

    testbed.apply(
        {
            "apiVersion": IN_TREE,
            "kind": "DeviceClass",
            "metadata": {"name": label},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        },
        *[slice_of(node) for node in nodes],
        {
            "apiVersion": IN_TREE,
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one", "namespace": namespace},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [{"name": "dev", "exactly": {"deviceClassName": label}}]
                    }
                }
            },
        },
    )
    names = {"namespace": namespace, "driver": driver, "class": label}
    try:
        testbed.apply(in_tree_pod("bound", gated=False))
        names["bound node"] = wait_for(
            "kube-scheduler to bind the first pod",
            lambda: ((testbed.get("pod", "bound", "-n", namespace) or {}).get("spec") or {}).get(
                "nodeName"
            ),
            timeout=60,
        )
        (names["free node"],) = [n for n in nodes if n != names["bound node"]]
        testbed.apply(in_tree_pod("gated", gated=True))

        def claim_of(pod: str) -> str | None:
            found = testbed.get("pod", pod, "-n", namespace) or {}
            statuses = (found.get("status") or {}).get("resourceClaimStatuses") or []
            return next((s.get("resourceClaimName") for s in statuses), None)

        for pod in ("bound", "gated"):
            names[f"{pod} claim"] = wait_for(
                f"kcm to create the claim of {pod}", functools.partial(claim_of, pod), timeout=60
            )
        # The free device must stay free for the gated pod's explanation: "stuck" asks for
        # two devices of one node, which no node has.
        testbed.apply(
            {
                "apiVersion": IN_TREE,
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "two", "namespace": namespace},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [
                                {
                                    "name": "dev",
                                    "exactly": {
                                        "deviceClassName": label,
                                        "allocationMode": "ExactCount",
                                        "count": 2,
                                    },
                                }
                            ]
                        }
                    }
                },
            }
        )
        stuck = in_tree_pod("stuck", gated=False)
        stuck["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "two"
        testbed.apply(stuck)
        names["stuck claim"] = wait_for(
            "kcm to create the claim of stuck", lambda: claim_of("stuck"), timeout=60
        )
        yield names
    finally:
        testbed.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        testbed.kubectl(
            "delete", "resourceslices.resource.k8s.io",
            *[slice_of(n)["metadata"]["name"] for n in nodes], "--ignore-not-found", check=False,
        )  # fmt: skip
        testbed.kubectl(
            "delete", "deviceclasses.resource.k8s.io", label, "--ignore-not-found", check=False
        )
        testbed.kubectl("delete", "nodes", *nodes, "--ignore-not-found", check=False)


def dralloc_crds_served(testbed: Testbed) -> bool:
    return f"{GROUP}/v1" in testbed.kubectl("api-versions").stdout.split()


def test_explain_live_reads_in_tree_pods_and_claims(
    dra_testbed: Testbed, in_tree_cluster: dict[str, str]
) -> None:
    names = in_tree_cluster
    ns = names["namespace"]
    in_tree = ("--live", "--api-group", "resource.k8s.io", "-o", "json")

    gated = parsed(dralloc(dra_testbed, "explain", f"pod/{ns}/gated", *in_tree))
    assert gated["status"] == "pending", gated
    assert gated["claims"] == [f"{ns}/{names['gated claim']}"]
    verdicts = {v["node"]: v for v in gated["nodes"]}
    assert verdicts[names["free node"]]["fits"], verdicts
    taken = verdicts[names["bound node"]]
    assert not taken["fits"] and "no free device" in " ".join(taken["reasons"]), taken

    stuck = parsed(dralloc(dra_testbed, "explain", f"pod/{ns}/stuck", *in_tree))
    assert stuck["status"] == "pending"
    for node in (names["free node"], names["bound node"]):
        reasons = " ".join({v["node"]: v for v in stuck["nodes"]}[node]["reasons"])
        assert "need 2" in reasons, reasons

    bound = parsed(dralloc(dra_testbed, "explain", f"pod/{ns}/bound", *in_tree))
    assert bound["status"] == "allocated" and bound["node"] == names["bound node"], bound
    device = f"{names['driver']}/{names['bound node']}/dev-0"
    assert [d["device"] for d in bound["devices"]] == [device], bound["devices"]

    claim = parsed(
        dralloc(dra_testbed, "explain", f"resourceclaim/{ns}/{names['stuck claim']}", *in_tree)
    )
    assert claim["status"] == "pending" and "need 2" in claim["summary"], claim

    # Without --api-group the toolkit reads dralloc's CRDs when they are installed (another
    # suite may have installed them on this testbed), else the in-tree kinds.
    detected = dralloc(dra_testbed, "explain", f"pod/{ns}/gated", "--live", "-o", "json")
    if dralloc_crds_served(dra_testbed):
        assert detected.returncode == 2 and "not in the snapshot" in detected.stderr, detected
    else:
        assert parsed(detected) == gated


def test_simulate_live_settles_in_tree_pending_pods_first(
    dra_testbed: Testbed, in_tree_cluster: dict[str, str]
) -> None:
    names = in_tree_cluster
    ns = names["namespace"]
    result = dralloc(
        dra_testbed, "simulate", "--live", "--api-group", "resource.k8s.io", "-n", ns,
        "--add-pods", "1", "--template", "one", "-o", "json", "--progress", "never",
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr  # the added pod finds no room
    report = parsed(result)
    placed = {p["pod"]: p for p in report["placed"]}
    assert placed[f"{ns}/gated"]["node"] == names["free node"], report
    assert f"{ns}/bound" not in placed, "a bound pod was placed again"
    pending = {p["pod"]: p for p in report["pending"] if p["pod"].startswith(f"{ns}/")}
    assert set(pending) == {f"{ns}/stuck", f"{ns}/one-sim-0"}, report["pending"]


def test_check_live_reads_in_tree_claims_and_reports_a_device_allocated_twice(
    dra_testbed: Testbed, in_tree_cluster: dict[str, str]
) -> None:
    names = in_tree_cluster
    ns = names["namespace"]
    args = ("check", "--live", "--api-group", "resource.k8s.io", "-o", "json")
    clean = parsed(dralloc(dra_testbed, *args))
    # kube-scheduler's claims hold the in-tree finalizer and a reservation for a live pod.
    assert not [v for v in clean["violations"] if ns in v["subject"] or ns in v["message"]], clean
    assert clean["checked"]["allocated-without-finalizer"] >= 1

    node = names["bound node"]
    forged = {
        "apiVersion": IN_TREE,
        "kind": "ResourceClaim",
        "metadata": {"name": "forged", "namespace": ns},
        "spec": {
            "devices": {
                "requests": [{"name": "dev", "exactly": {"deviceClassName": names["class"]}}]
            }
        },
    }
    dra_testbed.apply(forged)
    allocation = {
        "devices": {
            "results": [
                {"request": "dev", "driver": names["driver"], "pool": node, "device": "dev-0"}
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }
    dra_testbed.kubectl(
        "patch", "resourceclaims.resource.k8s.io", "forged", "-n", ns, "--subresource=status",
        "--type=merge", "-p", json.dumps({"status": {"allocation": allocation}}),
    )  # fmt: skip

    broken = dralloc(dra_testbed, *args)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    found = parsed(broken)["violations"]
    twice = [
        v
        for v in found
        if v["rule"] == "device-allocated-twice"
        and f"{names['driver']}/{node}/dev-0" in v["subject"]
    ]
    assert len(twice) == 1, found
    assert (
        f"{ns}/forged" in twice[0]["message"]
        and f"{ns}/{names['bound claim']}" in twice[0]["message"]
    )
    # The forged claim has no finalizer: the in-tree rule asks for resource.kubernetes.io's.
    unprotected = [
        v
        for v in found
        if v["rule"] == "allocated-without-finalizer" and f"{ns}/forged" in v["subject"]
    ]
    assert (
        unprotected and "resource.kubernetes.io/delete-protection" in unprotected[0]["message"]
    ), found


def test_kubectl_runs_the_plugin_with_kubectls_flags(
    testbed: Testbed, pool: Pool, namespace: str, tmp_path: Any
) -> None:
    """`kubectl dralloc ...`: kubectl finds kubectl-dralloc on PATH; the plugin reads the live
    cluster and takes the namespace from the kubeconfig's context, as kubectl does."""
    testbed.apply(
        template(namespace, "too-many", pool, allocationMode="ExactCount",
                 count=DEVICES_PER_NODE + 1),
        gated_pod(namespace, "stuck", pool, "too-many"),
    )  # fmt: skip
    config = json.loads(testbed.kubeconfig.read_text())
    config["contexts"][0]["context"]["namespace"] = namespace
    config["contexts"].append({"name": "elsewhere", "context": {**config["contexts"][0]["context"],
                                                                "namespace": "default"}})  # fmt: skip
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(config))
    env = {
        **testbed.env(),
        "KUBECONFIG": str(kubeconfig),
        # The virtualenv's bin holds kubectl-dralloc (a console script of the package).
        "PATH": f"{Path(sys.executable).parent}:{testbed.env()['PATH']}",
    }

    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(testbed.bin / "kubectl"), *args], env=env, capture_output=True, text=True,
            check=False, timeout=CLI_TIMEOUT_S,
        )  # fmt: skip

    listed = kubectl("plugin", "list")
    assert "kubectl-dralloc" in listed.stdout, listed.stdout + listed.stderr
    result = kubectl("dralloc", "explain", "pod/stuck", "-o", "json")
    assert result.returncode == 0, result.stderr
    assert parsed(result)["subject"] == f"pod/{namespace}/stuck"
    # Another context, whose namespace lacks the pod: the plugin follows --context.
    missing = kubectl("dralloc", "explain", "pod/stuck", "--context=elsewhere")
    assert missing.returncode == 2 and "default" in missing.stderr, missing.stderr
    checked = kubectl("dralloc", "check", "-A", "-o", "json")
    assert checked.returncode in (0, 1), checked.stderr
    assert parsed(checked)["ok"] is (checked.returncode == 0)
