"""Operator settings and feature gates, read once at startup.

Every knob lives in one frozen dataclass so that controllers receive a single immutable value
instead of reaching into the environment. Each field is settable by a command-line flag
(``--lease-name``) or an environment variable (``DRALLOC_LEASE_NAME``); a flag wins over the
environment, the environment wins over the default written here.

Feature gates mirror upstream's names and their defaults in Kubernetes 1.37
(see docs/design.md "Upstream references"); they are given as ``--feature-gates=DRAAdminAccess=false,...`` or
``DRALLOC_FEATURE_GATES``.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import functools
import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any, Final

from operators.api.annotations import GANG_SIZE_MAX
from operators.groups import API_GROUPS

ENV_PREFIX = "DRALLOC_"
DEFAULT_LEASE_NAMESPACE = "dralloc-system"
"""The operator's namespace in manifests/base, and where every operator's Lease lives."""

#: Upstream's gate defaults (Kubernetes 1.37) for the gates dralloc looks at.
DEFAULT_FEATURE_GATES: Mapping[str, bool] = {
    "DRAAdminAccess": True,
    "DRAPrioritizedList": True,
    "DRAResourceClaimDeviceStatus": True,
    "DRADeviceTaints": True,
    "DRADeviceTaintRules": True,
    "DRAPartitionableDevices": True,
    "DRAConsumableCapacity": True,
    "DRADeviceBindingConditions": True,
    "DRAExtendedResource": True,
    "DRAListTypeAttributes": False,
    "DRADeviceCompatibilityGroups": False,
    "DRAFractionalCapacityRange": False,
    "DRADerivedAttributes": False,
    "DRAOptionalNodeOperations": False,
    "DRANodeAllocatableResources": False,
    "DRAWorkloadResourceClaims": False,
}


EVENT_LOOPS: Final = ("uvloop", "asyncio")


class SettingsError(ValueError):
    """A flag or environment variable has a value that cannot be used."""


class NodePolicy(enum.StrEnum):
    """How the allocator chooses among the nodes where a pod's claims fit."""

    BINPACK = "binpack"
    SPREAD = "spread"
    FIRST_FIT = "first-fit"


class DevicePolicy(enum.StrEnum):
    """Which devices the allocator takes among those that fit a claim on a node."""

    FIRST_FIT = "first-fit"
    """Upstream's order (slice order): identical to in-tree DRA."""
    PACK = "pack"
    """Partitions on partly used devices first (best fit), used pools before empty ones:
    keeps whole devices free for whole-device requests (see allocator/packing.py)."""


class EvictionMode(enum.StrEnum):
    """How the taint controller makes a pod go."""

    DELETE = "delete"  # as upstream: a plain delete, disruption budgets are not asked
    EVICT = "evict"  # the Eviction API (policy/v1): PodDisruptionBudgets hold


@dataclasses.dataclass(frozen=True)
class FeatureGates:
    """Upstream-named feature gates; unknown names are refused so typos do not pass silently."""

    enabled: Mapping[str, bool] = dataclasses.field(
        default_factory=lambda: dict(DEFAULT_FEATURE_GATES)
    )

    def __getitem__(self, name: str) -> bool:
        return self.enabled[name]

    @classmethod
    def parse(cls, text: str) -> FeatureGates:
        """Parse ``Name=true,Other=false`` on top of the defaults."""
        gates = dict(DEFAULT_FEATURE_GATES)
        for item in filter(None, (part.strip() for part in text.split(","))):
            name, sep, value = item.partition("=")
            name = name.strip()
            if not sep or name not in gates:
                known = ", ".join(sorted(gates))
                raise SettingsError(f"feature gate {item!r}: expected Name=bool, one of {known}")
            gates[name] = _parse_bool(value, f"feature gate {name}")
        return cls(gates)

    def render(self) -> str:
        return ",".join(f"{name}={str(on).lower()}" for name, on in sorted(self.enabled.items()))


def _doc(doc: str, **extra: str) -> dict[str, str]:
    return {"doc": doc, **extra}


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything the operator process can be told at startup."""

    # --- which API ---------------------------------------------------------------------------
    api_group: str = dataclasses.field(
        default=API_GROUPS[0],
        metadata=_doc(
            "API group of the DRA kinds: resource.dralloc.dev (dralloc's CRDs; pods ask with "
            "the resource.dralloc.dev/claims annotation) or resource.k8s.io (in-tree DRA; pods "
            "ask with spec.resourceClaims, and the kubelet and DRA drivers prepare what "
            "dralloc allocated)."
        ),
    )
    gate_namespace_label: str = dataclasses.field(
        default="",
        metadata=_doc(
            "KEY=VALUE: dralloc serves only namespaces with this label: the webhook gates "
            "their pods, and in-tree dralloc allocates their ungated pods too (others are left "
            "to kube-scheduler's own DRA allocation); empty = every namespace."
        ),
    )
    unserved_namespaces: str = dataclasses.field(
        default="kube-system,kube-node-lease,dralloc-system",
        metadata=_doc(
            "Comma-separated namespaces dralloc never serves (the webhook's and the "
            "claim-allocation policy's bindings leave them out too): in-tree, kube-scheduler "
            "allocates their pods' claims, so the control plane's pods never wait for dralloc."
        ),
    )
    allocate_ungated: bool = dataclasses.field(
        default=True,
        metadata=_doc(
            "In-tree: allocate the claims of pods that passed the gate by (webhook down or "
            "failing open, pods older than the operator) in the namespaces dralloc serves; "
            "kube-scheduler binds them where their claims are. Off: such pods are left to "
            "kube-scheduler, which can then allocate beside dralloc (unless the "
            "claim-allocation policy refuses it, and then they wait)."
        ),
    )

    extended_resources: bool = dataclasses.field(
        default=True,
        metadata=_doc(
            "In-tree: serve DRA extended resources (a container's example.com/gpu that a "
            "DeviceClass backs) as an ordinary claim of the pod in the namespaces dralloc "
            "serves: the webhook turns them into one when the pod is created, the claim "
            "controller creates it, dralloc allocates it. Off (or without the claim "
            "controller): kube-scheduler meets them, which the claim-allocation policy "
            "refuses unless their class is among its extendedClasses."
        ),
    )
    scheduler_extended_classes: str = dataclasses.field(
        default="",
        metadata=_doc(
            "Comma-separated DeviceClasses whose extended resources dralloc leaves to "
            "kube-scheduler (the claim-allocation policy's extendedClasses; their devices "
            "must be outside the drivers dralloc manages)."
        ),
    )

    # --- which parts run -------------------------------------------------------------------
    claims_controller: bool = dataclasses.field(
        default=True,
        metadata=_doc(
            "Run the resource-claim controller (claims from templates, reservedFor, cleanup)."
        ),
    )
    allocation_controller: bool = dataclasses.field(
        default=True,
        metadata=_doc("Run the claim allocator loop (chooses nodes and devices for gated pods)."),
    )
    taints_controller: bool = dataclasses.field(
        default=True,
        metadata=_doc("Run the device-taint eviction controller (needs the DRADeviceTaints gate)."),
    )
    webhook: bool = dataclasses.field(
        default=True,
        metadata=_doc("Serve the mutating admission webhook that adds the scheduling gate."),
    )
    feature_gates: FeatureGates = dataclasses.field(
        default_factory=FeatureGates,
        metadata=_doc("Upstream feature gates, e.g. 'DRAAdminAccess=false'.", parse="gates"),
    )

    # --- allocation ------------------------------------------------------------------------
    node_policy: NodePolicy = dataclasses.field(
        default=NodePolicy.BINPACK,
        metadata=_doc(
            "Node choice among fitting nodes: binpack (fewest free matching devices left; on "
            "partitionable devices, fewest whole devices broken), spread (most left) or "
            "first-fit (first by name).",
            parse="policy",
        ),
    )
    device_policy: DevicePolicy = dataclasses.field(
        default=DevicePolicy.FIRST_FIT,
        metadata=_doc(
            "Device choice on a node: first-fit (upstream's order) or pack (partitions on "
            "partly used devices and pools first, to keep whole devices free).",
            parse="device-policy",
        ),
    )
    requeue_base_delay: float = dataclasses.field(
        default=0.2,
        metadata=_doc("First retry delay in seconds for a pod that could not be allocated."),
    )
    requeue_max_delay: float = dataclasses.field(
        default=30.0, metadata=_doc("Upper bound in seconds for the retry delay.")
    )
    decision_budget: float = dataclasses.field(
        default=10.0,
        metadata=_doc(
            "Wall-clock seconds one pod's device decision may take (upstream's Filter gives "
            "up after 10 s); past it the pod is told 'allocation search exceeded' and backs "
            "off while other pods go on. 0 = no limit."
        ),
    )
    max_gang_size: int = dataclasses.field(
        default=GANG_SIZE_MAX,
        metadata=_doc(
            f"The most members a gang may need placed together (its gang-size annotation or "
            f"PodGroup minCount), 1 to {GANG_SIZE_MAX}; a larger gang is refused on each "
            "member, naming this setting. It bounds the declared size, not how many gated "
            "members a gang brings: a search looks at the members the gang still needs plus "
            "16 (first by name; a PodGroup's members all), the others wait behind them."
        ),
    )
    release_grace: float = dataclasses.field(
        default=30.0,
        metadata=_doc(
            "Seconds a pod released to its node may stay unbound while kube-scheduler "
            "refuses it (something dralloc does not model, or a race); then its claims are "
            "deallocated and the refusal is reported on the pod."
        ),
    )
    recreate_refused_pods: bool = dataclasses.field(
        default=True,
        metadata=_doc(
            "Delete a pod kube-scheduler kept refusing after its release when a controller "
            "(ReplicaSet, Job, StatefulSet, ...) owns it, so that the controller recreates it "
            "and dralloc places the new pod afresh. Bare pods only get the Event and condition."
        ),
    )

    # --- eviction --------------------------------------------------------------------------
    max_evictions_per_minute: int = dataclasses.field(
        default=0,
        metadata=_doc(
            "Upper bound on pod deletions by the taint controller per minute; 0 = no limit."
        ),
    )
    eviction_mode: EvictionMode = dataclasses.field(
        default=EvictionMode.DELETE,
        metadata=_doc(
            "How the taint controller removes pods: delete (as upstream) or evict (the "
            "Eviction API, so PodDisruptionBudgets hold; a refused eviction is retried with "
            "backoff).",
            parse="eviction",
        ),
    )
    eviction_workers: int = dataclasses.field(
        default=10, metadata=_doc("Concurrent pod evictions (upstream ConcurrentSyncs).")
    )

    # --- priority preemption ----------------------------------------------------------------
    preemption: bool = dataclasses.field(
        default=False,
        metadata=_doc(
            "Preempt lower-priority pods that hold the devices a pod needs when it fits no "
            "node (kube-scheduler's preemption does not free devices): victims chosen as "
            "kube-scheduler's DefaultPreemption chooses, a gang whole, equal priority never; "
            "removed as eviction_mode says, their devices nominated for the pod meanwhile."
        ),
    )
    preemption_max_victims: int = dataclasses.field(
        default=16,
        metadata=_doc(
            "The most pods one preemption may remove (a gang counts all its members); a "
            "choice that needs more is not made, and the pod is told so."
        ),
    )
    preemption_device_classes: str = dataclasses.field(
        default="",
        metadata=_doc(
            "Comma-separated DeviceClasses whose devices preemption may free ('' = all): a "
            "pod preempts only if every device it still needs is of one of them."
        ),
    )

    # --- leader election -------------------------------------------------------------------
    leader_election: bool = dataclasses.field(
        default=True,
        metadata=_doc("Hold a coordination.k8s.io Lease so that only one replica acts."),
    )
    lease_name: str = dataclasses.field(
        default="dralloc-operator", metadata=_doc("Name of the leader-election Lease.")
    )
    lease_namespace: str = dataclasses.field(
        default=DEFAULT_LEASE_NAMESPACE,
        metadata=_doc(
            "Namespace of the Lease: one location for every way of running (in-cluster, "
            "python -m operators, kopf run), so two operators never both act; it must exist."
        ),
    )
    lease_duration: float = dataclasses.field(
        default=15.0, metadata=_doc("Seconds a standby waits before taking a stale Lease.")
    )
    renew_deadline: float = dataclasses.field(
        default=10.0, metadata=_doc("Seconds the leader may fail to renew before it stops.")
    )
    retry_period: float = dataclasses.field(
        default=2.0, metadata=_doc("Seconds between Lease renewals and acquisition attempts.")
    )
    identity: str = dataclasses.field(
        default="",
        metadata=_doc(
            "Holder identity in the Lease; empty = the name the fencing policy knows this "
            "process by: its pod's name (a pod-bound token), else '<user>/<hostname>-<pid>'."
        ),
    )

    # --- endpoints -------------------------------------------------------------------------
    metrics_port: int = dataclasses.field(
        default=8080, metadata=_doc("Port of the Prometheus /metrics endpoint; 0 = off.")
    )
    metrics_addr: str = dataclasses.field(
        default="0.0.0.0", metadata=_doc("Listen address of the /metrics endpoint.")
    )
    probe_port: int = dataclasses.field(
        default=8081, metadata=_doc("Port of kopf's /healthz liveness endpoint; 0 = off.")
    )
    webhook_addr: str = dataclasses.field(
        default="0.0.0.0", metadata=_doc("Listen address of the admission webhook.")
    )
    webhook_port: int = dataclasses.field(
        default=9443, metadata=_doc("Listen port of the admission webhook; 0 = any free port.")
    )
    webhook_host: str = dataclasses.field(
        default="",
        metadata=_doc(
            "Hostname the API server uses to reach the webhook; empty = derived from the address."
        ),
    )
    webhook_certfile: str = dataclasses.field(
        default="", metadata=_doc("TLS certificate file; empty = generate a self-signed one.")
    )
    webhook_pkeyfile: str = dataclasses.field(
        default="", metadata=_doc("TLS private key file (with --webhook-certfile).")
    )
    webhook_cafile: str = dataclasses.field(
        default="", metadata=_doc("CA bundle for the webhook configuration; empty = the cert.")
    )
    webhook_managed: str = dataclasses.field(
        default="",
        metadata=_doc(
            "If set, the name of the MutatingWebhookConfiguration kopf writes (self-managed, "
            "e.g. for tests); empty = the configuration is shipped in manifests/."
        ),
    )

    # --- connection and logging ------------------------------------------------------------
    kubeconfig: str = dataclasses.field(
        default="", metadata=_doc("Kubeconfig file; empty = $KUBECONFIG, in-cluster, ~/.kube.")
    )
    request_timeout: float = dataclasses.field(
        default=30.0, metadata=_doc("Timeout in seconds for one non-watch API request.")
    )
    watch_timeout: int = dataclasses.field(
        default=300, metadata=_doc("Server-side timeout in seconds of one watch request.")
    )
    gc_young_threshold: int = dataclasses.field(
        default=50_000,
        metadata=_doc(
            "Allocations between young garbage collections (CPython's default is 700); "
            "larger means fewer and shorter pauses in all for a few MB more memory."
        ),
    )
    event_loop: str = dataclasses.field(
        default="uvloop",
        metadata=_doc(
            "Event loop of `python -m operators`: uvloop (libuv; the default, 4-5 percent less "
            "CPU per pod) or asyncio (the standard library's); `kopf run` keeps its own."
        ),
    )
    log_level: str = dataclasses.field(
        default="INFO", metadata=_doc("Log level: DEBUG, INFO, WARNING, ERROR.")
    )
    log_format: str = dataclasses.field(
        default="json", metadata=_doc("Log format: json (one object a line) or console.")
    )

    @property
    def effective_lease_namespace(self) -> str:
        # Never $POD_NAMESPACE or "default": an operator run from a laptop next to the
        # in-cluster Deployment would hold a Lease of its own and allocate too.
        return self.lease_namespace or DEFAULT_LEASE_NAMESPACE

    @property
    def process_name(self) -> str:
        """This process among others of one user: ``<hostname>-<pid>``."""
        return f"{socket.gethostname()}-{os.getpid()}"

    @property
    def gate_namespace_selector(self) -> tuple[str, str] | None:
        """``(key, value)`` of :attr:`gate_namespace_label`, or None for every namespace."""
        if not self.gate_namespace_label:
            return None
        key, _, value = self.gate_namespace_label.partition("=")
        return key.strip(), value.strip()

    @functools.cached_property
    def unserved(self) -> frozenset[str]:
        """:attr:`unserved_namespaces` as a set (read for every pod event)."""
        return frozenset(n.strip() for n in self.unserved_namespaces.split(",") if n.strip())

    @functools.cached_property
    def preemption_classes(self) -> frozenset[str]:
        """The DeviceClasses of ``preemption_device_classes`` (empty: every class)."""
        return frozenset(n.strip() for n in self.preemption_device_classes.split(",") if n.strip())

    @functools.cached_property
    def scheduler_classes(self) -> frozenset[str]:
        """:attr:`scheduler_extended_classes` as a set."""
        return frozenset(n.strip() for n in self.scheduler_extended_classes.split(",") if n.strip())

    @property
    def translates_extended_resources(self) -> bool:
        """Whether pods' DRA extended resources become claims (in-tree, with the claim
        controller, which creates those claims)."""
        return (
            self.api_group != API_GROUPS[0] and self.extended_resources and self.claims_controller
        )

    def serves_namespace(self, name: str, labels: Mapping[str, str] | None) -> bool:
        """Whether dralloc serves a namespace (``labels``: its labels, None if unknown)."""
        if name in self.unserved:
            return False
        selector = self.gate_namespace_selector
        if selector is None:
            return True
        key, value = selector
        return labels is not None and labels.get(key) == value

    def __post_init__(self) -> None:
        if self.api_group not in API_GROUPS:
            raise SettingsError(f"api_group must be one of {', '.join(API_GROUPS)}")
        if self.gate_namespace_label and (
            "=" not in self.gate_namespace_label
            or not self.gate_namespace_label.partition("=")[0].strip()
        ):
            raise SettingsError("gate_namespace_label must be KEY=VALUE")
        if not 1 <= self.max_gang_size <= GANG_SIZE_MAX:
            raise SettingsError(f"max_gang_size must be from 1 to {GANG_SIZE_MAX}")
        if self.max_evictions_per_minute < 0:
            raise SettingsError("max_evictions_per_minute must be >= 0")
        if self.preemption_max_victims < 1:
            raise SettingsError("preemption_max_victims must be >= 1")
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise SettingsError("need lease_duration > renew_deadline > retry_period > 0")
        if self.gc_young_threshold < 1:
            raise SettingsError("gc_young_threshold must be >= 1")
        if self.log_format not in ("json", "console"):
            raise SettingsError("log_format must be json or console")
        if self.event_loop not in EVENT_LOOPS:
            raise SettingsError(f"event_loop must be one of {', '.join(EVENT_LOOPS)}")

    # --- parsing ---------------------------------------------------------------------------

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """Add one ``--flag`` per field; unset flags stay ``None`` so env and defaults apply."""
        for field in dataclasses.fields(Settings):
            flag = "--" + field.name.replace("_", "-")
            doc = f"{field.metadata['doc']} (env {ENV_PREFIX}{field.name.upper()})"
            if field.type in ("bool", bool):
                parser.add_argument(
                    flag,
                    dest=field.name,
                    default=None,
                    help=doc,
                    action=argparse.BooleanOptionalAction,
                )
            else:
                parser.add_argument(flag, dest=field.name, default=None, help=doc)

    @classmethod
    def from_sources(
        cls,
        flags: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Settings:
        """Combine parsed flags (``None`` = not given), the environment and the defaults."""
        flags = flags or {}
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            raw = flags.get(field.name)
            if raw is None:
                raw = environ.get(ENV_PREFIX + field.name.upper())
            if raw is None:
                continue
            values[field.name] = _convert(field, raw)
        return cls(**values)

    @classmethod
    def from_argv(
        cls, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
    ) -> Settings:
        parser = argparse.ArgumentParser(prog="dralloc run", description=__doc__)
        cls.add_arguments(parser)
        namespace = parser.parse_args(argv)
        try:
            return cls.from_sources(vars(namespace), environ)
        except SettingsError as error:
            parser.error(str(error))
            raise  # unreachable: parser.error exits


_CHOICES: dict[str, type[enum.StrEnum]] = {"policy": NodePolicy, "device-policy": DevicePolicy}


def _convert(field: dataclasses.Field[Any], raw: Any) -> Any:
    name = field.name
    if not isinstance(raw, str):
        return raw
    kind = field.metadata.get("parse")
    if kind == "gates":
        return FeatureGates.parse(raw)
    choices = _CHOICES.get(kind) if isinstance(kind, str) else None
    if choices is not None:
        try:
            return choices(raw)
        except ValueError:
            raise SettingsError(
                f"{name}: {raw!r} is not one of {', '.join(p.value for p in choices)}"
            ) from None
    if kind == "eviction":
        try:
            return EvictionMode(raw)
        except ValueError:
            raise SettingsError(
                f"{name}: {raw!r} is not one of {', '.join(m.value for m in EvictionMode)}"
            ) from None
    if field.type in ("bool", bool):
        return _parse_bool(raw, name)
    try:
        if field.type in ("int", int):
            return int(raw)
        if field.type in ("float", float):
            return float(raw)
    except ValueError:
        raise SettingsError(f"{name}: {raw!r} is not a number") from None
    return raw


def _parse_bool(raw: str, what: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise SettingsError(f"{what}: {raw!r} is not a boolean")
