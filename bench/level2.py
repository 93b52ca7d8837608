"""Level 2: end to end on the testbed, dralloc's operator against in-tree DRA.

Three systems (:data:`SYSTEMS`), each a parameter of the one harness: in-tree DRA
(kube-scheduler allocates), dralloc on its CRDs, and dralloc in in-tree mode
(``--api-group=resource.k8s.io``, all its controllers, on a control plane whose
kube-controller-manager runs without its two DRA controllers; kube-scheduler binds). A fourth
row is the floor: the same pods without a claim, on a control plane without DRA, which is what
any of them pays per pod before its DRA work.
Same API server build, same kwok nodes, same slices, classes and claim template (only the API
group differs: ``resource.dralloc.dev/v1`` for dralloc's CRDs, ``resource.k8s.io/v1`` for the
others), and pods created the way scheduler_perf creates them. For each system a fresh control
plane is started (``testbed/up``), so none inherits another's objects.

* Pods of the dralloc systems carry the scheduling gate (what the webhook would add; the
  operator runs without it so the webhook's TLS setup is not measured); on the CRDs they ask
  with the ``resource.dralloc.dev/claims`` annotation, otherwise with ``spec.resourceClaims``.
* Throughput is pods bound (``spec.nodeName`` set) per second, seen through a watch: fill
  workloads from the first measured pod's creation to the last binding; steady workloads keep
  10 pods in flight, delete each pod once bound, and count bindings over a fixed duration.
* API writes per pod come from the API server's ``apiserver_request_total`` (every mutating
  verb) over the measured window, minus the harness's own writes and Lease renewals.
* For dralloc the operator's RSS is read from ``/proc`` after the run, and its informer
  startup time from its "shared cache synced" log line after a restart on the full cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml

from bench import apiserver_profile
from bench.scenario import Scenario, Workload, expand, load_all
from operators.kube import PODS, KubeClient, Resource

REPO = Path(__file__).resolve().parent.parent
TESTBED = REPO / "testbed"
K8S_GROUP = ("resource.k8s.io", "v1")
DRALLOC_GROUP = ("resource.dralloc.dev", "v1")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)
CONCURRENCY = 16
STEADY_SECONDS = 20.0
PROFILED_WORKLOAD = "steady_half_500nodes"
"""The workload whose measured window also takes a CPU profile of the API server on every
system: a steady one, where dralloc is furthest from its target."""
FILL_TIMEOUT_S = 900.0
MUTATING = {"POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION"}
CLAIMS_ANNOTATION = "resource.dralloc.dev/claims"
GATE = "resource.dralloc.dev/allocation"


class Level2Unavailable(RuntimeError):
    """The testbed is not built or does not start; the message says why."""


@dataclass(frozen=True)
class System:
    """One way of doing DRA that level 2 measures, as the harness needs to know it."""

    name: str
    group: tuple[str, str]
    """API group and version of the DRA kinds the harness creates."""
    dra: bool
    """``testbed/up --dra``: kube-scheduler's DynamicResources plugin (and kcm's DRA
    controllers, unless ``kcm_dra`` is off)."""
    kcm_dra: bool = True
    """False: ``testbed/up --no-kcm-dra`` (dralloc's controllers replace kcm's DRA ones)."""
    operator: tuple[str, ...] | None = None
    """dralloc's flags on top of the harness's own; None: no operator runs."""
    claims: bool = True
    """Pods ask for the workload's claim. False: the same pods without one, the floor: what
    a pod costs this control plane before any DRA work (no DRA objects are created)."""

    @property
    def claims_in_spec(self) -> bool:
        """Pods ask with ``spec.resourceClaims`` (else dralloc's claims annotation)."""
        return self.group == K8S_GROUP

    @property
    def gated(self) -> bool:
        """Pods are created with dralloc's scheduling gate."""
        return self.operator is not None


IN_TREE = System("in-tree", K8S_GROUP, dra=True)
DRALLOC = System("dralloc", DRALLOC_GROUP, dra=False, operator=())
DRALLOC_IN_TREE = System(
    "dralloc in-tree mode",
    K8S_GROUP,
    dra=True,
    kcm_dra=False,
    operator=("--api-group=resource.k8s.io",),
)
NO_CLAIMS = System("pods without claims", K8S_GROUP, dra=False, claims=False)
SYSTEMS = (IN_TREE, DRALLOC, DRALLOC_IN_TREE, NO_CLAIMS)
"""In the order they run and are reported; in-tree DRA is the reference, and the pods
without claims are the floor under every system."""


def systems_named(names: Sequence[str]) -> tuple[System, ...]:
    """The systems with these names (all for none); an unknown name is an error."""
    if not names:
        return SYSTEMS
    known = {system.name: system for system in SYSTEMS}
    missing = [name for name in names if name not in known]
    if missing:
        raise SystemExit(
            f"unknown level-2 system(s): {', '.join(missing)} (known: {', '.join(known)})"
        )
    return tuple(system for system in SYSTEMS if system.name in names)


def kinds(group: tuple[str, str]) -> dict[str, Resource]:
    g, v = group
    return {
        "ResourceSlice": Resource(g, v, "resourceslices", "ResourceSlice", False),
        "DeviceClass": Resource(g, v, "deviceclasses", "DeviceClass", False),
        "ResourceClaim": Resource(g, v, "resourceclaims", "ResourceClaim", True),
        "ResourceClaimTemplate": Resource(
            g, v, "resourceclaimtemplates", "ResourceClaimTemplate", True
        ),
    }


@dataclass
class Level2Result:
    workload: str
    system: str  # a System's name
    pods: int = 0
    seconds: float = 0.0
    pods_per_second: float = 0.0
    writes_per_pod: float | None = None
    writes: dict[str, int] = field(default_factory=dict)
    # The API server's mean time per write in the window (ms; Lease renewals left out).
    write_ms: float | None = None
    # CPU time per bound pod in the window (ms), by process: the control plane's
    # components, the operator, and the harness (this process). On a machine of few
    # cores it shows who the pods' throughput is spent on.
    cpu_ms_per_pod: dict[str, float] = field(default_factory=dict)
    # The API server's CPU per bound pod by part of its work, from its profiler (see
    # bench.apiserver_profile); empty when not profiled, with the reason in the note.
    apiserver_ms_per_pod: dict[str, float] = field(default_factory=dict)
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "system": self.system,
            "pods": self.pods,
            "seconds": self.seconds,
            "podsPerSecond": self.pods_per_second,
            "writesPerPod": self.writes_per_pod,
            "writes": self.writes,
            "writeMs": self.write_ms,
            "cpuMsPerPod": self.cpu_ms_per_pod,
            "apiserverMsPerPod": self.apiserver_ms_per_pod,
            "note": self.note,
        }


# --- the control plane and the operator -----------------------------------------------------


def testbed_bin() -> Path:
    proc = subprocess.run(
        [str(TESTBED / "build"), "--check"], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise Level2Unavailable(
            (proc.stdout or proc.stderr).strip() or "testbed/build --check failed"
        )
    return Path(proc.stdout.strip().splitlines()[-1])


@dataclass
class Testbed:
    state_dir: Path
    kubeconfig: Path
    bin: Path

    @classmethod
    def up(cls, system: System, bin_dir: Path) -> Testbed:
        state = Path(tempfile.mkdtemp(prefix="dralloc-bench-testbed-"))
        args = [
            str(TESTBED / "up"),
            f"--dir={state}",
            f"--bin={bin_dir}",
            f"--owner-pid={os.getpid()}",
        ]
        if system.dra:
            args.append("--dra")
        if not system.kcm_dra:
            args.append("--no-kcm-dra")
        proc = subprocess.run(args, capture_output=True, text=True, check=False, timeout=300)
        if proc.returncode != 0:
            raise Level2Unavailable(f"testbed/up failed: {proc.stderr.strip()[-500:]}")
        return cls(state, Path(proc.stdout.strip().splitlines()[-1]), bin_dir)

    def down(self) -> None:
        subprocess.run(
            [str(TESTBED / "down"), str(self.state_dir), "--purge"],
            capture_output=True,
            check=False,
        )

    def kubectl(self, *args: str, input: str | None = None) -> str:
        proc = subprocess.run(
            [str(self.bin / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args[:3])}: {proc.stderr.strip()[-500:]}")
        return proc.stdout

    def create_nodes(self, count: int) -> None:
        proc = subprocess.run(
            [
                str(TESTBED / "nodes"),
                f"--kubeconfig={self.kubeconfig}",
                f"--bin={self.bin}",
                "--prefix=scheduler-perf-dra",
                "--label=node-with-dra=true",
                str(count),
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"testbed/nodes: {proc.stderr.strip()[-500:]}")

    def write_counts(self) -> dict[str, int]:
        """apiserver_request_total summed per "VERB group/resource[/subresource]", writes only;
        a refused write (a code other than 2xx) is counted apart under its code appended,
        so conflicts and races show up as what they are."""
        counts: dict[str, int] = {}
        pattern = re.compile(r'(\w+)="([^"]*)"')
        for line in self.kubectl("get", "--raw", "/metrics").splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels_text, _, value = line.rpartition("} ")
            labels = dict(pattern.findall(labels_text))
            verb = labels.get("verb", "")
            if verb not in MUTATING:
                continue
            resource = labels.get("resource", "")
            if labels.get("subresource"):
                resource += "/" + labels["subresource"]
            if labels.get("group"):
                resource = f"{labels['group']}/{resource}"
            key = f"{verb} {resource}"
            code = labels.get("code", "200")
            if not code.startswith("2"):
                key += f" {code}"
            counts[key] = counts.get(key, 0) + int(float(value))
        return counts

    def cpu_profile(self, seconds: int, out: Path) -> None:
        """A CPU profile of kube-apiserver over the next ``seconds`` (blocks that long)."""
        with out.open("wb") as sink:
            proc = subprocess.run(
                [
                    str(self.bin / "kubectl"),
                    f"--kubeconfig={self.kubeconfig}",
                    "get",
                    "--raw",
                    f"/debug/pprof/profile?seconds={seconds}",
                ],
                stdout=sink,
                stderr=subprocess.PIPE,
                check=False,
                timeout=seconds + 60,
            )
        if proc.returncode != 0:
            out.unlink(missing_ok=True)
            raise apiserver_profile.ProfileUnavailable(
                f"/debug/pprof/profile: {proc.stderr.decode(errors='replace').strip()[-300:]}"
            )

    def pids(self) -> dict[str, int]:
        """The control plane's processes by component name (testbed/up's state.json)."""
        raw = json.loads((self.state_dir / "state.json").read_text())
        return {c["name"]: int(c["pid"]) for c in raw.get("components", [])}

    def write_time(self) -> tuple[float, int]:
        """(seconds, requests): the API server's time on writes so far, Lease renewals
        left out (apiserver_request_duration_seconds); a window's difference over its
        requests is what one write costs the API server here."""
        total = 0.0
        requests = 0
        pattern = re.compile(r'(\w+)="([^"]*)"')
        for line in self.kubectl("get", "--raw", "/metrics").splitlines():
            name, brace, rest = line.partition("{")
            if not brace or name not in (
                "apiserver_request_duration_seconds_sum",
                "apiserver_request_duration_seconds_count",
            ):
                continue
            labels_text, _, value = rest.rpartition("} ")
            labels = dict(pattern.findall(labels_text))
            if labels.get("verb") not in MUTATING or labels.get("resource") == "leases":
                continue
            if name.endswith("_sum"):
                total += float(value)
            else:
                requests += int(float(value))
        return total, requests


@dataclass
class Operator:
    process: subprocess.Popen[bytes]
    log_path: Path
    identity: Identity | None = None

    @classmethod
    def start(
        cls,
        testbed: Testbed,
        *,
        webhook: bool = False,
        extra: Sequence[str] = (),
        identity: Identity | None = None,
    ) -> Operator:
        """The operator as a process of its own: with ``identity``, as installed (its
        account's token, its roles and the admission policies on its writes); else as the
        testbed's admin."""
        log_path = testbed.state_dir / "operator.log"
        kubeconfig = identity.kubeconfig if identity else testbed.kubeconfig
        lease = (
            (identity.installed.lease, identity.installed.namespace)
            if identity
            else ("dralloc-bench", "default")
        )
        args = [
            sys.executable, "-m", "operators",
            f"--kubeconfig={kubeconfig}",
            "--metrics-port=0", "--probe-port=0",
            f"--lease-name={lease[0]}", f"--lease-namespace={lease[1]}",
            "--log-format=json", "--log-level=INFO",
        ]  # fmt: skip
        if webhook:  # kopf serves it on loopback and writes its configuration
            args += [
                "--webhook-addr=127.0.0.1",
                "--webhook-port=0",
                "--webhook-managed=bench.dralloc.dev",
            ]
        else:
            args.append("--no-webhook")
        args += extra
        with log_path.open("ab") as log:
            env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
            process = subprocess.Popen(
                args, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env
            )
        operator = cls(process, log_path, identity)
        operator.wait_for("controllers starting", timeout=120)
        if webhook:
            operator.wait_for("Reconfiguring the mutating webhook", timeout=60)
        return operator

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_for(self, text: str, timeout: float, after: int = 0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"operator exited:\n{self.log()[-2000:]}")
            for line in self.log()[after:].splitlines():
                if text in line:
                    return line
            time.sleep(0.2)
        raise RuntimeError(
            f"operator did not log {text!r} within {timeout}s:\n{self.log()[-2000:]}"
        )

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


# --- objects ---------------------------------------------------------------------------------


def _fresh(obj: dict[str, Any], group: tuple[str, str]) -> dict[str, Any]:
    """The object as a client would create it: no uid or resourceVersion, the system's group."""
    meta = {k: v for k, v in obj["metadata"].items() if k in ("name", "namespace", "labels")}
    out = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    out["metadata"] = meta
    out["apiVersion"] = f"{group[0]}/{group[1]}"
    return out


def pod_manifest(namespace: str, name: str, system: System) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10.1"}]},
    }
    if not system.claims:
        return pod
    entry = {"name": "resource", "resourceClaimTemplateName": "test-claim-template"}
    if system.claims_in_spec:
        pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "resource"}]}
        pod["spec"]["resourceClaims"] = [entry]
    else:
        pod["metadata"]["annotations"] = {CLAIMS_ANNOTATION: json.dumps([entry])}
    if system.gated:
        pod["spec"]["schedulingGates"] = [{"name": GATE}]
    return pod


async def _bounded(tasks: Iterable[Any], limit: int = CONCURRENCY) -> None:
    semaphore = asyncio.Semaphore(limit)

    async def one(coro: Any) -> None:
        async with semaphore:
            await coro

    await asyncio.gather(*(one(t) for t in tasks))


class Harness:
    """Populates one control plane with a scenario and measures pods bound per second."""

    def __init__(self, client: KubeClient, scenario: Scenario, system: System) -> None:
        self.client = client
        self.scenario = scenario
        self.system = system
        self.group = system.group
        self.kinds = kinds(self.group)
        self.bound_at: dict[str, float] = {}
        self.harness_writes = 0

    async def populate(self) -> None:
        for ns in ("init", "test"):
            await self.client.create(
                NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            )
        if not self.system.claims:
            return  # the floor: pods alone, and nothing DRA for anything to watch
        await _bounded(
            self.client.create(self.kinds["DeviceClass"], _fresh(obj, self.group))
            for obj in self.scenario.classes
        )
        await _bounded(
            self.client.create(self.kinds["ResourceSlice"], _fresh(obj, self.group))
            for obj in self.scenario.slices
        )
        spec = self.scenario.workload.claim_spec
        for ns in ("init", "test"):
            template = {
                "apiVersion": f"{self.group[0]}/{self.group[1]}",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "test-claim-template", "namespace": ns},
                "spec": {"spec": spec},
            }
            await self.client.create(self.kinds["ResourceClaimTemplate"], template, namespace=ns)
        await _bounded(self._preallocate(obj) for obj in self.scenario.preallocated)

    async def _preallocate(self, obj: dict[str, Any]) -> None:
        """scheduler_perf's allocResourceClaims: create the claim, then write its allocation."""
        created = await self.client.create(
            self.kinds["ResourceClaim"], _fresh(obj, self.group), namespace="init"
        )
        created["status"] = {"allocation": obj["status"]["allocation"]}
        await self.client.replace_status(self.kinds["ResourceClaim"], created)

    async def create_pod(self, namespace: str, name: str) -> None:
        await self.client.create(
            PODS, pod_manifest(namespace, name, self.system), namespace=namespace
        )
        self.harness_writes += 1

    async def delete_pod(self, namespace: str, name: str) -> None:
        with contextlib.suppress(Exception):
            await self.client.request(
                "DELETE",
                PODS.path(namespace, name),
                body={"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
            )
            self.harness_writes += 1

    async def watch_bindings(self, namespace: str, on_bound: Any = None) -> None:
        _, version = await self.client.list(PODS, namespace)
        while True:
            async for event in self.client.watch(
                PODS, version, namespace=namespace, timeout_seconds=600
            ):
                obj = event.object
                version = (obj.get("metadata") or {}).get("resourceVersion", version)
                name = (obj.get("metadata") or {}).get("name", "")
                bound = event.type in ("ADDED", "MODIFIED") and (obj.get("spec") or {}).get(
                    "nodeName"
                )
                if bound and name not in self.bound_at:
                    self.bound_at[name] = time.monotonic()
                    if on_bound is not None:
                        on_bound(name)

    async def fill(self, namespace: str, count: int) -> tuple[int, float]:
        """Create ``count`` pods at once; wait until all are bound. (pods bound, seconds)."""
        self.bound_at.clear()
        done = asyncio.Event()

        def check(_: str) -> None:
            if len(self.bound_at) >= count:
                done.set()

        watcher = asyncio.create_task(self.watch_bindings(namespace, check))
        await asyncio.sleep(0.2)
        started = time.monotonic()
        await _bounded(self.create_pod(namespace, f"test-dra-{i}") for i in range(count))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), FILL_TIMEOUT_S)
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watcher
        if not self.bound_at:
            return 0, time.monotonic() - started
        return len(self.bound_at), max(self.bound_at.values()) - started

    async def steady(self, seconds: float, in_flight: int = 10) -> tuple[int, float]:
        """Keep ``in_flight`` pods; delete each once bound and create the next."""
        self.bound_at.clear()
        counter = iter(range(10**9))
        pending: set[asyncio.Task[None]] = set()
        deadline = 0.0

        def replace(name: str) -> None:
            task = asyncio.create_task(self._replace(name, next(counter), deadline))
            pending.add(task)
            task.add_done_callback(pending.discard)

        watcher = asyncio.create_task(self.watch_bindings("test", replace))
        await asyncio.sleep(0.2)
        started = time.monotonic()
        deadline = started + seconds
        await _bounded(
            self.create_pod("test", f"test-dra-{next(counter)}") for _ in range(in_flight)
        )
        await asyncio.sleep(max(0.0, deadline - time.monotonic()))
        bound = sum(1 for t in self.bound_at.values() if t <= deadline)
        watcher.cancel()
        for task in list(pending):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watcher
        return bound, seconds

    async def _replace(self, name: str, index: int, deadline: float) -> None:
        await self.delete_pod("test", name)
        if time.monotonic() < deadline:
            await self.create_pod("test", f"test-dra-{index}")


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """User plus system CPU seconds each process has used so far (absent: exited). The
    harness is this process (its threads included)."""
    out: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for name, pid in pids.items():
        if pid == os.getpid():
            usage = os.times()
            out[name] = usage.user + usage.system
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        # Fields after the command name (which may hold spaces): utime and stime are 14, 15.
        fields = stat.rsplit(")", 1)[1].split()
        out[name] = (int(fields[11]) + int(fields[12])) / tick
    return out


async def populate(testbed: Testbed, scenario: Scenario, system: System) -> None:
    """Namespaces, classes, slices, templates and preallocated claims, as the testbed's admin."""
    client = await KubeClient.connect(str(testbed.kubeconfig), user_agent="dralloc-bench")
    try:
        await Harness(client, scenario, system).populate()
    finally:
        await client.close()


async def measure(
    testbed: Testbed,
    scenario: Scenario,
    system: System,
    operator_pid: int | None = None,
    profile_to: Path | None = None,
) -> Level2Result:
    workload = scenario.workload
    pids = {**testbed.pids(), "harness": os.getpid()}
    if operator_pid is not None:
        pids["operator"] = operator_pid
    client = await KubeClient.connect(str(testbed.kubeconfig), user_agent="dralloc-bench")
    try:
        harness = Harness(client, scenario, system)
        if workload.mode == "fill" and workload.init_pods:
            placed, _ = await harness.fill("init", workload.init_pods)
            if placed < workload.init_pods:
                return Level2Result(
                    workload.name,
                    system.name,
                    note=f"only {placed}/{workload.init_pods} init pods bound",
                )
        before = await asyncio.to_thread(testbed.write_counts)
        time_before = await asyncio.to_thread(testbed.write_time)
        cpu_before = cpu_seconds(pids)
        harness.harness_writes = 0
        profiling = (
            asyncio.create_task(
                asyncio.to_thread(
                    testbed.cpu_profile, apiserver_profile.PROFILE_SECONDS, profile_to
                )
            )
            if profile_to is not None
            else None
        )
        if workload.mode == "fill":
            pods, seconds = await harness.fill("test", workload.measure_pods)
            note = (
                ""
                if pods == workload.measure_pods
                else f"{workload.measure_pods - pods} pods not bound"
            )
        else:
            pods, seconds = await harness.steady(STEADY_SECONDS, workload.in_flight)
            note = f"steady state, {STEADY_SECONDS:.0f}s"
        cpu_after = cpu_seconds(pids)
        after = await asyncio.to_thread(testbed.write_counts)
        time_after = await asyncio.to_thread(testbed.write_time)
        if profiling is not None:
            with contextlib.suppress(
                apiserver_profile.ProfileUnavailable, subprocess.SubprocessError, OSError
            ):
                await profiling  # a missing profile is reported where it is read
    finally:
        await client.close()
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    delta = {k: v for k, v in sorted(delta.items()) if v > 0}
    leases = sum(v for k, v in delta.items() if "coordination.k8s.io/leases" in k)
    control_plane = sum(delta.values()) - leases - harness.harness_writes
    write_seconds = time_after[0] - time_before[0]
    write_requests = time_after[1] - time_before[1]
    return Level2Result(
        workload=workload.name,
        system=system.name,
        pods=pods,
        seconds=seconds,
        pods_per_second=pods / seconds if seconds > 0 else 0.0,
        writes_per_pod=control_plane / pods if pods else None,
        writes=delta,
        write_ms=1000 * write_seconds / write_requests if write_requests else None,
        cpu_ms_per_pod={
            name: 1000 * (cpu_after[name] - cpu_before[name]) / pods
            for name in cpu_after
            if name in cpu_before and pods
        },
        note=note,
    )


def gpu_cluster(nodes: int, devices: int, driver: str = "gpu.example.com") -> list[dict[str, Any]]:
    """DeviceClass ``gpu`` (every device of ``driver``) and a slice of ``devices`` GPUs for
    each of ``nodes`` nodes ``scheduler-perf-dra-N`` (``testbed/nodes``' names), on
    dralloc's CRDs: the cluster of the benchmarks that run the operator on a testbed of
    their own (bench.responsiveness, bench.gang_arrival)."""
    group = "/".join(DRALLOC_GROUP)
    out: list[dict[str, Any]] = [
        {
            "apiVersion": group,
            "kind": "DeviceClass",
            "metadata": {"name": "gpu"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        }
    ]
    for i in range(nodes):
        node = f"scheduler-perf-dra-{i}"
        out.append(
            {
                "apiVersion": group,
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-gpu"},
                "spec": {
                    "driver": driver,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": f"gpu-{d}"} for d in range(devices)],
                },
            }
        )
    return out


@dataclass(frozen=True)
class Identity:
    """The operator's identity as the manifests install it."""

    kubeconfig: Path
    """Authenticates with a token of the operator's ServiceAccount."""
    installed: Installed
    """What was applied: the account, its namespace and the Lease it holds."""


INSTALLED_KINDS = frozenset(
    {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ConfigMap",
    }
)
"""What of the manifests gives the operator its identity and bounds it: the account, its
roles, the admission policies on what it and others write (CEL on each pod and claim
write), and their parameters. Not the Deployment (the bench runs the process itself) nor
the webhooks."""


@dataclass(frozen=True)
class Installed:
    """What ``install_identity`` applies, and whom it makes the operator."""

    objects: list[dict[str, Any]]
    account: str
    namespace: str
    """The operator's namespace (its Lease may only be there)."""
    lease: str
    """The Lease the Deployment's operator holds (the fencing policy reads it)."""


def installed_parts(rendered: Iterable[dict[str, Any] | None], where: str) -> Installed:
    """From the rendered manifests: the objects of :data:`INSTALLED_KINDS`, and the account,
    namespace and Lease of the one Deployment's operator."""
    rendered_objects = [o for o in rendered if o]
    deployments = [o for o in rendered_objects if o["kind"] == "Deployment"]
    if len(deployments) != 1:
        raise Level2Unavailable(f"{where} renders {len(deployments)} Deployments, not one")
    pod = deployments[0]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for c in pod["containers"] for e in c.get("env") or ()}
    return Installed(
        objects=[o for o in rendered_objects if o["kind"] in INSTALLED_KINDS],
        account=pod["serviceAccountName"],
        namespace=deployments[0]["metadata"]["namespace"],
        lease=env.get("DRALLOC_LEASE_NAME") or "dralloc-operator",
    )


def install_identity(testbed: Testbed, system: System) -> Identity:
    """Apply the operator's account, roles and policies as ``kubectl apply -k`` would, for
    the system's API mode, and write a kubeconfig with a token of the account."""
    where = REPO / "manifests" / ("overlays/in-tree" if system.claims_in_spec else "")
    parts = installed_parts(
        yaml.safe_load_all(testbed.kubectl("kustomize", str(where))), str(where)
    )
    listed = {"apiVersion": "v1", "kind": "List", "items": parts.objects}
    testbed.kubectl("apply", "-f", "-", input=json.dumps(listed))
    token = testbed.kubectl(
        "create", "token", parts.account, f"--namespace={parts.namespace}", "--duration=24h"
    ).strip()
    admin = yaml.safe_load(testbed.kubeconfig.read_text())
    cluster = admin["clusters"][0]["name"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": admin["clusters"],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": cluster, "user": "operator"}}],
        "current-context": "operator",
    }
    path = testbed.state_dir / "operator.kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return Identity(path, parts)


def install_crds(testbed: Testbed) -> None:
    files = sorted(p for p in (REPO / "crds").glob("*.yaml") if p.name != "kustomization.yaml")
    if not files:
        raise Level2Unavailable("crds/ holds no CustomResourceDefinitions (make crds)")
    for path in files:
        testbed.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    deadline = time.monotonic() + 60
    while True:  # kubectl wait gives up at once on a CRD whose status has no conditions yet
        try:
            testbed.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
            return
        except RuntimeError as error:
            if "accessor error" not in str(error) or time.monotonic() >= deadline:
                raise
        time.sleep(0.2)


def start_profiler(pid: int, out: Path) -> subprocess.Popen[bytes] | None:
    """py-spy sampling the operator (collapsed stacks), when py-spy is installed."""
    pyspy = Path(sys.executable).parent / "py-spy"
    if not pyspy.exists():
        return None
    args = [
        str(pyspy),
        "record",
        "--pid",
        str(pid),
        "--format",
        "raw",
        "--rate",
        "50",
        "-o",
        str(out),
    ]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop_profiler(profiler: subprocess.Popen[bytes] | None) -> None:
    if profiler is None:
        return
    profiler.send_signal(signal.SIGINT)
    try:
        profiler.wait(timeout=60)
    except subprocess.TimeoutExpired:
        profiler.kill()
        profiler.wait(timeout=10)


def summarize_stacks(path: Path, top: int = 15) -> str:
    """Share of samples per function: own time (leaf frame) and with callees (inclusive)."""
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    if not path.exists():
        return ""
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = [
            f.split(" (")[0] + " (" + f.split(" (")[-1] if " (" in f else f
            for f in stack.split(";")
        ]
        frames = [re.sub(r":\d+\)$", ")", f) for f in frames]
        own[frames[-1]] = own.get(frames[-1], 0) + count
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + count
    if not total:
        return ""
    root = str(REPO) + "/"
    lines = [f"{total} samples; own time (leaf frames):"]
    for frame, count in sorted(own.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {100 * count / total:5.1f}%  {frame.replace(root, '')}")
    lines.append("with callees (dralloc code only):")
    ours = [(f, c) for f, c in inclusive.items() if "operators/" in f and "site-packages" not in f]
    for frame, count in sorted(ours, key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {100 * count / total:5.1f}%  {frame.replace(root, '')}")
    return "\n".join(lines)


def run_one(
    bin_dir: Path,
    workload: Workload,
    system: System,
    log: TextIO,
    profile: bool = False,
    keep_profiles: Path | None = None,
    as_installed: bool = True,
) -> tuple[Level2Result, dict[str, Any]]:
    """One workload on one system, on a fresh control plane. Returns the result and footprint.
    With ``keep_profiles``, the raw profiles taken are copied there before the testbed goes.
    ``as_installed``: the operator runs with its account's token, roles and the admission
    policies on its writes (else as the testbed's admin, with a client certificate)."""
    scenario = expand(workload)
    testbed = Testbed.up(system, bin_dir=bin_dir)
    operator: Operator | None = None
    footprint: dict[str, Any] = {}
    try:
        testbed.create_nodes(workload.nodes)
        profiler = None
        if system.group == DRALLOC_GROUP:
            install_crds(testbed)
        # The cluster's objects, and the claims a steady workload finds allocated, are there
        # before the operator: written as the testbed's admin (scheduler_perf's way) before
        # the admission policies of an installed operator would refuse them.
        asyncio.run(populate(testbed, scenario, system))
        if system.operator is not None:
            identity = install_identity(testbed, system) if as_installed else None
            operator = Operator.start(testbed, extra=system.operator, identity=identity)
            if profile:
                profiler = start_profiler(
                    operator.process.pid, testbed.state_dir / "operator.stacks"
                )
        profile_to = (
            testbed.state_dir / "apiserver.pprof" if workload.key == PROFILED_WORKLOAD else None
        )
        try:
            result = asyncio.run(
                measure(
                    testbed,
                    scenario,
                    system,
                    operator.process.pid if operator else None,
                    profile_to,
                )
            )
        finally:
            stop_profiler(profiler)
        if profile_to is not None:
            result.apiserver_ms_per_pod, why = _apiserver_parts(profile_to, result)
            if why:
                result.note = "; ".join(filter(None, (result.note, why)))
        if profiler is not None:
            footprint["operatorProfile"] = summarize_stacks(testbed.state_dir / "operator.stacks")
        if operator is not None:
            footprint.update(operator_footprint(operator, testbed, workload, system))
        if keep_profiles is not None:
            keep(testbed.state_dir, keep_profiles, f"{workload.key}-{slug(system.name)}")
        return result, footprint
    finally:
        if operator is not None:
            operator.stop()
        testbed.down()


KEPT_PROFILES = ("apiserver.pprof", "operator.stacks")


def slug(name: str) -> str:
    """A system's name as part of a file name."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def keep(state_dir: Path, into: Path, stem: str) -> None:
    """Copy the raw profiles a run left in its testbed's directory, as ``stem.<name>``."""
    into.mkdir(parents=True, exist_ok=True)
    for name in KEPT_PROFILES:
        if (state_dir / name).exists():
            shutil.copyfile(state_dir / name, into / f"{stem}.{name}")


def _apiserver_parts(path: Path, result: Level2Result) -> tuple[dict[str, float], str]:
    """The profile's parts per bound pod, or why there are none."""
    if not path.exists():
        return {}, "no API server profile (the profiler did not answer)"
    try:
        return apiserver_profile.summarize(path).per_pod(result.pods_per_second), ""
    except apiserver_profile.ProfileUnavailable as error:
        return {}, f"no API server profile: {error}"


def operator_footprint(
    operator: Operator, testbed: Testbed, workload: Workload, system: System
) -> dict[str, Any]:
    """RSS after the run, then informer startup time after a restart on the same cluster."""
    pods = testbed.kubectl("get", "pods", "-A", "--no-headers").count("\n")
    rss = operator.rss_mib()
    operator.stop()
    restarted = Operator.start(testbed, extra=system.operator or (), identity=operator.identity)
    try:
        line = restarted.wait_for("shared cache synced", timeout=120)
        seconds = json.loads(line).get("seconds")
    finally:
        restarted.stop()
    return {
        "workload": workload.name,
        "nodes": workload.nodes,
        "devices": workload.devices,
        "podsInCluster": pods,
        "operatorRssMiB": round(rss, 1),
        "informerSyncSeconds": seconds,
    }


def level2_workloads(only: Sequence[str]) -> list[Workload]:
    chosen = [w for w in load_all("level2") if not only or w.key in only or w.name in only]
    return sorted(chosen, key=lambda w: w.nodes * w.devices_per_node)


def run_into(
    results: dict[str, Any],
    log: TextIO,
    only: Sequence[str] = (),
    systems: Sequence[System] = SYSTEMS,
    keep_profiles: Path | None = None,
    as_installed: bool = True,
) -> None:
    results["operatorIdentity"] = "installed" if as_installed else "admin"
    try:
        bin_dir = testbed_bin()
    except Level2Unavailable as error:
        results.setdefault("skipped", {})["level 2"] = str(error)
        return
    rows: list[dict[str, Any]] = []
    for workload in level2_workloads(only):
        for system in systems:
            print(f"level 2: {workload.name} on {system.name}", file=log, flush=True)
            started = time.monotonic()
            # The footprint is the CRD mode's (the figures reported so far); the operator's
            # profile is the in-tree mode's, the mode real clusters run.
            mine = system == DRALLOC
            try:
                profile = system == DRALLOC_IN_TREE and workload.key == "template_2000pods_100nodes"
                result, footprint = run_one(
                    bin_dir, workload, system, log, profile, keep_profiles, as_installed
                )
            except Exception as error:  # one failing system must not lose the others' numbers
                result, footprint = (
                    Level2Result(workload.name, system.name, note=f"failed: {error}"[:300]),
                    {},
                )
            rows.append(result.to_json())
            if "operatorProfile" in footprint:
                results["operatorProfile"] = footprint.pop("operatorProfile")
            if mine and footprint and workload.key == "template_5000pods_500nodes":
                results["footprint"] = footprint
            print(
                f"  {result.pods} pods, {result.pods_per_second:.1f} pods/s, writes/pod "
                f"{result.writes_per_pod}, {result.note} ({time.monotonic() - started:.0f}s)",
                file=log,
                flush=True,
            )
    results["level2"] = rows
