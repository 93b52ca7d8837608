"""How a run's pods get dralloc's scheduling gate, and installing what gives it.

- ``self``: the traffic's pods carry the gate (and, in CRD mode, the claims annotation)
  themselves; no admission is involved.
- ``webhook``: the operator's webhook, in a configuration kopf manages (fail-open: while no
  operator runs, pods are created ungated).
- ``webhook-closed``: the shipped MutatingWebhookConfiguration, as kustomize renders it for
  the mode (in-tree: the gate for claims pods fails closed, the extended-resources webhook
  fails open), pointed at the run's operators on one fixed port with a certificate the run
  made. While no operator serves, claims pods are refused: users see their creations fail.
- ``policy``: the shipped MutatingAdmissionPolicy (component ``gate-by-policy``): the API
  server gates pods itself, with or without an operator; it does not translate extended
  resources, so the traffic makes no such pods.

Each admission gate is bound to the run's gated namespaces only (the label the operators are
given), and the run waits until a probe pod comes out gated before the traffic starts.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import yaml

from operators.certificates import build_self_signed_certificate
from robustness.cluster import REPO_ROOT, Cluster, Mode
from robustness.traffic import CLAIMS_ANNOTATION, GATE

GATES: Final = ("self", "webhook", "webhook-closed", "policy")
MANIFESTS: Final = REPO_ROOT / "manifests"


def rendered(
    cluster: Cluster, components: list[str], kinds: tuple[str, ...]
) -> list[dict[str, Any]]:
    """The objects of ``kinds`` that kustomize renders from the base with ``components``."""
    with tempfile.TemporaryDirectory(prefix="dralloc-gate-") as scratch:
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [os.path.relpath(MANIFESTS / "base", scratch)],
            "components": [
                os.path.relpath(MANIFESTS / "components" / c, scratch) for c in components
            ],
        }
        Path(scratch, "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        objects = [d for d in yaml.safe_load_all(cluster.kubectl("kustomize", scratch)) if d]
    return [o for o in objects if o["kind"] in kinds]


def free_port() -> int:
    """A port nothing listens on now (the operators bind it one after another)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class ClosedWebhook:
    """The shipped webhook configuration, served by whichever run operator is alive."""

    def __init__(self, cluster: Cluster, name: str, selector: dict[str, str], work_dir: Path):
        self.cluster = cluster
        self.name = name
        self.selector = selector
        self.port = free_port()
        cert, key = build_self_signed_certificate(["127.0.0.1"])
        self.certfile = work_dir / "webhook.crt"
        self.keyfile = work_dir / "webhook.key"
        self.certfile.write_bytes(cert)
        self.keyfile.write_bytes(key)
        self.ca_bundle = cert

    def operator_args(self) -> tuple[str, ...]:
        return (
            "--webhook-addr=127.0.0.1",
            f"--webhook-port={self.port}",
            f"--webhook-certfile={self.certfile}",
            f"--webhook-pkeyfile={self.keyfile}",
        )

    def configuration(self) -> dict[str, Any]:
        components = ["in-tree"] if self.cluster.mode.in_tree else []
        (config,) = rendered(self.cluster, components, ("MutatingWebhookConfiguration",))
        config["metadata"] = {"name": self.name}
        ca = base64.b64encode(self.ca_bundle).decode()
        for webhook in config["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {
                "url": f"https://127.0.0.1:{self.port}{path}",
                "caBundle": ca,
            }
            webhook["namespaceSelector"] = {"matchLabels": self.selector}
        return config

    def install(self) -> None:
        self.cluster.apply(self.configuration())

    def remove(self) -> None:
        self.cluster.kubectl(
            "delete", "mutatingwebhookconfiguration", self.name, "--ignore-not-found", check=False
        )


class PolicyGate:
    """The shipped MutatingAdmissionPolicy, bound to the run's gated namespaces."""

    def __init__(self, cluster: Cluster, name: str, selector: dict[str, str]):
        self.cluster = cluster
        self.name = name
        self.selector = selector

    def objects(self) -> list[dict[str, Any]]:
        components = ["gate-by-policy", *(["in-tree"] if self.cluster.mode.in_tree else [])]
        kinds = ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")
        policy, binding = sorted(rendered(self.cluster, components, kinds), key=lambda o: o["kind"])
        policy["metadata"] = {"name": self.name}
        binding["metadata"] = {"name": self.name}
        binding["spec"]["policyName"] = self.name
        binding["spec"]["matchResources"]["namespaceSelector"] = {"matchLabels": self.selector}
        return [policy, binding]

    def install(self) -> None:
        self.cluster.apply(*self.objects())

    def remove(self) -> None:
        for kind in ("mutatingadmissionpolicybinding", "mutatingadmissionpolicy"):
            self.cluster.kubectl("delete", kind, self.name, "--ignore-not-found", check=False)


def wait_gating(cluster: Cluster, mode: Mode, namespace: str, timeout: float = 60) -> None:
    """Create (and delete) probe claims pods in ``namespace`` until one comes out gated: a
    new webhook configuration or policy takes a moment to be in force."""
    deadline = time.monotonic() + timeout
    for attempt in range(1, 10_000):
        name = f"gate-probe-{attempt}"
        claims = [{"name": "dev", "resourceClaimTemplateName": "gate-probe-none"}]
        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": {}},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/probe"}]},
        }
        if mode.in_tree:
            pod["spec"]["resourceClaims"] = claims
        else:
            pod["metadata"]["annotations"][CLAIMS_ANNOTATION] = json.dumps(claims)
        made = cluster.kubectl(
            "create", "-o", "json", "-f", "-", input=json.dumps(pod), check=False
        )
        cluster.kubectl(
            "delete", "pod", name, f"--namespace={namespace}", "--wait=false", check=False
        )
        try:
            gates = [g["name"] for g in json.loads(made)["spec"].get("schedulingGates") or []]
        except (ValueError, KeyError):
            gates = []
        if GATE in gates:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"no probe pod in {namespace} came out gated after {timeout:.0f} s")
        time.sleep(0.5)
