"""Injected faults on a pod/node run: after each, invariants hold and nothing is lost.

Each test runs a workload (gated pods, one device each, every pod satisfiable) while one
kind of fault is injected, then waits for the cluster to settle and checks:

- every pod is bound, and the invariant checker (operators/toolkit/check.py, with the
  opt-in ``bound-pod-claim-not-reserved`` rule) finds no violation: no device twice, every
  reservation points at a live pod, every allocated claim carries the finalizer, every
  bound pod's claim is allocated and reserved for it;
- nothing is lost: one claim per pod, and third-party writes made during the run survive.

Faults: the operator SIGKILLed at random points; two replicas racing for the Lease (the
leader killed mid-run); the API server restarted mid-run (its watches then expire: 410 and
relist, counted from the operator log); a claim changed by someone else while it is being
allocated; a pool's generation bumped while pods are being allocated.

Sizes: the CI run is short (50 pods on 10 nodes, 4 kills). ``DRALLOC_FAULTS=long`` runs the
full version (500 pods on 100 nodes, 20 kills and more of every other fault); expect about
15-30 minutes. Every run stops itself: each wait has a deadline and the module a timeout.
Figures are printed as ``[faults] ...`` lines (``pytest -s`` or ``-rP``).
"""

from __future__ import annotations

import functools
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest

from operators.toolkit.check import ALL_RULES

from .kube_helpers import Testbed, unique_name, wait_for
from .operator_fixtures import (
    GATE,
    OperatorProcess,
    Pool,
    claims_in,
    install_crds,
    make_pool,
    pod,
    slice_manifest,
    template,
)
from .reliability_helpers import (
    PodWriteHold,
    assert_invariants,
    json_patch,
    pod_writes_in_flight,
    restart_apiserver,
)


@dataclass(frozen=True)
class Size:
    nodes: int
    devices: int
    pods: int
    kills: int
    settle_s: float


LONG: Final = os.environ.get("DRALLOC_FAULTS", "short") == "long"
SIZE: Final = (
    Size(nodes=100, devices=6, pods=500, kills=20, settle_s=900)
    if LONG
    else Size(nodes=10, devices=6, pods=50, kills=4, settle_s=240)
)

pytestmark = [pytest.mark.timeout(3600 if LONG else 900), pytest.mark.api_modes]


# -- the workload -------------------------------------------------------------------------


@dataclass
class Run:
    """One workload in its own namespace and pool, with the operator replicas it started."""

    testbed: Testbed
    namespace: str
    pool: Pool
    tmp_path: Path
    lease: str = field(default_factory=lambda: unique_name("dralloc-faults"))
    replicas: list[OperatorProcess] = field(default_factory=list)
    pods: list[str] = field(default_factory=list)
    faults: int = 0
    restarts: int = 0
    restarted: set[int] = field(default_factory=set)
    """id() of replicas already replaced."""
    interrupted: list[int] = field(default_factory=list)
    """Per fault, the work it met: pod writes in flight (SIGKILL, API server restart), or
    bumps that met pods still gated (pool generations)."""
    supervisor: tuple[threading.Thread, threading.Event] | None = None

    def start_replica(self, identity: str = "", *extra: str) -> OperatorProcess:
        identity = identity or f"replica-{len(self.replicas)}"
        proc = OperatorProcess(
            self.testbed,
            self.tmp_path / f"{identity}.log",
            self.lease,
            webhook=False,  # pods carry the gate themselves: no webhook to lose when killed
            identity=identity,
            extra=["--log-format=json", *extra],
        ).start()
        self.replicas.append(proc)
        return proc

    def add_pods(self, count: int, node_labels: dict[str, str] | None = None) -> None:
        """Gated pods with a claim from the template; ``node_labels`` are required of their
        node on top of the pool's."""
        names = [f"p{len(self.pods) + i}" for i in range(count)]
        bodies = []
        for name in names:
            body = pod(
                self.namespace,
                name,
                self.pool,
                [{"name": "dev", "resourceClaimTemplateName": "one"}],
            )
            body["spec"]["schedulingGates"] = [{"name": GATE}]
            if node_labels:
                body["spec"]["nodeSelector"] = {**body["spec"]["nodeSelector"], **node_labels}
            bodies.append(body)
        for start in range(0, len(bodies), 50):
            self.testbed.apply(*bodies[start : start + 50])
        self.pods += names

    def bound(self) -> int:
        listing = self.testbed.get("pods", f"--namespace={self.namespace}")
        items = (listing or {}).get("items") or []
        return sum(1 for item in items if (item.get("spec") or {}).get("nodeName"))

    def gated(self) -> int:
        """Pods that still carry our gate: the operator's work not yet done."""
        listing = self.testbed.get("pods", f"--namespace={self.namespace}")
        return sum(
            1
            for item in (listing or {}).get("items") or []
            if any(
                g.get("name") == GATE for g in (item.get("spec") or {}).get("schedulingGates") or []
            )
        )

    def where_pods_are(self) -> str:
        """Which stage the unbound pods are stuck in, for a failure message."""
        listing = self.testbed.get("pods", f"--namespace={self.namespace}")
        gated = ungated = 0
        for item in (listing or {}).get("items") or []:
            spec = item.get("spec") or {}
            if spec.get("nodeName"):
                continue
            if any(g.get("name") == GATE for g in spec.get("schedulingGates") or []):
                gated += 1
            else:
                ungated += 1
        return f"unbound: {gated} still gated (operator), {ungated} ungated (scheduler)"

    def supervise(self) -> None:
        """Restart replicas that exit, as the Deployment's kubelet would (a replica that
        loses its Lease exits on purpose, to restart clean)."""

        def loop(stop: threading.Event) -> None:
            while not stop.wait(0.5):
                for index, proc in enumerate(list(self.replicas)):
                    if proc.process is not None and proc.process.poll() is not None:
                        if id(proc) in self.restarted:
                            continue
                        self.restarted.add(id(proc))
                        self.restarts += 1
                        self.start_replica(f"restart-{index}-{self.restarts}")

        self.supervisor = background(loop)

    def acting(self) -> OperatorProcess | None:
        """The live replica that runs the controllers, if any."""
        for proc in reversed(self.replicas):
            alive = proc.process is not None and proc.process.poll() is None
            if alive and "controllers starting" in proc.log():
                return proc
        return None

    def log(self) -> str:
        return "".join(p.log() for p in self.replicas)

    def settle_and_verify(self, scenario: str, started: float) -> None:
        def all_bound() -> bool:
            return self.bound() == len(self.pods)

        try:
            wait_for(
                f"all {len(self.pods)} pods bound", all_bound, timeout=SIZE.settle_s, interval=2
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; {self.where_pods_are()}") from None
        bound = self.bound()
        report = assert_invariants(self.testbed, [self.namespace], ALL_RULES)
        claims = claims_in(self.testbed, self.namespace)
        assert len(claims) == len(self.pods), f"{len(claims)} claims for {len(self.pods)} pods"
        log = self.log()
        relists = log.count("watch expired, relisting")
        conflicts = log.count("stale write; requeued")
        print(
            f"\n[faults] {scenario}: faults injected {self.faults}, pods {len(self.pods)}, "
            f"bound {bound}, violations {len(report.violations)}, "
            f"watch relists {relists}, write conflicts {conflicts}, "
            f"replica restarts {self.restarts}, "
            f"{time.monotonic() - started:.0f}s"
        )


@pytest.fixture
def run(testbed: Testbed, namespace: str, tmp_path: Path) -> Iterator[Run]:
    install_crds(testbed)
    pool = make_pool(testbed, nodes=SIZE.nodes, devices=SIZE.devices, prefix="faults")
    testbed.apply(template(namespace, "one", pool))
    state = Run(testbed, namespace, pool, tmp_path)
    yield state
    if state.supervisor is not None:
        state.supervisor[1].set()
        state.supervisor[0].join(timeout=10)
    for proc in state.replicas:
        proc.stop(signal.SIGKILL)
    if os.environ.get("DRALLOC_E2E_SHOW_LOGS"):
        print(state.log()[-20000:])


def wait_acting(proc: OperatorProcess, mark: int = 0, timeout: float = 60) -> None:
    """Until this replica holds the Lease and its controllers run."""
    proc.wait_until("controllers starting", timeout=timeout, after=mark)


def background(
    action: Callable[[threading.Event], None],
) -> tuple[threading.Thread, threading.Event]:
    stop = threading.Event()
    thread = threading.Thread(target=action, args=(stop,), daemon=True)
    thread.start()
    return thread, stop


# -- the faults ---------------------------------------------------------------------------


def test_operator_sigkilled_at_random_points(run: Run) -> None:
    """Each kill meets writes in flight: pods whose claims the operator allocated and
    reserved while its gate lift waits in admission (PodWriteHold), read from the API server
    just before the kill. The held write is let go right after: it lands or fails with the
    dead replica's connection, and the next replica must finish the job either way."""
    started = time.monotonic()
    rng = random.Random(os.environ.get("DRALLOC_FAULTS_SEED", "8"))
    batch = max(1, SIZE.pods // SIZE.kills)
    hold = PodWriteHold(run.testbed, run.namespace).install()
    try:
        current = run.start_replica()
        wait_acting(current)
        for kill in range(SIZE.kills):
            hold.engage()
            run.add_pods(min(batch, SIZE.pods - len(run.pods)) or 1)
            wait_for(
                f"kill {kill}: a pod write in flight (its claims allocated, its gate lift held)",
                lambda: pod_writes_in_flight(run.testbed, run.namespace, GATE),
                timeout=60,
                interval=0.2,
            )
            time.sleep(rng.uniform(0.0, 1.0))  # more of the batch may get that far, or not
            in_flight = pod_writes_in_flight(run.testbed, run.namespace, GATE)
            current.stop(signal.SIGKILL)
            hold.release()
            run.faults += 1
            run.interrupted.append(len(in_flight))
            current = run.start_replica(f"after-kill-{kill}")
            wait_acting(current)  # waits out the dead replica's Lease (4 s)
    finally:
        hold.uninstall()
    print(f"\n[faults] pod writes in flight at each kill: {run.interrupted}")
    assert all(run.interrupted), f"a kill met no write in flight: {run.interrupted}"
    if len(run.pods) < SIZE.pods:
        run.add_pods(SIZE.pods - len(run.pods))
    run.settle_and_verify("operator SIGKILLed", started)


def test_two_replicas_racing_and_the_leader_killed(run: Run) -> None:
    started = time.monotonic()
    first, second = run.start_replica("racer-a"), run.start_replica("racer-b")

    def leader() -> OperatorProcess | None:
        acting = [p for p in (first, second) if "controllers starting" in p.log()]
        return acting[0] if len(acting) == 1 else None

    chosen = wait_for("one of two racing replicas to lead", leader, timeout=60)
    standby = second if chosen is first else first
    assert "controllers starting" not in standby.log(), "both replicas act"
    run.add_pods(SIZE.pods // 2)
    time.sleep(1.0)
    chosen.stop(signal.SIGKILL)
    run.faults += 1
    run.add_pods(SIZE.pods - len(run.pods))
    wait_acting(standby, timeout=60)
    for round_ in range(SIZE.kills // 4):  # the long run keeps swapping leaders
        replacement = run.start_replica(f"racer-{round_}")
        time.sleep(random.uniform(0.5, 2.0))
        standby.stop(signal.SIGKILL)
        run.faults += 1
        wait_acting(replacement)
        standby = replacement
    run.settle_and_verify("two replicas racing", started)


def held_batch(run: Run, count: int) -> dict[str, str]:
    """Pods the operator holds (gated, unallocatable) until the pool's nodes get the label it
    returns: work surely in progress when a fault hits, which only a working watch (or a
    relist) lets the operator finish once the label comes."""
    later = {"e2e.dralloc.dev/ready": "yes"}
    run.add_pods(count, node_labels=later)
    return later


def release_batch(run: Run, labels: dict[str, str]) -> None:
    for node in run.pool.nodes:
        for key, value in labels.items():
            run.testbed.kubectl("label", "node", node, f"{key}={value}", "--overwrite")


def outage_seen(proc: OperatorProcess, mark: int) -> str:
    """What the replica acting at the outage logged about it after ``mark``: a relist (410
    Gone), or the loss of its Lease (it then exits and is restarted); "" if neither."""
    log = proc.log()[mark:]
    for line in ("watch expired, relisting", "lost leadership"):
        if line in log:
            return line
    return ""


def test_api_server_restarted_mid_run(run: Run) -> None:
    """The API server goes down with writes in flight (pods whose claims are allocated and
    whose gate lift waits in admission, PodWriteHold) and pods held for a node label that
    arrives after the restart: only a working watch (or a relist) lets the operator finish
    those."""
    started = time.monotonic()
    proc = run.start_replica()
    wait_acting(proc)
    run.supervise()
    restarts = 3 if LONG else 1
    per_round = SIZE.pods // (restarts + 1)
    hold = PodWriteHold(run.testbed, run.namespace).install()
    try:
        for _ in range(restarts):
            labels = held_batch(run, per_round // 2)
            hold.engage()
            run.add_pods(per_round - per_round // 2)
            in_flight = wait_for(
                "a pod write in flight (its claims allocated, its gate lift held)",
                lambda: pod_writes_in_flight(run.testbed, run.namespace, GATE),
                timeout=60,
                interval=0.2,
            )
            acting = run.acting()
            assert acting is not None, "no replica acting before the outage"
            mark = len(acting.log())
            outage = restart_apiserver(run.testbed)
            hold.release()
            run.faults += 1
            run.interrupted.append(len(in_flight))
            print(
                f"\n[faults] API server down and back in {outage:.1f}s with "
                f"{len(in_flight)} pod writes in flight"
            )
            # The replica acting at the outage (not just any replica) must have met it.
            seen = wait_for(
                "the acting replica to meet the outage",
                functools.partial(outage_seen, acting, mark),
                timeout=60,
            )
            print(f"[faults] the acting replica: {seen}")
            release_batch(run, labels)
    finally:
        hold.uninstall()
    run.add_pods(SIZE.pods - len(run.pods))
    run.settle_and_verify("API server restarted", started)


def test_claims_changed_by_someone_else_mid_allocation(run: Run) -> None:
    started = time.monotonic()
    proc = run.start_replica()
    wait_acting(proc)
    reported: dict[str, dict[str, Any]] = {}
    meddles = {"labels": 0, "status": 0}
    rng = random.Random(81)

    claims = run.testbed.api_mode.resource("resourceclaims")

    def meddle(stop: threading.Event) -> None:
        while not stop.is_set():
            for claim in claims_in(run.testbed, run.namespace):
                if stop.is_set() or rng.random() > 0.3:
                    continue
                name = claim["metadata"]["name"]
                allocation = (claim.get("status") or {}).get("allocation")
                if allocation is None:
                    # Bumps the resourceVersion under the allocator's feet: its write conflicts.
                    patch: dict[str, Any] = {
                        "metadata": {"labels": {"e2e.dralloc.dev/meddled": str(time.time_ns())}}
                    }
                    if json_patch(run.testbed, claims, name, run.namespace, patch):
                        meddles["labels"] += 1
                elif name not in reported:
                    # What a driver does once a claim is allocated: report device status.
                    result = allocation["devices"]["results"][0]
                    entry: dict[str, Any] = {
                        "driver": result["driver"],
                        "pool": result["pool"],
                        "device": result["device"],
                        "data": {"e2e": name},
                    }
                    patch = {"status": {"devices": [entry]}}
                    if json_patch(
                        run.testbed, claims, name, run.namespace, patch, "--subresource=status"
                    ):
                        reported[name] = entry
                        meddles["status"] += 1

    thread, stop = background(meddle)
    try:
        # The first batch cannot be placed until its nodes get a label: its claims exist
        # unallocated for a while, so the meddling surely hits some (allocation is otherwise
        # done within milliseconds of a claim's creation).
        later = {"e2e.dralloc.dev/ready": "yes"}
        run.add_pods(SIZE.pods // 5, node_labels=later)
        wait_for(
            "claims meddled with while unallocated",
            lambda: meddles["labels"] > 0,
            timeout=60,
            interval=0.5,
        )
        for node in run.pool.nodes:
            run.testbed.kubectl("label", "node", node, "e2e.dralloc.dev/ready=yes")
        for _ in range(4):
            run.add_pods(SIZE.pods // 5)
            time.sleep(1.0)
        wait_for(
            "all pods bound",
            lambda: run.bound() == len(run.pods),
            timeout=SIZE.settle_s,
            interval=2,
        )
    finally:
        stop.set()
        thread.join(timeout=60)
    run.faults = meddles["labels"] + meddles["status"]
    print(f"\n[faults] third-party writes: {meddles}")
    run.settle_and_verify("claims changed by someone else", started)
    assert meddles["labels"] > 0, "no claim was changed while unallocated; the fault did not happen"
    by_name = {c["metadata"]["name"]: c for c in claims_in(run.testbed, run.namespace)}
    for name, entry in reported.items():
        devices = (by_name[name].get("status") or {}).get("devices") or []
        # In-tree the API server answers null for fields it has no value for (conditions).
        stored = [{k: v for k, v in d.items() if v is not None} for d in devices]
        assert entry in stored, f"the driver status written on {name} was lost"


def test_pool_generation_bumped_mid_allocation(run: Run) -> None:
    started = time.monotonic()
    proc = run.start_replica()
    wait_acting(proc)
    generations = dict.fromkeys(run.pool.nodes, 1)
    rng = random.Random(82)

    def bump_once() -> None:
        node = rng.choice(run.pool.nodes)
        generations[node] += 1
        manifest = slice_manifest(run.pool.driver, node, SIZE.devices, mode=run.pool.mode)
        manifest["spec"]["pool"]["generation"] = generations[node]
        run.testbed.apply(manifest)
        run.faults += 1

    def bump_while_held(stop: threading.Event) -> None:
        while not stop.is_set():
            # Only bumps that meet pods still in the operator's hands count as faults.
            if run.gated() > 0:
                run.interrupted.append(1)
            bump_once()
            stop.wait(0.3)

    thread, stop = background(bump_while_held)
    try:
        labels = held_batch(run, SIZE.pods // 5)
        for _ in range(4):
            run.add_pods(SIZE.pods // 5)
            time.sleep(1.0)
    finally:
        stop.set()
        thread.join(timeout=60)
    assert run.interrupted, "no generation bump met a pod in progress; the fault did not happen"
    print(f"\n[faults] bumps while pods were in progress: {len(run.interrupted)}")
    release_batch(run, labels)
    run.settle_and_verify("pool generation bumped", started)


def test_watches_expire_and_relist(run: Run) -> None:
    """Without leader election the operator outlives an API server restart, so its watches
    resume from a resourceVersion the new server no longer has: 410 Gone, then a relist."""
    started = time.monotonic()
    proc = run.start_replica("no-lease", "--no-leader-election")
    wait_acting(proc)
    labels = held_batch(run, SIZE.pods // 2)
    time.sleep(0.5)
    assert run.bound() == 0, "the held batch was placed before the outage"
    mark = len(proc.log())
    restart_apiserver(run.testbed, down_for=1.0)
    run.faults += 1
    # A real 410 and relist, not only failed connections ("list/watch failed").
    wait_for(
        "a watch of the operator to expire (410 Gone) and relist",
        lambda: "watch expired, relisting" in proc.log()[mark:],
        timeout=60,
    )
    # The held pods are finished only if the relisted caches see the nodes' new label.
    release_batch(run, labels)
    run.add_pods(SIZE.pods - len(run.pods))
    run.settle_and_verify("watches expired", started)
    assert proc.process is not None and proc.process.poll() is None, "the operator died"
