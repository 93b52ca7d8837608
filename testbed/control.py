#!/usr/bin/env python3
"""Start, stop and populate the loopback control plane (etcd, API server, scheduler, controller
manager, kwok) built by `testbed/build`.

Why a script of its own: tests, demos and benchmarks all need the same real cluster, and it
must come up without Docker or downloads. Only the Python standard library and the `openssl`
command are used, so it runs before the project's virtualenv exists.

Everything a run creates lives in one state directory: PKI, etcd data, logs, the kubeconfigs
(the admin's, and one per component and the operator: IDENTITIES) and
`state.json` (ports, pids with their start times, kube-controller-manager's controller list).
`down` stops exactly the processes recorded there, checking each pid's start time so a recycled
pid is never signalled.

Usage (through the wrappers next to this file):
  testbed/up [--dir DIR] [--dra] [--workload-api] [--kcm-controllers LIST] [--nodes N]
             [--bin DIR]
             prints the kubeconfig path last
  testbed/down DIR
  testbed/nodes --kubeconfig PATH [--bin DIR] [--prefix P] [--label k=v ...]
                [--cpu Q] [--memory Q] [--pods N] [--ephemeral-storage Q]
                [--extended NAME=Q ...] N
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

TESTBED_DIR = Path(__file__).resolve().parent
# Loaded by path (tests), not only run as a script: the sibling modules must still resolve.
if str(TESTBED_DIR) not in sys.path:
    sys.path.insert(0, str(TESTBED_DIR))

import realnode  # noqa: E402
from procs import (  # noqa: E402
    READY_TIMEOUT_S,
    Component,
    TestbedError,
    command_of,  # noqa: F401  (for the fault helpers that restart a component)
    http_ok,
    insecure_tls_context,
    process_start_time,
    start,
    stop_components,
    tail,
    wait_until,
)

__all__ = ["Component", "TestbedError", "http_ok", "process_start_time", "tail"]
SERVICE_CIDR = "10.96.0.0/16"
# Wide enough for thousands of fake pods (kwok's default is a /24).
POD_CIDR = "10.64.0.0/10"
# kube-controller-manager's controllers unless --kcm-controllers says otherwise: the garbage
# collector, namespace deletion and the disruption controller (it computes a
# PodDisruptionBudget's status, without which the Eviction API refuses every eviction the
# budget covers) always; with --dra also both in-tree DRA controllers, as upstream ships
# them. Nothing else: most other controllers need parts the testbed lacks.
BASE_KCM_CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "disruption-controller",
)
DRA_KCM_CONTROLLERS = ("resourceclaim-controller", "device-taint-eviction-controller")
# With --workload-api: the API server stamps a finalizer on every PodGroup (admission plugin
# PodGroupProtection, on by default) that only this controller removes once no pod uses the
# group; without it a PodGroup, and its namespace, would never finish deleting.
WORKLOAD_KCM_CONTROLLERS = ("podgroup-protection-controller",)
# With real nodes, what running the operator in-cluster from manifests/ needs: Deployments
# and the certificate Job make pods, pods get service-account tokens (and the CA bundle they
# verify the API server with), Services get endpoints for kube-proxy.
REAL_NODE_KCM_CONTROLLERS = (
    "serviceaccount-controller",
    "root-ca-certificate-publisher-controller",
    "deployment-controller",
    "replicaset-controller",
    "job-controller",
    "ttl-after-finished-controller",
    "endpointslice-controller",
)
# The `kubernetes` Service's cluster IP (first of SERVICE_CIDR): in-cluster clients dial it.
KUBERNETES_SERVICE_IP = "10.96.0.1"


def default_kcm_controllers(
    dra: bool, real_nodes: bool = False, kcm_dra: bool = True, workload_api: bool = False
) -> list[str]:
    """kcm's controllers for a testbed; ``kcm_dra=False`` leaves out its DRA controllers even
    with ``dra`` (where dralloc's claim and taint controllers take their place)."""
    return [
        *BASE_KCM_CONTROLLERS,
        *(DRA_KCM_CONTROLLERS if dra and kcm_dra else ()),
        *(REAL_NODE_KCM_CONTROLLERS if real_nodes else ()),
        *(WORKLOAD_KCM_CONTROLLERS if workload_api else ()),
    ]


def parse_kcm_controllers(text: str) -> list[str]:
    """Split a --controllers value (kcm's syntax: names, '*', '-name') into its items.

    Only the shape is checked here (no empty items); kube-controller-manager itself refuses
    unknown names, and `up` then fails with its log.
    """
    items = text.split(",")
    if not text or any(not item or item != item.strip() for item in items):
        raise TestbedError(
            f"--kcm-controllers {text!r}: expected comma-separated controller names, '*' "
            "or '-name' without spaces or empty items"
        )
    return items


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    scheduler: int
    controller_manager: int
    kwok: int


@dataclass
class State:
    dir: str
    bin: str
    dra: bool
    kubeconfig: str
    server: str
    ports: Ports
    components: list[Component] = field(default_factory=list)
    # The items of kube-controller-manager's --controllers, as passed (may hold '*', '-name').
    kcm_controllers: list[str] = field(default_factory=list)
    # Real nodes (realnode.py) and the host address they and the API server use; none: kwok only.
    real_nodes: list[realnode.RealNode] = field(default_factory=list)
    address: str | None = None
    # Upstream's Workload API served (scheduling.k8s.io/v1beta1, gate GenericWorkload).
    workload_api: bool = False

    def save(self) -> None:
        path = Path(self.dir) / "state.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)

    @staticmethod
    def load(state_dir: Path) -> State:
        raw = json.loads((state_dir / "state.json").read_text())
        raw["ports"] = Ports(**raw["ports"])
        raw["components"] = [Component(**c) for c in raw["components"]]
        raw["real_nodes"] = [realnode.RealNode(**n) for n in raw.get("real_nodes", [])]
        return State(**raw)


# ---------------------------------------------------------------------------------------------
# helpers


def free_ports(count: int) -> list[int]:
    """Ask the kernel for distinct free loopback ports (held open together so they differ)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def default_bin_dir() -> Path:
    """The bin directory of the current build, or a TestbedError with the reason it is missing."""
    env = os.environ.get("DRALLOC_TESTBED_BIN")
    if env:
        return Path(env)
    result = subprocess.run(
        [str(TESTBED_DIR / "build"), "--check"], capture_output=True, text=True, check=False
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise TestbedError(lines[-1] if lines else result.stderr.strip())
    return Path(lines[-1])


def run_openssl(args: Sequence[str], cwd: Path) -> None:
    result = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise TestbedError(f"openssl {' '.join(args[:2])} failed: {result.stderr.strip()}")


EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


IDENTITIES = {
    # As kubeadm names them: the API server's bootstrap RBAC grants exactly these users what
    # they need, and admission policies can tell their writes apart from anyone else's.
    "kube-scheduler": "/CN=system:kube-scheduler",
    "kube-controller-manager": "/CN=system:kube-controller-manager",
    # The operator run by tests and scripts beside the testbed: all rights (the chart's RBAC
    # is tried in-cluster), but a name of its own, so that policies trusting the operator
    # (manifests/base) do not trust the admin who plays the user, or kube-scheduler.
    "operator": "/O=system:masters/CN=dralloc-testbed-operator",
}
"""Client certificates (and a ``<name>.kubeconfig`` each) besides the admin's."""
OPERATOR_USER = "dralloc-testbed-operator"


def make_pki(pki: Path, address: str | None = None) -> None:
    """A CA, the API server's serving cert, client certs (the admin's, each component's, the
    operator's) and the service-account keys.

    Full key-usage/SKI/AKI extensions: strict TLS clients (Python >= 3.13) reject certs without.
    """
    pki.mkdir(parents=True, exist_ok=True)
    run_openssl(
        [
            "req", "-x509", "-new", *EC_KEY, "-keyout", "ca.key", "-out", "ca.crt",
            "-days", "3650", "-subj", "/CN=dralloc-testbed-ca",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        ],
        pki,
    )  # fmt: skip
    leaves = {
        "apiserver": (
            "/CN=kube-apiserver",
            "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost,"
            f"IP:{KUBERNETES_SERVICE_IP},DNS:kubernetes,DNS:kubernetes.default,"
            "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
            + (f",IP:{address}" if address else "")
            + "\n",
        ),
        "admin": ("/O=system:masters/CN=dralloc-testbed-admin", "extendedKeyUsage=clientAuth\n"),
        **{
            name: (subject, "extendedKeyUsage=clientAuth\n") for name, subject in IDENTITIES.items()
        },
    }
    for name, (subject, extra) in leaves.items():
        ext = pki / f"{name}.ext"
        ext.write_text(
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature\n"
            "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n" + extra
        )
        run_openssl(
            ["req", "-new", *EC_KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", subject],
            pki,
        )  # fmt: skip
        run_openssl(
            ["x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "3650", "-out", f"{name}.crt", "-extfile", ext.name],
            pki,
        )  # fmt: skip
    run_openssl(
        ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "sa.key"],
        pki,
    )
    run_openssl(["pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub"], pki)


def write_kubeconfig(path: Path, server: str, pki: Path, user: str = "admin") -> None:
    """Credentials embedded as data, so the file can be copied and read by any client."""

    def b64(name: str) -> str:
        return base64.b64encode((pki / name).read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "testbed",
                "cluster": {"server": server, "certificate-authority-data": b64("ca.crt")},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(f"{user}.crt"),
                    "client-key-data": b64(f"{user}.key"),
                },
            }
        ],
        "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": user}}],
        "current-context": "testbed",
    }
    # JSON is valid YAML; every kubeconfig reader accepts it.
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)


def identity_kubeconfig(admin_kubeconfig: Path, name: str) -> Path:
    """The kubeconfig of one of IDENTITIES, beside the admin's (``operator.kubeconfig``)."""
    return admin_kubeconfig.with_name(f"{name}.kubeconfig")


def admin_tls_context(pki: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return ctx


# ---------------------------------------------------------------------------------------------
# up


def k8s_minor(bin_dir: Path) -> int:
    """The Kubernetes minor version of the binaries in bin_dir: from the build's stamp
    (``k8s=v1.37.2 ...``), else from ``kube-apiserver --version``."""
    text = ""
    with contextlib.suppress(OSError):
        text = (bin_dir / ".complete").read_text()
    match = re.search(r"\bk8s=v1\.(\d+)\.", text)
    if not match:
        out = subprocess.run(
            [str(bin_dir / "kube-apiserver"), "--version"],
            capture_output=True, text=True, check=False, timeout=30,
        ).stdout  # fmt: skip
        match = re.search(r"v1\.(\d+)\.", out)
    if not match:
        raise TestbedError(f"cannot tell the Kubernetes version of {bin_dir}")
    return int(match.group(1))


# The DRA feature gates Kubernetes 1.37 (the current stable release, the testbed's default)
# has on by default but an older release (the version matrix, testbed/matrix) has off, per
# minor: with --dra the testbed turns them on, so in-tree DRA behaves as in 1.37 as far as the
# older release can. 1.37's DRAFractionalCapacityRange (beta, yet off unless
# --min-compatibility-version=1.37) has no gate before 1.37.
# DeviceTaintRule is also served where v1 lacks it: v1beta2 in 1.36, v1alpha3 before.
DRA_GATES_BY_MINOR = {
    37: (),
    36: ("DRADeviceTaintRules",),
    35: (
        "DRAConsumableCapacity", "DRADeviceBindingConditions", "DRADeviceTaintRules",
        "DRADeviceTaints", "DRAExtendedResource", "DRAPartitionableDevices",
    ),
    34: (
        "DRAConsumableCapacity", "DRADeviceBindingConditions", "DRADeviceTaints",
        "DRAExtendedResource", "DRAPartitionableDevices",
    ),
}  # fmt: skip


def dra_gates(state: State) -> list[str]:
    """With in-tree DRA on, the --feature-gates flag of every component (DRA_GATES_BY_MINOR)."""
    if not state.dra:
        return []
    minor = k8s_minor(Path(state.bin))
    gates = DRA_GATES_BY_MINOR.get(minor, () if minor > 37 else DRA_GATES_BY_MINOR[34])
    return [f"--feature-gates={','.join(f'{gate}=true' for gate in gates)}"] if gates else []


# --workload-api: upstream's Workload API (PodGroups, pod.spec.schedulingGroup), beta and off
# by default in 1.37. The gate goes to every component (kube-scheduler then gang-schedules
# the pods of a gang PodGroup, kcm runs WORKLOAD_KCM_CONTROLLERS), the API version to the
# API server. Before 1.37 the API has other versions (v1alpha1/v1alpha2): not offered.
WORKLOAD_API_GATE = "GenericWorkload"
WORKLOAD_API_VERSION = "scheduling.k8s.io/v1beta1"
WORKLOAD_API_MIN_MINOR = 37


# Alpha DRA fields that the API server drops from the objects it stores unless their gate
# is on, per minor: with --dra the API server alone gets these gates, so that slices keep
# the fields (in 1.37 a device's compatibilityGroups, a slice's skipNodeOperations, a
# request's derivedAttributes) and dralloc's allocator sees them when its own gate is on.
# kube-scheduler and kcm keep their defaults: off, they leave such slices alone, as dralloc
# does with its default, and in-tree DRA is measured as a default cluster runs it.
DRA_FIELD_GATES_BY_MINOR = {
    37: ("DRADeviceCompatibilityGroups", "DRADerivedAttributes", "DRAOptionalNodeOperations")
}


def apiserver_feature_gates(state: State) -> list[str]:
    """The API server's --feature-gates: every component's (feature_gates) and, with in-tree
    DRA on, the gates of the fields it would drop (DRA_FIELD_GATES_BY_MINOR)."""
    gates = [item for flag in feature_gates(state) for item in flag.split("=", 1)[1].split(",")]
    if state.dra:
        minor = k8s_minor(Path(state.bin))
        gates.extend(f"{gate}=true" for gate in DRA_FIELD_GATES_BY_MINOR.get(minor, ()))
    return [f"--feature-gates={','.join(gates)}"] if gates else []


def feature_gates(state: State) -> list[str]:
    """The --feature-gates flag of every component: the DRA gates (dra_gates) and, with the
    Workload API, its gate, in one flag."""
    gates = [item for flag in dra_gates(state) for item in flag.split("=", 1)[1].split(",")]
    if state.workload_api:
        gates.append(f"{WORKLOAD_API_GATE}=true")
    return [f"--feature-gates={','.join(gates)}"] if gates else []


def runtime_config(state: State) -> list[str]:
    """The API server's --runtime-config: DRA's (dra_runtime_config) and, with the Workload
    API, its version, in one flag."""
    items = [flag.split("=", 1)[1] for flag in dra_runtime_config(state)]
    if state.workload_api:
        items.append(f"{WORKLOAD_API_VERSION}=true")
    return [f"--runtime-config={','.join(items)}"] if items else []


def dra_runtime_config(state: State) -> list[str]:
    """The resource.k8s.io version that serves DeviceTaintRule where v1 does not (see
    dra_gates)."""
    minor = k8s_minor(Path(state.bin))
    if not state.dra or minor >= 37:
        return []
    version = "v1beta2" if minor == 36 else "v1alpha3"
    return [f"--runtime-config=resource.k8s.io/{version}=true"]


def scheduler_config(state: State, kubeconfig: Path) -> Path:
    profile: dict[str, object] = {"schedulerName": "default-scheduler"}
    if not state.dra:
        # Since 1.34 the DRA gate is on (locked on from 1.36) and resource.k8s.io must stay
        # served (the scheduler waits for its informers); turning the plugin off is what keeps
        # in-tree DRA inactive.
        profile["plugins"] = {"multiPoint": {"disabled": [{"name": "DynamicResources"}]}}
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 5000, "burst": 5000},
        "leaderElection": {"leaderElect": False},
        "profiles": [profile],
    }
    path = Path(state.dir) / "scheduler.yaml"
    path.write_text(json.dumps(config, indent=2))
    return path


def up(
    state_dir: Path,
    bin_dir: Path,
    dra: bool,
    nodes: int,
    owner_pid: int | None = None,
    kcm_controllers: Sequence[str] | None = None,
    real_nodes: int = 0,
    real_node_devices: int = 4,
    kcm_dra: bool = True,
    workload_api: bool = False,
) -> State:
    """Start the control plane (and ``real_nodes`` real nodes, realnode.py); kcm_controllers
    replaces default_kcm_controllers(dra, real_nodes > 0, kcm_dra, workload_api)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    if (state_dir / "state.json").exists():
        raise TestbedError(f"{state_dir} already holds a testbed; run testbed/down {state_dir}")
    for binary in ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok"):
        if not (bin_dir / binary).is_file():
            raise TestbedError(f"{bin_dir / binary} is missing; run testbed/build")
    pki = state_dir / "pki"
    kubeconfig = state_dir / "kubeconfig"
    if real_nodes:
        reason = realnode.unavailable(bin_dir)
        if reason:
            raise TestbedError(reason)
    if workload_api and k8s_minor(bin_dir) < WORKLOAD_API_MIN_MINOR:
        raise TestbedError(
            f"--workload-api needs Kubernetes 1.{WORKLOAD_API_MIN_MINOR}+ ({WORKLOAD_API_VERSION})"
        )
    ports = Ports(*free_ports(6))
    server = f"https://127.0.0.1:{ports.apiserver}"
    controllers = list(
        default_kcm_controllers(dra, real_nodes > 0, kcm_dra, workload_api)
        if kcm_controllers is None else kcm_controllers
    )  # fmt: skip
    state = State(
        str(state_dir), str(bin_dir), dra, str(kubeconfig), server, ports,
        kcm_controllers=controllers, address=realnode.host_ip() if real_nodes else None,
        workload_api=workload_api,
    )  # fmt: skip
    state.save()
    try:
        _start_all(state, bin_dir, pki, kubeconfig)
        if owner_pid is not None:
            start_watchdog(state, owner_pid)
        if nodes:
            create_nodes(kubeconfig, bin_dir, nodes, "kwok-node", {})
        if real_nodes:
            assert state.address is not None
            realnode.start_nodes(
                state, bin_dir, real_nodes, state.address, admin_tls_context(pki),
                free_ports(2 * real_nodes + 2), real_node_devices,
            )  # fmt: skip
    except BaseException:
        stop(state)
        raise
    return state


AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete]
  resources:
  - group: resource.k8s.io
    resources: [resourceclaims, resourceclaims/status, resourceclaims/binding]
  - group: resource.dralloc.dev
    resources: [resourceclaims, resourceclaims/status]
- level: Metadata
  verbs: [create, delete]
  resources:
  - group: ""
    resources: [pods/binding, pods/eviction]
- level: Metadata
  verbs: [delete]
  resources:
  - group: ""
    resources: [pods]
- level: None
"""
"""Who wrote what a claim holds, and who bound or deleted a pod: ``logs/audit.log``, so a
robustness violation (a pod bound while its claim holds nothing) can be traced to its
writer. Metadata only: no object bodies."""


def audit_args(state_dir: Path) -> list[str]:
    policy = state_dir / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    (state_dir / "logs").mkdir(exist_ok=True)
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={state_dir / 'logs' / 'audit.log'}",
        "--audit-log-maxsize=200",
        "--audit-log-maxbackup=2",
    ]


def _start_all(state: State, bin_dir: Path, pki: Path, kubeconfig: Path) -> None:
    ports, state_dir = state.ports, Path(state.dir)
    deadline = time.monotonic() + READY_TIMEOUT_S
    make_pki(pki, state.address)
    write_kubeconfig(kubeconfig, state.server, pki)
    own = {name: identity_kubeconfig(kubeconfig, name) for name in IDENTITIES}
    for name, path in own.items():
        write_kubeconfig(path, state.server, pki, name)

    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    etcd_url = f"http://127.0.0.1:{ports.etcd_client}"
    etcd = start(
        state,
        "etcd",
        [
            str(bin_dir / "etcd"),
            "--name=testbed",
            f"--data-dir={state_dir / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=testbed={peer}",
            "--quota-backend-bytes=8589934592",
            "--auto-compaction-retention=1",
            # Throwaway data: skipping fsync keeps a busy test run off the disk's latency.
            "--unsafe-no-fsync",
            "--log-level=warn",
        ],
    )
    wait_until("etcd /health", lambda: http_ok(f"{etcd_url}/health"), etcd, deadline)

    disabled_admission = [
        "TaintNodesByCondition",  # no node-lifecycle controller to remove the not-ready taint
        "StorageObjectInUseProtection",  # no pvc-protection controller to drop its finalizers
    ]
    if not state.address:
        # No serviceaccount controller: pods would wait for a "default" ServiceAccount. Real
        # nodes run it, and their pods need the token this plugin mounts.
        disabled_admission.append("ServiceAccount")
    if state.address:
        # Pods reach the API server at the host's address (through the `kubernetes` Service,
        # whose endpoint needs a non-loopback advertise address), and the API server reaches
        # the kubelets there, authenticating with the admin certificate.
        network = [
            "--bind-address=0.0.0.0",
            # Reachable from the network now: nothing without credentials, not even /healthz.
            "--anonymous-auth=false",
            f"--advertise-address={state.address}",
            "--endpoint-reconciler-type=lease",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            f"--kubelet-client-certificate={pki / 'admin.crt'}",
            f"--kubelet-client-key={pki / 'admin.key'}",
        ]
    else:
        network = [
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            "--endpoint-reconciler-type=none",
        ]
    apiserver = start(
        state,
        "kube-apiserver",
        [
            str(bin_dir / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            *network,
            f"--secure-port={ports.apiserver}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=RBAC",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--service-account-issuer={state.server}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--disable-admission-plugins={','.join(disabled_admission)}",
            "--allow-privileged=true",
            "--enable-priority-and-fairness=false",
            "--max-requests-inflight=0",
            "--max-mutating-requests-inflight=0",
            "--profiling=true",  # /debug/pprof for admins: where the API server spends CPU
            f"--cert-dir={pki}",
            *audit_args(state_dir),
            *apiserver_feature_gates(state),
            *runtime_config(state),
        ],
    )
    tls = admin_tls_context(pki)
    wait_until(
        "kube-apiserver /readyz",
        lambda: http_ok(f"{state.server}/readyz", tls),
        apiserver,
        deadline,
    )
    wait_until(
        "namespace default",
        lambda: http_ok(f"{state.server}/api/v1/namespaces/default", tls),
        apiserver,
        deadline,
    )

    def common(kubeconfig: Path) -> list[str]:
        return [
            "--bind-address=127.0.0.1",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        ]

    scheduler = start(
        state,
        "kube-scheduler",
        [
            str(bin_dir / "kube-scheduler"),
            f"--config={scheduler_config(state, own['kube-scheduler'])}",
            f"--secure-port={ports.scheduler}",
            *feature_gates(state),
            *common(own["kube-scheduler"]),
        ],
    )
    controller_manager = start(
        state,
        "kube-controller-manager",
        [
            str(bin_dir / "kube-controller-manager"),
            f"--kubeconfig={own['kube-controller-manager']}",
            # Each controller under its own ServiceAccount (kube-system/<controller>), as in
            # real clusters: what kcm writes shows who wrote it.
            "--use-service-account-credentials=true",
            "--leader-elect=false",
            f"--secure-port={ports.controller_manager}",
            f"--controllers={','.join(state.kcm_controllers)}",
            # The volume controllers ('*' runs them) would otherwise create this directory
            # under /usr/libexec on the host.
            f"--flex-volume-plugin-dir={state_dir / 'flexvolume'}",
            "--kube-api-qps=1000",
            "--kube-api-burst=2000",
            # Published as kube-root-ca.crt in every namespace (the projected token volume).
            f"--root-ca-file={pki / 'ca.crt'}",
            *feature_gates(state),
            *common(own["kube-controller-manager"]),
        ],
    )
    # kwok also merges ~/.kwok/kwok.yaml when it exists: give it an empty home of its own.
    kwok_home = state_dir / "kwok-home"
    kwok_home.mkdir(exist_ok=True)
    kwok = start(
        state,
        "kwok",
        [
            str(bin_dir / "kwok"),
            f"--kubeconfig={kubeconfig}",
            # With real nodes kwok must leave them (and their pods) to their kubelets; the
            # fake nodes carry this annotation (node_manifest).
            *(
                ["--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake"]
                if state.address
                else ["--manage-all-nodes=true"]
            ),
            f"--config={bin_dir / 'kwok-stages.yaml'}",
            f"--cidr={POD_CIDR}",
            "--node-lease-duration-seconds=40",
            f"--server-address=127.0.0.1:{ports.kwok}",
        ],
        env={**os.environ, "HOME": str(kwok_home)},
    )
    insecure = insecure_tls_context()
    wait_until(
        "kube-scheduler /healthz",
        lambda: http_ok(f"https://127.0.0.1:{ports.scheduler}/healthz", insecure),
        scheduler,
        deadline,
    )
    wait_until(
        "kube-controller-manager /healthz",
        lambda: http_ok(f"https://127.0.0.1:{ports.controller_manager}/healthz", insecure),
        controller_manager,
        deadline,
    )
    wait_until(
        "kwok /healthz", lambda: http_ok(f"http://127.0.0.1:{ports.kwok}/healthz"), kwok, deadline
    )


def start_watchdog(state: State, owner_pid: int) -> None:
    """Stop the testbed when owner_pid exits, even if it never calls `down` (killed test run)."""
    owner_start = process_start_time(owner_pid)
    if owner_start is None:
        raise TestbedError(f"owner process {owner_pid} is not running")
    start(
        state,
        "watchdog",
        [sys.executable, str(Path(__file__).resolve()), "watch", state.dir,
         f"--owner-pid={owner_pid}", f"--owner-start={owner_start}"],
    )  # fmt: skip


def watch(state_dir: Path, owner_pid: int, owner_start: int) -> None:
    while process_start_time(owner_pid) == owner_start:
        time.sleep(2)
    if (state_dir / "state.json").exists():
        stop(State.load(state_dir))


# ---------------------------------------------------------------------------------------------
# down


def stop(state: State) -> list[str]:
    """Stop every recorded process (newest first), then undo what real nodes did to the host."""
    stopped = stop_components(state.components)
    # host-record.json: start_nodes took the host (lock, record) but may have failed before
    # its first node was recorded; the lock must still be released.
    if state.real_nodes or (Path(state.dir) / "host-record.json").exists():
        realnode.teardown(Path(state.dir), state.real_nodes)
    return stopped


# ---------------------------------------------------------------------------------------------
# nodes


# Big enough that nothing but devices limits a test or benchmark by default.
DEFAULT_CAPACITY = {"cpu": "1000", "memory": "4Ti", "pods": "100000"}
# A Kubernetes quantity: a decimal number, then a binary or decimal suffix or an exponent.
QUANTITY = re.compile(
    r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)


def node_capacity(
    cpu: str | None = None,
    memory: str | None = None,
    pods: int | None = None,
    ephemeral_storage: str | None = None,
    extended: dict[str, str] | None = None,
) -> dict[str, str]:
    """Capacity (and allocatable, the same) of a fake node: the defaults with these replaced.

    Quantities are checked for their syntax and extended resources for a domain-prefixed
    name here, so a typo fails before anything is created; the API server checks the rest
    (e.g. that an extended resource is a whole number).
    """
    for resource in extended or {}:
        if "/" not in resource:
            raise TestbedError(
                f"extended resource {resource!r} has no domain prefix (like example.com/foo)"
            )
    capacity = dict(DEFAULT_CAPACITY)
    given = {"cpu": cpu, "memory": memory, "ephemeral-storage": ephemeral_storage}
    given.update(extended or {})
    for resource, quantity in given.items():
        if quantity is None:
            continue
        if not QUANTITY.fullmatch(quantity):
            raise TestbedError(f"{resource}: {quantity!r} is not a Kubernetes quantity")
        capacity[resource] = quantity
    if pods is not None:
        if pods < 0:
            raise TestbedError(f"pods: {pods} is negative")
        capacity["pods"] = str(pods)
    return capacity


def node_manifest(
    name: str, labels: dict[str, str], capacity: dict[str, str] | None = None
) -> dict[str, object]:
    capacity = dict(DEFAULT_CAPACITY if capacity is None else capacity)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **labels,
            },
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        # Status is accepted on create; kwok then keeps the node Ready and keeps both maps.
        "status": {"allocatable": capacity, "capacity": dict(capacity)},
    }


def create_nodes(
    kubeconfig: Path,
    bin_dir: Path,
    count: int,
    prefix: str,
    labels: dict[str, str],
    capacity: dict[str, str] | None = None,
) -> list[str]:
    """Apply N nodes; ``capacity`` (default DEFAULT_CAPACITY) is also their allocatable.

    The API server ignores status on updates of a Node, so the capacity of a node that
    already exists is not changed: delete it first to resize it.
    """
    names = [f"{prefix}-{i}" for i in range(count)]
    items = [node_manifest(name, labels, capacity) for name in names]
    manifest = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    result = subprocess.run(
        [str(bin_dir / "kubectl"), f"--kubeconfig={kubeconfig}", "apply", "--server-side",
         "--force-conflicts", "--field-manager=dralloc-testbed", "-f", "-"],
        input=manifest, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise TestbedError(f"creating nodes failed: {result.stderr.strip()}")
    return names


# ---------------------------------------------------------------------------------------------
# command line


def default_state_dir() -> Path:
    root = Path(os.environ.get("DRALLOC_TESTBED_RUN", Path.home() / ".cache/dralloc/run"))
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=root))


def parse_labels(pairs: Sequence[str]) -> dict[str, str]:
    return parse_pairs(pairs, "label")


def parse_pairs(pairs: Sequence[str], what: str) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"{what} {pair!r} is not key=value")
        out[key] = value
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="testbed")
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start a control plane; prints the kubeconfig path last")
    p_up.add_argument("--dir", type=Path, help="state directory (default: a new one under "
                      "$DRALLOC_TESTBED_RUN or ~/.cache/dralloc/run)")  # fmt: skip
    p_up.add_argument("--bin", type=Path, help="binaries (default: the current testbed/build)")
    p_up.add_argument("--dra", action="store_true", help="turn on in-tree DRA")
    p_up.add_argument(
        "--kcm-controllers", metavar="LIST",
        help="kube-controller-manager's --controllers, passed as given (default: "
        f"{','.join(BASE_KCM_CONTROLLERS)}; with --dra also {','.join(DRA_KCM_CONTROLLERS)})",
    )  # fmt: skip
    p_up.add_argument(
        "--no-kcm-dra", dest="kcm_dra", action="store_false",
        help="with --dra: the default controllers without kcm's DRA ones, which dralloc's "
        "claim and taint controllers replace (the in-tree overlay's setting)",
    )  # fmt: skip
    p_up.add_argument(
        "--workload-api", action="store_true",
        help="serve upstream's Workload API (scheduling.k8s.io/v1beta1 PodGroups; gate "
        "GenericWorkload on every component, kcm's podgroup-protection-controller; 1.37+)",
    )  # fmt: skip
    p_up.add_argument("--nodes", type=int, default=0, help="create N kwok nodes kwok-node-<i>")
    p_up.add_argument(
        "--real-nodes", type=int, default=0, metavar="N",
        help="also start N real nodes real-node-<i> (containerd, kubelet, upstream's DRA test "
        "driver; needs root and testbed/build's real-node part)",
    )  # fmt: skip
    p_up.add_argument("--real-node-devices", type=int, default=4, metavar="N",
                      help="devices the test driver publishes per real node (default 4)")  # fmt: skip
    p_up.add_argument("--owner-pid", type=int, help="stop the testbed when this process exits")
    p_watch = sub.add_parser("watch", help=argparse.SUPPRESS)
    p_watch.add_argument("dir", type=Path)
    p_watch.add_argument("--owner-pid", type=int, required=True)
    p_watch.add_argument("--owner-start", type=int, required=True)
    p_import = sub.add_parser("import-image", help="import OCI archives into every real node")
    p_import.add_argument("dir", type=Path)
    p_import.add_argument("archives", type=Path, nargs="+")
    p_down = sub.add_parser("down", help="stop the testbed recorded in a state directory")
    p_down.add_argument("dir", type=Path)
    p_down.add_argument("--purge", action="store_true", help="also delete the state directory")
    p_nodes = sub.add_parser("nodes", help="create (or update) N kwok fake nodes")
    p_nodes.add_argument("count", type=int)
    p_nodes.add_argument("--kubeconfig", type=Path, default=os.environ.get("KUBECONFIG"))
    p_nodes.add_argument("--bin", type=Path)
    p_nodes.add_argument("--prefix", default="kwok-node")
    p_nodes.add_argument("--label", action="append", default=[], help="key=value (repeatable)")
    size = "capacity and allocatable of each node (a Kubernetes quantity; default: "
    p_nodes.add_argument("--cpu", metavar="Q", help=size + DEFAULT_CAPACITY["cpu"] + ")")
    p_nodes.add_argument("--memory", metavar="Q", help=size + DEFAULT_CAPACITY["memory"] + ")")
    p_nodes.add_argument("--pods", metavar="N", type=int, help="pods each node takes "
                         f"(default: {DEFAULT_CAPACITY['pods']})")  # fmt: skip
    p_nodes.add_argument("--ephemeral-storage", metavar="Q", help=size + "none)")
    p_nodes.add_argument("--extended", metavar="NAME=Q", action="append", default=[],
                         help="an extended resource, e.g. example.com/foo=4 (repeatable)")  # fmt: skip
    args = parser.parse_args(argv)

    try:
        if args.command == "up":
            controllers = (
                None if args.kcm_controllers is None
                else parse_kcm_controllers(args.kcm_controllers)
            )  # fmt: skip
            bin_dir = args.bin or default_bin_dir()
            state_dir = (args.dir or default_state_dir()).resolve()
            began = time.monotonic()
            state = up(
                state_dir, bin_dir, args.dra, args.nodes, args.owner_pid, controllers,
                args.real_nodes, args.real_node_devices, args.kcm_dra, args.workload_api,
            )  # fmt: skip
            print(
                f"testbed up in {time.monotonic() - began:.1f} s: {state.server} "
                f"(dra={'on' if state.dra else 'off'}, "
                f"workload api={'on' if state.workload_api else 'off'}, kcm controllers: "
                f"{','.join(state.kcm_controllers)}"
                + "".join(f", {n.name}" for n in state.real_nodes)
                + f"); stop with: testbed/down {state_dir}",
                file=sys.stderr,
            )
            print(state.kubeconfig)
        elif args.command == "watch":
            watch(args.dir, args.owner_pid, args.owner_start)
        elif args.command == "import-image":
            state = State.load(args.dir)
            if not state.real_nodes:
                raise TestbedError(f"{args.dir} has no real nodes")
            for archive in args.archives:
                realnode.import_image(Path(state.bin), state.real_nodes, archive)
        elif args.command == "down":
            state = State.load(args.dir)
            stopped = stop(state)
            print(f"stopped: {', '.join(stopped) or 'nothing was running'}", file=sys.stderr)
            if args.purge:
                shutil.rmtree(args.dir, ignore_errors=True)
        else:
            if args.kubeconfig is None:
                raise TestbedError("--kubeconfig (or $KUBECONFIG) is required")
            bin_dir = args.bin or default_bin_dir()
            capacity = node_capacity(
                args.cpu, args.memory, args.pods, args.ephemeral_storage,
                parse_pairs(args.extended, "extended resource"),
            )  # fmt: skip
            names = create_nodes(
                args.kubeconfig, bin_dir, args.count, args.prefix, parse_labels(args.label),
                capacity,
            )  # fmt: skip
            print("\n".join(names))
    except TestbedError as exc:
        print(f"testbed {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
