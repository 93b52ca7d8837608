"""Shared pieces of the operator e2e tests: CRDs, the operator as a subprocess, and a small
isolated "cluster slice" per test (own kwok nodes, own driver, own DeviceClass), so tests on
one control plane never compete for each other's devices.

The operator runs as a subprocess (``python -m operators``) because some tests must SIGKILL
it or run two replicas; every test module starts its own, with a unique Lease name.

Everything here works in the API mode of the testbed it is given (``testbed.api_mode``,
modes.py): the kinds' apiVersion, how a pod asks for its claims, the operator's arguments.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .kube_helpers import REPO_ROOT, Testbed, unique_name, wait_for
from .modes import CLAIMS_ANNOTATION as CLAIMS_ANNOTATION  # re-exported for older modules
from .modes import CRD, DRALLOC_GROUP, ApiMode

CRDS_DIR = REPO_ROOT / "crds"
GROUP = DRALLOC_GROUP
"""dralloc's group: its CRDs in crd mode (``testbed.api_mode.group`` is the group of the DRA
kinds in the test's mode), and the names of its pod protocol in both modes."""
DEVICES_ANNOTATION = f"{GROUP}/devices"
GATE = f"{GROUP}/allocation"


def install_crds(testbed: Testbed) -> None:
    """Make the testbed ready for the API mode's operator: in crd mode apply crds/ (or the
    directory in $DRALLOC_E2E_CRDS, for debugging a CRD change; in-tree mode only DeviceQuota's,
    the API server serves the rest as resource.k8s.io), and create the namespace of the
    operators' Lease."""
    override = os.environ.get("DRALLOC_E2E_CRDS")
    files = sorted(Path(override).glob("*.yaml") if override else CRDS_DIR.glob("*.yaml"))
    crd_files = [f for f in files if f.name != "kustomization.yaml"]
    if not testbed.api_mode.crds:
        # DeviceQuota is dralloc's own kind in both modes (the in-tree overlay installs it).
        crd_files = [f for f in crd_files if f.name.endswith("_devicequotas.yaml")]
    if not crd_files:
        pytest.skip("crds/ has no CustomResourceDefinitions yet (make crds)")
    for path in crd_files:
        testbed.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    testbed.wait_established(*[f"crd/{p.stem.split('_', 1)[1]}.{GROUP}" for p in crd_files])
    ensure_lease_namespace(testbed)  # every module installs the CRDs before its operators


def served(testbed: Testbed, plural: str, version: str | None = None) -> bool:
    """Whether the testbed's API server serves the DRA kind ``plural`` in the mode's group at
    ``version`` (default: the mode's version), by the API server's discovery."""
    mode = testbed.api_mode
    found = testbed.kubectl(
        "get", "--raw", f"/apis/{mode.group}/{version or mode.version}", check=False
    )
    if found.returncode != 0:
        return False
    resources = json.loads(found.stdout).get("resources") or []
    return plural in [r.get("name") for r in resources]


def served_version(testbed: Testbed, plural: str, versions: Sequence[str]) -> str:
    """The first of ``versions`` at which the testbed serves ``plural``, as an apiVersion;
    skips the test, naming the mode, when it serves none of them."""
    mode = testbed.api_mode
    for version in versions:
        if served(testbed, plural, version):
            return f"{mode.group}/{version}"
    pytest.skip(
        f"{mode.name} mode: this testbed's API server does not serve {plural} in {mode.group} "
        f"at {', '.join(versions)}"
    )


LEASE_NAMESPACE = "dralloc-system"
"""Where every operator keeps its Lease unless told otherwise (settings.lease_namespace)."""


def ensure_lease_namespace(testbed: Testbed) -> None:
    """The operator's namespace, as manifests/base creates it (the Lease lives there)."""
    result = testbed.kubectl("create", "namespace", LEASE_NAMESPACE, check=False)
    assert result.returncode == 0 or "AlreadyExists" in result.stderr, result.stderr


@dataclass
class OperatorProcess:
    """``python -m operators`` against the testbed; logs go to a file for failure reports.

    ``lease`` is the Lease name (each test module its own, so modules never share a leader);
    empty means the operator's default. The Lease lives in the operator's default namespace
    unless ``extra`` says otherwise; ``env`` adds to the process environment.
    """

    testbed: Testbed
    log_path: Path
    lease: str
    webhook: bool = True
    extra: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # on top of the testbed's environment
    identity: str = ""
    kubeconfig: Path | None = None
    """Its credentials; default the testbed's operator user."""
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        args = [
            sys.executable, "-m", "operators",
            f"--kubeconfig={self.kubeconfig or self.testbed.operator_kubeconfig}",
            "--metrics-port=0", "--probe-port=0",
            "--lease-duration=8", "--renew-deadline=6", "--retry-period=1",
            "--requeue-max-delay=2",
            "--log-format=console", "--log-level=INFO",
        ]  # fmt: skip
        if self.lease:
            args.append(f"--lease-name={self.lease}")
        if self.identity:
            args.append(f"--identity={self.identity}")
        args += self.testbed.api_mode.operator_args
        if self.webhook:
            args += [
                "--webhook-addr=127.0.0.1",
                "--webhook-port=0",
                f"--webhook-managed={self.lease or 'dralloc-operator'}.dralloc.test",
            ]
        else:
            args.append("--no-webhook")
        args += self.extra
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            args,
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**self.testbed.env(), **self.env},
        )
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_until(self, text: str, timeout: float = 60.0, after: int = 0) -> None:
        def seen() -> bool:
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"operator exited early:\n{self.log()[-3000:]}")
            return text in self.log()[after:]

        wait_for(f"operator log line {text!r}", seen, timeout=timeout, interval=0.2)

    def wait_ready(self) -> None:
        self.wait_until("controllers starting")
        if self.webhook:
            self.wait_until("Reconfiguring the mutating webhook")
            self.wait_until("Reconfiguring the validating webhook")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def operator(
    testbed: Testbed, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    yield from running_operator(testbed, tmp_path_factory)


def running_operator(
    testbed: Testbed,
    tmp_path_factory: pytest.TempPathFactory,
    env: Mapping[str, str] | None = None,
) -> Iterator[OperatorProcess]:
    """The body of the ``operator`` fixture, for modules that need the operator started with
    settings of their own in its environment (``DRALLOC_<NAME>``): such a module defines its
    own module-scoped ``operator`` fixture that yields from this."""
    install_crds(testbed)
    lease = unique_name("dralloc-e2e")
    proc = OperatorProcess(
        testbed,
        tmp_path_factory.mktemp("operator") / "operator.log",
        lease,
        env=dict(env or {}),
    )
    proc.start()
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()
        if os.environ.get("DRALLOC_E2E_SHOW_LOGS"):
            print(proc.log())


@dataclass
class Pool:
    """Nodes labelled for one test, each with ``devices`` devices of one test-only driver."""

    testbed: Testbed
    driver: str
    device_class: str
    label: str
    nodes: list[str]
    roles: dict[str, str] = field(default_factory=dict)  # make_sized_pool: role -> node name

    @property
    def node_selector(self) -> dict[str, str]:
        return {"e2e-pool": self.label}

    @property
    def mode(self) -> ApiMode:
        return self.testbed.api_mode

    def node(self, role: str) -> str:
        """The node made for ``role`` by make_sized_pool."""
        return self.roles[role]


@dataclass(frozen=True)
class NodeShape:
    """One node of a make_sized_pool: its role in the test, devices and size (capacity =
    allocatable). The defaults are a realistic worker, not the testbed's huge default."""

    role: str
    devices: int
    cpu: str = "8"
    memory: str = "32Gi"
    pods: int = 110


def make_pool(
    testbed: Testbed, nodes: int, devices: int, *, prefix: str = "e2e", distinct: bool = False
) -> Pool:
    """``distinct``: every device carries its own serial, so no two look alike to a selector
    (identical devices share one evaluation of each selector)."""
    label = unique_name(prefix)
    names = testbed.create_nodes(nodes, {"e2e-pool": label}, prefix=label)
    return publish_devices(testbed, label, dict.fromkeys(names, devices), distinct=distinct)


def make_sized_pool(testbed: Testbed, shapes: Sequence[NodeShape], *, prefix: str = "e2e") -> Pool:
    """A pool of one node per shape, named ``<label>-<role>-0``, in the order given."""
    label = unique_name(prefix)
    roles: dict[str, str] = {}
    for shape in shapes:
        (roles[shape.role],) = testbed.create_nodes(
            1, {"e2e-pool": label}, prefix=f"{label}-{shape.role}",
            cpu=shape.cpu, memory=shape.memory, pods=shape.pods,
        )  # fmt: skip
    pool = publish_devices(testbed, label, {roles[s.role]: s.devices for s in shapes})
    pool.roles.update(roles)
    return pool


def publish_devices(
    testbed: Testbed, label: str, devices: Mapping[str, int], *, distinct: bool = False
) -> Pool:
    """The pool's DeviceClass and one ResourceSlice per node (also for 0 devices), in the
    testbed's API mode."""
    driver = f"{label}.example.com"
    device_class = label
    mode = testbed.api_mode
    testbed.apply(
        {
            "apiVersion": mode.api_version,
            "kind": "DeviceClass",
            "metadata": {"name": device_class},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        },
        *[
            slice_manifest(driver, node, count, mode=mode, distinct=distinct)
            for node, count in devices.items()
        ],
    )
    return Pool(testbed, driver, device_class, label, list(devices))


def slice_manifest(
    driver: str, node: str, devices: int, *, mode: ApiMode = CRD, distinct: bool = False
) -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"name": f"dev-{i}"} for i in range(devices)]
    if distinct:
        for item in items:
            item["attributes"] = {"serial": {"string": f"{node}-{item['name']}"}}
    return {
        "apiVersion": mode.api_version,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver.split('.')[0]}"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": items,
        },
    }


def template(namespace: str, name: str, pool: Pool, **request: Any) -> dict[str, Any]:
    return {
        "apiVersion": pool.mode.api_version,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "dev",
                            "exactly": {"deviceClassName": pool.device_class, **request},
                        }
                    ]
                }
            }
        },
    }


def claim(namespace: str, name: str, pool: Pool, **request: Any) -> dict[str, Any]:
    body = template(namespace, name, pool, **request)
    return {
        "apiVersion": pool.mode.api_version,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body["spec"]["spec"],
    }


def pod(
    namespace: str,
    name: str,
    pool: Pool,
    claims: list[dict[str, str]],
    *,
    labels: Mapping[str, str] | None = None,
    resources: Mapping[str, Any] | None = None,
    ports: Sequence[Mapping[str, Any]] | None = None,
    owner_references: Sequence[Mapping[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A pod asking for ``claims`` on the pool's nodes, as the pool's API mode has it asked
    (``nodeSelector`` in ``spec`` replaces the pool's selector). ``resources`` and ``ports`` go
    to its one container; ``spec`` takes any other pod field, e.g. ``affinity`` or
    ``topologySpreadConstraints``."""
    container: dict[str, Any] = {"name": "c", "image": "registry.invalid/fake"}
    if resources is not None:
        container["resources"] = dict(resources)
    if ports is not None:
        container["ports"] = [dict(p) for p in ports]
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "annotations": {}}
    if labels is not None:
        metadata["labels"] = dict(labels)
    if owner_references is not None:
        metadata["ownerReferences"] = [dict(o) for o in owner_references]
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [container], "nodeSelector": pool.node_selector, **spec},
    }
    pool.mode.set_pod_claims(body, claims)
    return body


def get(
    testbed: Testbed, kind: str, name: str, namespace: str | None = None
) -> dict[str, Any] | None:
    args = [kind, name] + ([f"--namespace={namespace}"] if namespace else [])
    return testbed.get(*args)


def claims_in(testbed: Testbed, namespace: str) -> list[dict[str, Any]]:
    found = testbed.get(testbed.api_mode.resource("resourceclaims"), f"--namespace={namespace}")
    return list((found or {}).get("items") or [])


def bound_node(testbed: Testbed, namespace: str, name: str) -> str:
    obj = get(testbed, "pod", name, namespace)
    return str(((obj or {}).get("spec") or {}).get("nodeName") or "")


def wait_bound(testbed: Testbed, namespace: str, name: str, timeout: float = 60.0) -> str:
    return str(
        wait_for(
            f"pod {namespace}/{name} bound",
            lambda: bound_node(testbed, namespace, name),
            timeout=timeout,
        )
    )


def events(testbed: Testbed, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    found = testbed.get(
        "events",
        f"--namespace={namespace}",
        f"--field-selector=involvedObject.name={name},reason={reason}",
    )
    return list((found or {}).get("items") or [])


def allocated_devices(testbed: Testbed, namespace: str) -> list[tuple[str, str, str]]:
    out = []
    for item in claims_in(testbed, namespace):
        allocation = (item.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            out.append((result["driver"], result["pool"], result["device"]))
    return out


def sleep_a_little(seconds: float = 1.0) -> None:
    time.sleep(seconds)
