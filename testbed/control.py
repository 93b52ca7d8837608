#!/usr/bin/env python3
"""Start, stop and populate the loopback control plane (etcd, API server, scheduler, controller
manager, kwok) built by `testbed/build`.

Why a script of its own: tests, demos and benchmarks all need the same real cluster, and it
must come up without Docker or downloads. Only the Python standard library and the `openssl`
command are used, so it runs before the project's virtualenv exists.

Everything a run creates lives in one state directory: PKI, etcd data, logs, the kubeconfig and
`state.json` (ports, pids with their start times, kube-controller-manager's controller list).
`down` stops exactly the processes recorded there, checking each pid's start time so a recycled
pid is never signalled.

Usage (through the wrappers next to this file):
  testbed/up [--dir DIR] [--dra] [--kcm-controllers LIST] [--nodes N] [--bin DIR]
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
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

TESTBED_DIR = Path(__file__).resolve().parent
READY_TIMEOUT_S = 120.0
STOP_GRACE_S = 10.0
SERVICE_CIDR = "10.96.0.0/16"
# Wide enough for thousands of fake pods (kwok's default is a /24).
POD_CIDR = "10.64.0.0/10"
# kube-controller-manager's controllers unless --kcm-controllers says otherwise: the garbage
# collector and namespace deletion always; with --dra also both in-tree DRA controllers, as
# upstream ships them. Nothing else: most other controllers need parts the testbed lacks.
BASE_KCM_CONTROLLERS = ("garbage-collector-controller", "namespace-controller")
DRA_KCM_CONTROLLERS = ("resourceclaim-controller", "device-taint-eviction-controller")


def default_kcm_controllers(dra: bool) -> list[str]:
    return [*BASE_KCM_CONTROLLERS, *(DRA_KCM_CONTROLLERS if dra else ())]


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


class TestbedError(RuntimeError):
    """A start or stop step failed; the message says which and where the logs are."""


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    scheduler: int
    controller_manager: int
    kwok: int


@dataclass
class Component:
    name: str
    pid: int
    start_time: int  # /proc/<pid>/stat field 22: tells a recycled pid apart
    log: str


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


def process_start_time(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; fields after it are space-separated.
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None  # exited; only waiting for its parent (often init) to reap it
    return int(fields[19])


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


def make_pki(pki: Path) -> None:
    """A CA, the API server's serving cert, an admin client cert and the service-account keys.

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
            "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n",
        ),
        "admin": ("/O=system:masters/CN=dralloc-testbed-admin", "extendedKeyUsage=clientAuth\n"),
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


def write_kubeconfig(path: Path, server: str, pki: Path) -> None:
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
                "name": "admin",
                "user": {
                    "client-certificate-data": b64("admin.crt"),
                    "client-key-data": b64("admin.key"),
                },
            }
        ],
        "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": "admin"}}],
        "current-context": "testbed",
    }
    # JSON is valid YAML; every kubeconfig reader accepts it.
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)


def admin_tls_context(pki: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return ctx


def insecure_tls_context() -> ssl.SSLContext:
    # The scheduler and controller manager serve health on self-signed certs of their own.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def http_ok(url: str, ctx: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5, context=ctx) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def wait_until(
    what: str, check: Callable[[], bool], component: Component | None, deadline: float
) -> None:
    while time.monotonic() < deadline:
        if check():
            return
        if component is not None and process_start_time(component.pid) is None:
            raise TestbedError(
                f"{what}: process exited; log: {component.log}\n{tail(component.log)}"
            )
        time.sleep(0.25)
    log = f"; log: {component.log}\n{tail(component.log)}" if component else ""
    raise TestbedError(f"{what}: not ready after {READY_TIMEOUT_S:.0f} s{log}")


def tail(path: str, lines: int = 15) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# ---------------------------------------------------------------------------------------------
# up


def start(state: State, name: str, argv: list[str], env: dict[str, str] | None = None) -> Component:
    logs = Path(state.dir) / "logs"
    logs.mkdir(exist_ok=True)
    log_path = logs / f"{name}.log"
    with open(log_path, "ab") as log:
        # A session of its own: survives the caller's terminal and is signalled as a group.
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            cwd=state.dir,
        )
    start_time = process_start_time(proc.pid)
    component = Component(name, proc.pid, start_time or 0, str(log_path))
    state.components.append(component)
    state.save()
    return component


def dra_gates(state: State) -> list[str]:
    """With in-tree DRA on, what Kubernetes 1.37 (the current stable release) has on by
    default but 1.36 (the testbed's) has not: DeviceTaintRules (GA in 1.37; in 1.36 a beta,
    off, served at resource.k8s.io/v1beta2, which the API server is told to serve)."""
    return ["--feature-gates=DRADeviceTaintRules=true"] if state.dra else []


def scheduler_config(state: State, kubeconfig: Path) -> Path:
    profile: dict[str, object] = {"schedulerName": "default-scheduler"}
    if not state.dra:
        # In 1.36 the DRA gate is locked on and resource.k8s.io must stay served (the scheduler
        # waits for its informers); turning the plugin off is what keeps in-tree DRA inactive.
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
) -> State:
    """Start the control plane; kcm_controllers replaces default_kcm_controllers(dra)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    if (state_dir / "state.json").exists():
        raise TestbedError(f"{state_dir} already holds a testbed; run testbed/down {state_dir}")
    for binary in ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok"):
        if not (bin_dir / binary).is_file():
            raise TestbedError(f"{bin_dir / binary} is missing; run testbed/build")
    pki = state_dir / "pki"
    kubeconfig = state_dir / "kubeconfig"
    ports = Ports(*free_ports(6))
    server = f"https://127.0.0.1:{ports.apiserver}"
    controllers = list(default_kcm_controllers(dra) if kcm_controllers is None else kcm_controllers)
    state = State(
        str(state_dir), str(bin_dir), dra, str(kubeconfig), server, ports,
        kcm_controllers=controllers,
    )  # fmt: skip
    state.save()
    try:
        _start_all(state, bin_dir, pki, kubeconfig)
        if nodes:
            create_nodes(kubeconfig, bin_dir, nodes, "kwok-node", {})
        if owner_pid is not None:
            start_watchdog(state, owner_pid)
    except BaseException:
        stop(state)
        raise
    return state


def _start_all(state: State, bin_dir: Path, pki: Path, kubeconfig: Path) -> None:
    ports, state_dir = state.ports, Path(state.dir)
    deadline = time.monotonic() + READY_TIMEOUT_S
    make_pki(pki)
    write_kubeconfig(kubeconfig, state.server, pki)

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
        "ServiceAccount",  # no serviceaccount controller: pods would wait for a "default" SA
        "TaintNodesByCondition",  # no node-lifecycle controller to remove the not-ready taint
        "StorageObjectInUseProtection",  # no pvc-protection controller to drop its finalizers
    ]
    apiserver = start(
        state,
        "kube-apiserver",
        [
            str(bin_dir / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
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
            "--endpoint-reconciler-type=none",
            "--enable-priority-and-fairness=false",
            "--max-requests-inflight=0",
            "--max-mutating-requests-inflight=0",
            "--profiling=true",  # /debug/pprof for admins: where the API server spends CPU
            f"--cert-dir={pki}",
            *dra_gates(state),
            *(["--runtime-config=resource.k8s.io/v1beta2=true"] if state.dra else []),
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

    common = [
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
            f"--config={scheduler_config(state, kubeconfig)}",
            f"--secure-port={ports.scheduler}",
            *dra_gates(state),
            *common,
        ],
    )
    controller_manager = start(
        state,
        "kube-controller-manager",
        [
            str(bin_dir / "kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            "--leader-elect=false",
            f"--secure-port={ports.controller_manager}",
            f"--controllers={','.join(state.kcm_controllers)}",
            # The volume controllers ('*' runs them) would otherwise create this directory
            # under /usr/libexec on the host.
            f"--flex-volume-plugin-dir={state_dir / 'flexvolume'}",
            "--kube-api-qps=1000",
            "--kube-api-burst=2000",
            *dra_gates(state),
            *common,
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
            "--manage-all-nodes=true",
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
    """Stop the recorded components in reverse start order; returns what was stopped."""
    stopped = []
    for component in reversed(state.components):
        if component.pid == os.getpid():
            continue  # the watchdog stopping everything else
        if process_start_time(component.pid) != component.start_time:
            continue  # already gone (or the pid now belongs to someone else)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(component.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and process_start_time(component.pid) is not None:
            _reap(component.pid)
            time.sleep(0.1)
        if process_start_time(component.pid) == component.start_time:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(component.pid, signal.SIGKILL)
            _reap(component.pid)
        stopped.append(component.name)
    return stopped


def _reap(pid: int) -> None:
    # When `up` runs in-process (tests), the components are our children: collect zombies.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


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
    p_up.add_argument("--nodes", type=int, default=0, help="create N kwok nodes kwok-node-<i>")
    p_up.add_argument("--owner-pid", type=int, help="stop the testbed when this process exits")
    p_watch = sub.add_parser("watch", help=argparse.SUPPRESS)
    p_watch.add_argument("dir", type=Path)
    p_watch.add_argument("--owner-pid", type=int, required=True)
    p_watch.add_argument("--owner-start", type=int, required=True)
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
            state = up(state_dir, bin_dir, args.dra, args.nodes, args.owner_pid, controllers)
            print(
                f"testbed up in {time.monotonic() - began:.1f} s: {state.server} "
                f"(dra={'on' if state.dra else 'off'}, kcm controllers: "
                f"{','.join(state.kcm_controllers)}); stop with: testbed/down {state_dir}",
                file=sys.stderr,
            )
            print(state.kubeconfig)
        elif args.command == "watch":
            watch(args.dir, args.owner_pid, args.owner_start)
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
