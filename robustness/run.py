"""One run: set up, record, drive traffic and faults, settle, check, report.

The order matters: the recorder watches before the first object is made, and after the
traffic stops the run waits for the cluster to settle (every pod bound or explained, nothing
held for a gone pod) and then for the recorder to have seen a write made after that (a
marker object of each kind), so the history it checks is complete.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import random
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp

from operators.kube import (
    DEVICE_QUOTAS,
    EVENTS,
    POD_GROUPS,
    PODS,
    RESOURCE_CLAIMS,
    ApiError,
    KubeClient,
)
from robustness.audit import trails
from robustness.checker import (
    DEVICE_HELD_TWICE,
    POD_BOUND_WITHOUT_DEVICES,
    RULES,
    Report,
    Violation,
    check,
    unsatisfied,
    warned_through_gangs,
)
from robustness.cluster import (
    REPO_ROOT,
    Cluster,
    Mode,
    Operator,
    claim_allocation_policy,
    claim_allocation_policy_removal,
    wait_policy_in_force,
)
from robustness.faults import FAULTS, Faults, Fired, schedule
from robustness.fencing import Replicas
from robustness.gates import ClosedWebhook, PolicyGate, wait_gating
from robustness.history import (
    ClaimFacts,
    DeviceId,
    Event,
    HeldDevice,
    History,
    Kind,
    PodFacts,
    PodGroupFacts,
    QuotaFacts,
    claim_facts,
    pod_facts,
)
from robustness.proxy import Proxy, api_server_address, proxied_kubeconfig
from robustness.recorder import Recorder
from robustness.traffic import GATED_LABEL, Layout, Traffic

LEASE_NAMESPACE: Final = "dralloc-system"
SAFE_FAULTS: Final = (
    "operator-kill",
    "apiserver-restart",
    "compact-and-restart",
    "etcd-compact",
    "proxy-cut",
    "lose-answers",
    "lease-lost",
)
"""The faults of the short run in CI."""


@dataclass(frozen=True)
class Options:
    mode: Mode
    seed: int
    duration_s: float = 60.0
    rate: float = 4.0
    """Traffic operations per second, on average."""
    faults: tuple[str, ...] = SAFE_FAULTS
    fault_count: int = 4
    nodes: int = 6
    devices_per_node: int = 4
    quota_devices: int = 2
    scheduler_pods: bool = False
    gate: str = "self"
    """How pods get dralloc's gate (:mod:`robustness.gates`): they carry it, the operator's
    webhook fail-open (``webhook``) or as shipped (``webhook-closed``), or the shipped
    MutatingAdmissionPolicy (``policy``)."""
    policy: bool = False
    """The claim-allocation admission policy guards the run's namespaces (only the operator
    may allocate), as shipped; with ``scheduler_pods`` the operator serves every one of them,
    kube-scheduler's pods too. Without it kube-scheduler is a second allocator of the claims
    it deallocates (its PostFilter does when its view has no node for the pod, e.g. a node
    it has not seen yet) while dralloc allocates them again: a double the policy is there to
    refuse."""
    fencing: bool = False
    """Operators use tokens bound to pods of their own (as replicas do), and the shipped
    fencing policy, bound to the run's Lease, lets only its holder make claims and allocate
    (:mod:`robustness.fencing`)."""
    pod_groups: bool = False
    """Gangs named by Workload API PodGroups too (the testbed must serve them:
    ``testbed/up --workload-api``); the recorder watches PodGroups."""
    extended_pods: bool = True
    """In-tree: pods asking for a DRA extended resource. With a webhook gate, in the namespaces
    dralloc serves (the webhook turns them into claims pods); with ``scheduler_pods``, also in
    kube-scheduler's namespace (it allocates their claims; with ``policy`` it may not, and
    they wait)."""
    preemption: bool = False
    """The operators preempt for devices (``--preemption``), and the traffic makes pods of a
    high priority (some with ``preemptionPolicy: Never``) beside the others' 0."""
    settle_s: float = 180.0

    @property
    def webhook(self) -> bool:
        """The operators' webhook gives the gate (and translates extended resources)."""
        return self.gate in ("webhook", "webhook-closed")


@dataclass
class Result:
    options: Options
    report: Report
    traffic: Counter[str]
    failed: Counter[str]
    fired: list[Fired]
    pods_bound: int
    bound_per_s: float
    latency_p50_s: float
    latency_p99_s: float
    relists: int
    settled_in_s: float | None
    slowest: list[tuple[float, str, str]]
    """The three pods slowest to be bound: seconds, pod, its conditions before."""
    stand_downs: dict[str, int]
    """How often operators stopped allocating, by why: ``refused`` (the API server's fencing
    policy, second operators above all) and ``records`` (another allocator's records on pods:
    the run's own operators should never, with ``fencing``)."""
    operator_relists: int
    """Relists of the operators' caches (a watch expired with 410, or failed too long to
    resume), from their logs."""
    created_ungated: list[str]
    """Claims pods of the gated namespaces whose first recorded state had no gate: admission
    let them through while no operator served (only the fail-open webhook may)."""
    history: History = field(repr=False)
    preempted: int = 0
    """Pods dralloc marked as preemption victims."""
    trails: dict[str, list[str]] = field(default_factory=dict)
    """Under a violation (its text): the last writes to the objects it names, from the API
    server's audit log (who allocated, freed, bound or deleted them)."""

    @property
    def ok(self) -> bool:
        return self.report.ok

    def to_json(self) -> dict[str, Any]:
        options = asdict(self.options)
        options["mode"] = self.options.mode.name
        return {
            "options": options,
            "traffic": dict(self.traffic),
            "failed_requests": dict(self.failed),
            "faults": [asdict(f) for f in self.fired],
            "violations_by_rule": self.report.by_rule(),
            "longest_broken_s": self.report.longest(),
            "violations": [str(v) for v in self.report.violations],
            "events": self.report.events,
            "recorder_relists": self.relists,
            "pods_bound": self.pods_bound,
            "bound_per_s": self.bound_per_s,
            "latency_p50_s": self.latency_p50_s,
            "latency_p99_s": self.latency_p99_s,
            "settled_in_s": self.settled_in_s,
            "slowest": self.slowest,
            "created_ungated": self.created_ungated,
            "stand_downs": self.stand_downs,
            "preempted": self.preempted,
            "operator_relists": self.operator_relists,
            "trails": self.trails,
        }

    def summary(self) -> str:
        """What a reader needs to reproduce and judge the run, in a few lines."""
        o = self.options
        lines = [
            f"mode={o.mode.name} seed={o.seed} duration={o.duration_s:.0f}s "
            f"faults={','.join(o.faults) or 'none'} gate={o.gate} "
            f"scheduler_pods={o.scheduler_pods} policy={o.policy} extended_pods={o.extended_pods} "
            f"pod_groups={o.pod_groups} fencing={o.fencing} preemption={o.preemption}",
            f"traffic: {sum(self.traffic.values())} operations "
            f"({', '.join(f'{k} {v}' for k, v in sorted(self.traffic.items()))}); "
            f"{sum(self.failed.values())} refused or failed"
            + (
                f" ({', '.join(f'{k} {v}' for k, v in self.failed.most_common(4))})"
                if self.failed
                else ""
            ),
            "faults: "
            + ("; ".join(f"{f.at:.1f}s {f.name} ({f.what})" for f in self.fired) or "none"),
            f"history: {self.report.events} events, {self.relists} recorder relists, "
            f"{self.operator_relists} operator relists; "
            f"settled in {self.settled_in_s:.1f} s"
            if self.settled_in_s is not None
            else f"history: {self.report.events} events; NOT settled in {o.settle_s:.0f} s",
            f"pods bound: {self.pods_bound} ({self.bound_per_s:.2f}/s), allocation latency "
            f"p50 {self.latency_p50_s:.2f} s, p99 {self.latency_p99_s:.2f} s; "
            f"{len(self.created_ungated)} claims pods created without the gate"
            + (f" ({', '.join(self.created_ungated[:3])})" if self.created_ungated else "")
            + f"; operators stopped: {self.stand_downs.get('refused', 0)} refused by fencing, "
            f"{self.stand_downs.get('records', 0)} for another allocator's records"
            + (f"; {self.preempted} pods preempted" if o.preemption else ""),
            "slowest: "
            + "; ".join(
                f"{pod} {t:.1f} s ({why or 'no condition'})" for t, pod, why in self.slowest
            ),
            "violations: " + ", ".join(f"{rule} {n}" for rule, n in self.report.by_rule().items()),
        ]
        for violation in self.report.violations:
            lines.append(f"  {violation}")
            lines.extend(f"      {write}" for write in self.trails.get(str(violation), ()))
        return "\n".join(lines)


def install(cluster: Cluster) -> None:
    """The CRDs the mode needs and the namespace of the operators' Lease."""
    crds = sorted((REPO_ROOT / "crds").glob("*.yaml"))
    crds = [p for p in crds if p.name != "kustomization.yaml"]
    if cluster.mode.in_tree:
        crds = [p for p in crds if p.name.endswith("_devicequotas.yaml")]
    for path in crds:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    names = [f"crd/{p.stem.split('_', 1)[1]}.resource.dralloc.dev" for p in crds]
    cluster.wait_established(*names)
    cluster.kubectl("create", "namespace", LEASE_NAMESPACE, check=False)


class Run:
    def __init__(self, cluster: Cluster, options: Options, work_dir: Path) -> None:
        self.cluster = cluster
        self.options = options
        self.work_dir = work_dir
        self.rng = random.Random(options.seed)
        self.layout = Layout(
            prefix=f"rb{options.seed % 100000}-{int(time.time()) % 100000}",
            mode=options.mode,
            nodes=options.nodes,
            devices_per_node=options.devices_per_node,
            quota_devices=options.quota_devices,
            preemption=options.preemption,
        )
        self.operators: list[Operator] = []
        self.fired: list[Fired] = []
        self.proxy = Proxy(*api_server_address(cluster.kubeconfig))
        self.proxied: Path | None = None
        selector = dict([GATED_LABEL])
        self.admission: ClosedWebhook | PolicyGate | None = None
        """What gives the gate besides the operators' own webhook, as shipped."""
        if options.gate == "webhook-closed":
            work_dir.mkdir(parents=True, exist_ok=True)
            self.admission = ClosedWebhook(
                cluster, f"{self.layout.prefix}-gate", selector, work_dir
            )
        elif options.gate == "policy":
            self.admission = PolicyGate(cluster, f"{self.layout.prefix}-gate", selector)
        self.replicas: Replicas | None = None
        if options.fencing:
            work_dir.mkdir(parents=True, exist_ok=True)
            self.replicas = Replicas(
                cluster, self.layout.prefix, (LEASE_NAMESPACE, f"{self.layout.prefix}-lease"),
                (*self.layout.namespaces(), self.layout.probe_namespace), work_dir,
            )  # fmt: skip

    # -- operators -------------------------------------------------------------------------------

    def _start_operator(self, lease: str = "lease") -> Operator:
        identity = f"{self.layout.prefix}-op{len(self.operators)}"
        kubeconfig = self.proxied
        if self.replicas is not None:  # a replica's pod of that name, and its token
            kubeconfig = proxied_kubeconfig(
                self.replicas.credentials(identity), self.proxy.port,
                self.work_dir / f"{identity}-proxied.kubeconfig",
            )  # fmt: skip
        operator = Operator(
            self.cluster,
            self.work_dir / f"operator-{len(self.operators)}.log",
            lease=f"{self.layout.prefix}-{lease}",
            identity=identity,
            extra=(
                *self._webhook_args(lease),
                *self._scope_args(),
                *(("--preemption",) if self.options.preemption else ()),
            ),
            kubeconfig=kubeconfig,
        ).start()
        self.operators.append(operator)
        return operator

    def _scope_args(self) -> tuple[str, ...]:
        if self.options.policy and self.options.scheduler_pods:
            return ()  # every namespace: the policy leaves kube-scheduler none to allocate
        return (f"--gate-namespace-label={'='.join(GATED_LABEL)}",)

    @property
    def _policy_name(self) -> str:
        return f"{self.layout.prefix}-allocation"

    def _install_policy(self) -> None:
        # The operators' user: the replicas' ServiceAccount when fenced, else the run's own.
        writer = self.cluster.operator_user() if self.replicas is None else self.replicas.username
        self.cluster.apply(
            *claim_allocation_policy(
                self._policy_name, self.layout.namespaces(), [writer],
                group=self.options.mode.group,
            )
        )  # fmt: skip
        if self.options.mode.in_tree:  # (a CRD claim's schema would refuse the probe first)
            wait_policy_in_force(
                self.cluster.bin, self.cluster.kubeconfig, self.layout.scheduler_namespace
            )

    def _remove_policy(self) -> None:
        for args in claim_allocation_policy_removal(self._policy_name):
            self.cluster.kubectl(*args, check=False)

    def _webhook_args(self, lease: str) -> tuple[str, ...]:
        if lease != "lease":
            # A second operator serves no webhook: kopf would point the managed configuration
            # at it, and at nothing once it is killed (in a cluster a Service is in between).
            return ("--no-webhook",)
        if isinstance(self.admission, ClosedWebhook):
            return self.admission.operator_args()  # one port, served by the live operator
        if self.options.gate != "webhook":
            return ("--no-webhook",)
        return (
            "--webhook-addr=127.0.0.1",
            "--webhook-port=0",
            f"--webhook-managed={self.layout.prefix}.dralloc.test",
        )

    def _live(self) -> list[Operator]:
        return [o for o in self.operators if o.alive() and o.lease == f"{self.layout.prefix}-lease"]

    def _start_rogue(self) -> Operator:
        """An operator on another Lease: it will not wait for the run's to lose theirs. Its
        Lease sorts before the run's, so dralloc's allocation records would have the run's
        operators stand down for it: only fencing by the API server keeps it from
        allocating."""
        return self._start_operator(lease=f"a-rogue{len(self.operators)}")

    async def _supervise(self) -> None:
        """Start an operator again a second after the last one exits (a Deployment's
        kubelet would; a replica that loses its Lease exits on purpose)."""
        while True:
            await asyncio.sleep(1.0)
            if not self._live():
                self._start_operator()

    # -- the run ---------------------------------------------------------------------------------

    async def execute(self) -> Result:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        install(self.cluster)
        port = self.proxy.start()
        self.proxied = proxied_kubeconfig(
            self.cluster.operator_kubeconfig, port, self.work_dir / "operator-kubeconfig"
        )
        client = await KubeClient.connect(
            str(self.cluster.kubeconfig), user_agent="dralloc-robustness",
            api_group=self.options.mode.group,
        )  # fmt: skip
        prefix = self.layout.prefix
        kinds: dict[Kind, Any] = {"claim": RESOURCE_CLAIMS, "pod": PODS, "quota": DEVICE_QUOTAS}
        if self.options.pod_groups:
            kinds["podgroup"] = POD_GROUPS
        recorder = Recorder(client, kinds, keep=lambda ns: ns.startswith(f"{prefix}-"))
        recording = asyncio.create_task(recorder.run())
        supervisor: asyncio.Task[None] | None = None
        try:
            self.cluster.apply(*self.layout.setup())
            if self.options.policy:
                self._install_policy()
            if self.replicas is not None:
                self.replicas.install()
                probe = self.replicas.credentials(f"{self.layout.prefix}-probe")
                await asyncio.to_thread(
                    self.replicas.wait_in_force, probe, self.layout.probe_namespace
                )
            self._start_operator()
            await asyncio.to_thread(self.operators[0].wait_ready)
            if self.admission is not None:
                self.admission.install()
                await asyncio.to_thread(
                    wait_gating, self.cluster, self.options.mode, self.layout.probe_namespace
                )
            supervisor = asyncio.create_task(self._supervise())
            traffic = Traffic(
                client, self.layout, self.rng, self.options.scheduler_pods,
                self_gated=self.options.gate == "self", extended_pods=self.options.extended_pods,
                webhook_translates=self.options.webhook, pod_groups=self.options.pod_groups,
                preemption=self.options.preemption,
            )  # fmt: skip
            loop = asyncio.get_running_loop()
            started = loop.time()
            plan = schedule(
                random.Random(self.options.seed * 7919 + 1), list(self.options.faults),
                self.options.fault_count, self.options.duration_s,
            )  # fmt: skip
            await asyncio.gather(
                traffic.run(started + self.options.duration_s, self.options.rate),
                self._fire(plan, started),
            )
            traffic_s = loop.time() - started
            settled_in = await self._settle(client, loop.time())
            await self._wait_recorded(client, recorder)
            warned = await self._warned(client)
        finally:
            if supervisor is not None:
                supervisor.cancel()
            recording.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await recording
            for operator in self.operators:
                operator.stop()
            if self.options.policy:
                self._remove_policy()
            if self.admission is not None:
                self.admission.remove()
            if self.replicas is not None:
                self.replicas.remove()
            self.proxy.stop()
            if (
                self.options.gate == "webhook"
            ):  # kopf leaves its configuration behind; nothing serves it
                self.cluster.kubectl(
                    "delete", "mutatingwebhookconfiguration", f"{self.layout.prefix}.dralloc.test",
                    "validatingwebhookconfiguration", f"{self.layout.prefix}.dralloc.test",
                    "--ignore-not-found", check=False,
                )  # fmt: skip
            await client.close()
        history = recorder.history(warned=warned, settled=True)
        save_history(history, self.work_dir / "history.jsonl")
        report = check(history)
        bound, latencies, slowest = _bindings(history)
        return Result(
            options=self.options,
            report=report,
            traffic=traffic.applied,
            failed=traffic.failed,
            fired=self.fired,
            pods_bound=bound,
            bound_per_s=bound / traffic_s if traffic_s else 0.0,
            latency_p50_s=_quantile(latencies, 0.5),
            latency_p99_s=_quantile(latencies, 0.99),
            relists=recorder.relists,
            stand_downs=self._stand_downs(),
            operator_relists=sum(o.log().count("cache relisted") for o in self.operators),
            settled_in_s=settled_in,
            slowest=slowest,
            created_ungated=created_ungated(
                history, (*self.layout.gated, self.layout.quota_namespace)
            ),
            history=history,
            preempted=len(
                {
                    e.facts.uid
                    for e in history.events
                    if isinstance(e.facts, PodFacts) and e.facts.preempted
                }
            ),
            trails=trails(
                self.cluster.state_dir, {str(v): involved(history, v) for v in report.violations}
            ),
        )

    def _stand_downs(self) -> dict[str, int]:
        logs = [operator.log() for operator in self.operators]
        return {
            "refused": sum(log.count("the API server refuses this replica's") for log in logs),
            "records": sum(log.count("another allocator is acting") for log in logs),
        }

    async def _fire(self, plan: Sequence[tuple[float, str]], started: float) -> None:
        loop = asyncio.get_running_loop()
        faults = Faults(
            self.cluster,
            self._live,
            random.Random(self.options.seed * 31 + 7),
            self.proxy,
            self._start_rogue,
        )
        for at, name in plan:
            await asyncio.sleep(max(0.0, started + at - loop.time()))
            when = loop.time() - started
            what = await asyncio.to_thread(FAULTS[name], faults)
            self.fired.append(Fired(round(when, 1), name, what))

    async def _pods_and_claims(self, client: KubeClient) -> tuple[list[PodFacts], list[Any]]:
        pods, claims = [], []
        for namespace in self.layout.namespaces():
            items, _ = await client.list(PODS, namespace)
            pods += [pod_facts(p) for p in items]
            found, _ = await client.list(RESOURCE_CLAIMS, namespace)
            claims += [claim_facts(c) for c in found]
        return pods, claims

    async def _settle(self, client: KubeClient, since: float) -> float | None:
        """Seconds until the end state rule holds: every pod with claims is bound with its
        devices or explained (a condition and a Warning Event, for a gang member one on any
        member of its gang: ``warned_through_gangs``), and no allocated claim is held
        for a gone pod; None when that did not happen in time (the checker then says which)."""
        loop = asyncio.get_running_loop()
        while loop.time() - since < self.options.settle_s:
            try:
                pods, claims = await self._pods_and_claims(client)
                warned = await self._warned(client)
            except (ApiError, OSError):
                await asyncio.sleep(1)
                continue
            live = {p.uid for p in pods}
            warned_pods = warned_through_gangs(pods, warned)
            by_key = {c.key: c for c in claims}
            owned: dict[str, dict[str, str]] = defaultdict(dict)
            for claim in claims:
                if claim.owner_pod:
                    owned[claim.owner_pod][claim.pod_claim_name] = claim.key
            waiting = [
                p for p in pods
                if p.has_claims and (not p.bound or unsatisfied(p, by_key, owned) is not None)
                and not (p.explained and p.key in warned_pods)
            ]  # fmt: skip
            stale = [
                c for c in claims
                if c.allocated and (c.reserved_for - live or (c.owner_pod and c.owner_pod not in live))
            ]  # fmt: skip
            if not waiting and not stale:
                return loop.time() - since
            await asyncio.sleep(1)
        return None

    async def _wait_recorded(self, client: KubeClient, recorder: Recorder) -> None:
        """Write a marker object of each kind, then touch each once more, and wait until the
        recorder has seen every touch: each kind's watch is then past the last marker's
        creation, so every event before that point, of every kind, is recorded."""
        namespace = self.layout.marker_namespace
        api_version = self.options.mode.api_version
        markers: dict[Kind, tuple[Any, dict[str, Any]]] = {
            "pod": (PODS, {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "marker", "namespace": namespace},
                "spec": {"containers": [{"name": "c", "image": "registry.invalid/fake"}],
                         "nodeSelector": {"robustness-pool": "none"}},
            }),
            "claim": (RESOURCE_CLAIMS, {
                "apiVersion": api_version, "kind": "ResourceClaim",
                "metadata": {"name": "marker", "namespace": namespace},
                "spec": self.layout.claim_spec(),
            }),
            "quota": (DEVICE_QUOTAS, {
                "apiVersion": "resource.dralloc.dev/v1", "kind": "DeviceQuota",
                "metadata": {"name": "marker", "namespace": namespace},
                "spec": {"deviceClassName": "marker", "hard": {"devices": 0}},
            }),
        }  # fmt: skip
        if self.options.pod_groups:
            markers["podgroup"] = (POD_GROUPS, {
                "apiVersion": f"{POD_GROUPS.group}/{POD_GROUPS.version}", "kind": "PodGroup",
                "metadata": {"name": "marker", "namespace": namespace},
                "spec": {"schedulingPolicy": {"basic": {}}},
            })  # fmt: skip
        for resource, body in markers.values():
            await self._retrying(functools.partial(client.create, resource, body, namespace))
        wanted: dict[Kind, int] = {}
        for kind, (resource, _) in markers.items():
            touched = await self._retrying(functools.partial(
                client.merge_patch, resource, "marker",
                {"metadata": {"labels": {"touched": "yes"}}}, namespace=namespace,
            ))  # fmt: skip
            wanted[kind] = int(touched["metadata"]["resourceVersion"])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while any(recorder.last_rv[kind] < rv for kind, rv in wanted.items()):
            if loop.time() > deadline:
                raise RuntimeError(f"the recorder did not see the markers: {recorder.last_rv}")
            await asyncio.sleep(0.2)

    async def _retrying(self, attempt: Callable[[], Awaitable[Any]]) -> Any:
        """``attempt()``, retried for up to 60 s: an operator killed by the last fault may
        still be starting, and its webhooks refuse claims until it serves them."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while True:
            try:
                return await attempt()
            except (ApiError, aiohttp.ClientError) as error:
                if isinstance(error, ApiError) and error.status == 409:
                    return None  # made by an attempt whose answer was lost
                if loop.time() > deadline:
                    raise
            await asyncio.sleep(1.0)

    async def _warned(self, client: KubeClient) -> frozenset[str]:
        found = set()
        for namespace in self.layout.namespaces():
            events, _ = await client.list(EVENTS, namespace)
            for event in events:
                involved = event.get("involvedObject") or {}
                if event.get("type") == "Warning" and involved.get("kind") == "Pod":
                    found.add(f"{namespace}/{involved.get('name')}")
        return frozenset(found)


def save_history(history: History, path: Path) -> None:
    """Every recorded event, one JSON object a line (for reading a run afterwards)."""
    with path.open("w") as out:
        for event in history.ordered():
            row = asdict(event)
            row["facts"] = {
                k: sorted(v) if isinstance(v, frozenset) else v for k, v in row["facts"].items()
            }
            out.write(json.dumps(row, default=str) + "\n")


def involved(history: History, violation: Violation) -> set[tuple[str, str]]:
    """The objects whose writes explain a violation, as (namespace, name): a pod and the
    claims it names; the claims that ever held a device. Empty for other rules."""
    objects: set[tuple[str, str]] = set()
    for event in history.ordered():
        facts = event.facts
        if violation.rule == POD_BOUND_WITHOUT_DEVICES and isinstance(facts, PodFacts):
            if facts.key == violation.subject:
                objects.add((facts.namespace, facts.name))
                names = (*facts.direct_claims, *facts.claim_statuses.values(), facts.extended_claim)
                objects.update((facts.namespace, name) for name in names if name)
        elif (
            violation.rule == DEVICE_HELD_TWICE
            and isinstance(facts, ClaimFacts)
            and any(str(held.device) == violation.subject for held in facts.devices)
        ):
            objects.add((facts.namespace, facts.name))
    return objects


def load_history(path: Path, *, warned: frozenset[str] = frozenset()) -> History:
    """A history saved by ``save_history`` (its gaps are not saved: relisted events keep
    their mark, so a violation they end is still seen, but not marked unverifiable)."""
    makers = {"claim": ClaimFacts, "pod": PodFacts, "quota": QuotaFacts, "podgroup": PodGroupFacts}
    history = History(warned=warned)
    for line in path.read_text().splitlines():
        row = json.loads(line)
        facts = dict(row["facts"])
        if row["kind"] == "claim":
            facts["devices"] = tuple(
                HeldDevice(DeviceId(**d["device"]), d["access"], d["device_class"])
                for d in facts["devices"]
            )
            facts["reserved_for"] = frozenset(facts["reserved_for"])
            facts["nodes"] = frozenset(facts.get("nodes") or ())
        elif row["kind"] == "pod":
            facts["direct_claims"] = tuple(facts["direct_claims"])
            facts["template_entries"] = tuple(facts["template_entries"])
        row["facts"] = makers[row["kind"]](**facts)
        history.events.append(Event(**row))
    return history


def _bindings(history: History) -> tuple[int, list[float], list[tuple[float, str, str]]]:
    """Pods bound; each bound pod's time from its first event to its binding; and the three
    slowest as (seconds, pod, what its conditions said last before it was bound)."""
    first: dict[str, float] = {}
    why: dict[str, str] = {}
    latencies: dict[str, tuple[float, str, str]] = {}
    for event in history.ordered():
        facts = event.facts
        if not isinstance(facts, PodFacts) or not facts.has_claims or event.type == "DELETED":
            continue
        uid = facts.uid
        first.setdefault(uid, event.at)
        if facts.why:
            why[uid] = facts.why
        if facts.node and uid not in latencies:
            latencies[uid] = (event.at - first[uid], facts.key, why.get(uid, ""))
    slowest = sorted(latencies.values(), reverse=True)[:3]
    return len(latencies), sorted(t for t, _, _ in latencies.values()), slowest


def created_ungated(history: History, namespaces: Sequence[str]) -> list[str]:
    """Claims pods of ``namespaces`` whose first recorded state had no scheduling gate."""
    first: dict[str, PodFacts] = {}
    for event in history.ordered():
        if isinstance(event.facts, PodFacts) and event.facts.namespace in namespaces:
            first.setdefault(event.facts.uid, event.facts)
    return sorted(f.key for f in first.values() if f.has_claims and not f.gated)


def _quantile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[
        max(0, min(98, round(q * 100) - 1))
    ]


def write_report(results: Sequence[Result], out: Path, command: str) -> None:
    """Add the runs to ``<out>.json`` (a list of every run so far) and a section to
    ``<out>.md`` (the command, then a table in bench/results' style): earlier runs stay, so
    one file keeps the figures of every kind of run that was made."""
    out.parent.mkdir(parents=True, exist_ok=True)
    json_path = out.with_suffix(".json")
    earlier = json.loads(json_path.read_text()) if json_path.exists() else []
    if not isinstance(earlier, list):  # a report of another shape: keep it, as one entry
        earlier = [earlier]
    json_path.write_text(json.dumps(earlier + [r.to_json() for r in results], indent=2))
    md_path = out.with_suffix(".md")
    title = "" if md_path.exists() else "# Robustness runs (`python -m robustness`)\n"
    with md_path.open("a") as md:
        md.write(title + "\n" + report_section(results, command) + "\n")


def report_section(results: Sequence[Result], command: str) -> str:
    """One section: when, the command that re-runs it, the table, and each run's summary."""
    header = (
        "| mode | seed | s | operations | faults | events | relists | bound/s | p50 s | p99 s | "
        + " | ".join(RULES)
        + " | longest broken s |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in results:
        longest = max(r.report.longest().values(), default=0.0)
        counts = r.report.by_rule()
        lines.append(
            f"| {r.options.mode.name} | {r.options.seed} | {r.options.duration_s:.0f} | "
            f"{sum(r.traffic.values())} | {len(r.fired)} | {r.report.events} | {r.relists} | "
            f"{r.bound_per_s:.2f} | {r.latency_p50_s:.2f} | {r.latency_p99_s:.2f} | "
            + " | ".join(str(counts[rule]) for rule in RULES)
            + f" | {longest:.1f} |"
        )
    day = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return (
        f"## Run of {day}\n\n`{command}`\n\n"
        + "\n".join(lines) + "\n\n" + "\n\n".join(r.summary() for r in results) + "\n"
    )  # fmt: skip
