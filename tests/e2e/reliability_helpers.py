"""Helpers of the reliability suites (bad input, security, faults): invariants of the live
testbed through ``operators.toolkit.check``, and control-plane faults.

The invariant check reads the cluster with ``kubectl get -o json`` (list calls only) and runs
the same checker as ``dralloc check``, so a test failure prints the same violations a user
would see.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Collection, Iterator
from types import ModuleType
from typing import Any

import pytest

from operators.toolkit.check import (
    DEFAULT_RULES,
    CheckReport,
    SelectorMode,
    check_snapshot,
    tolerant_snapshot,
)
from operators.toolkit.sources import objects_from_documents
from tests.testbed_scripts import load_testbed_script

from .kube_helpers import Testbed, wait_for

DRA_KINDS = ("deviceclasses", "resourceslices", "resourceclaims", "resourceclaimtemplates")


def cluster_check(
    testbed: Testbed,
    namespaces: Collection[str] | None = None,
    rules: tuple[str, ...] = DEFAULT_RULES,
) -> CheckReport:
    """The invariant checker on the testbed as it is now.

    ``namespaces`` limits claims and pods to those namespaces (cluster-scoped objects are
    always read): tests share one control plane, and another test's leftovers are not this
    test's violations.
    """
    mode = testbed.api_mode
    kinds = ",".join([*(mode.resource(k) for k in DRA_KINDS), "pods", "nodes", "namespaces"])
    listing = testbed.get(kinds, "--all-namespaces")
    assert listing is not None
    items = [
        item
        for item in listing.get("items") or []
        if namespaces is None
        or item.get("kind") == "Namespace"
        or (item.get("metadata") or {}).get("namespace") in (*namespaces, None)
    ]
    documents = [{"apiVersion": "v1", "kind": "List", "items": items}]
    snapshot, unreadable = tolerant_snapshot(objects_from_documents("testbed", documents))
    # Read from the cluster: stored objects (their selectors compiled as the allocator does).
    stored = SelectorMode(stored=True)
    return check_snapshot(
        snapshot, rules, pods_complete=True, unreadable=unreadable, selectors=stored
    )


def assert_invariants(
    testbed: Testbed,
    namespaces: Collection[str] | None = None,
    rules: tuple[str, ...] = DEFAULT_RULES,
) -> CheckReport:
    report = cluster_check(testbed, namespaces, rules)
    assert report.ok, "invariants broken:\n" + "\n".join(str(v) for v in report.violations)
    return report


def pod_condition(pod: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for condition in ((pod or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == type_:
            return dict(condition)
    return None


def event_messages(testbed: Testbed, namespace: str, name: str) -> list[str]:
    found = testbed.get(
        "events", f"--namespace={namespace}", f"--field-selector=involvedObject.name={name}"
    )
    return [str(e.get("message") or "") for e in (found or {}).get("items") or []]


# -- control-plane faults ----------------------------------------------------------------------


def _control_module() -> ModuleType:
    return load_testbed_script("control")


def restart_apiserver(testbed: Testbed, down_for: float = 2.0) -> float:
    """Stop kube-apiserver, wait, start it again with the same command; returns the outage.

    The new process is recorded in the testbed's state.json, so ``testbed/down`` and the
    owner watchdog stop it like the original. Skips for a reused testbed (not ours).
    """
    started = time.monotonic()
    with stopped(testbed, "kube-apiserver"):
        time.sleep(down_for)
    wait_for(
        "kube-apiserver ready again",
        lambda: testbed.kubectl("get", "--raw", "/readyz", check=False).returncode == 0,
        timeout=60,
        interval=0.5,
    )
    return time.monotonic() - started


@contextlib.contextmanager
def stopped(testbed: Testbed, name: str) -> Iterator[None]:
    """A control-plane component stopped for the ``with`` block (SIGTERM to its process group,
    SIGKILL after 10 s, as ``testbed/down`` does), then started again with the same command
    and environment, also when the block fails. The caller waits for it to be ready.

    The new process is recorded in the testbed's state.json, so ``testbed/down`` and the
    owner watchdog stop it like the original. Skips for a reused testbed (not ours).
    """
    if testbed.state_dir is None:
        pytest.skip(f"stopping {name} needs a testbed started by this run (DRALLOC_KUBECONFIG set)")
    control = _control_module()
    state = control.State.load(testbed.state_dir)
    current = [
        c
        for c in state.components
        if c.name == name and control.process_start_time(c.pid) == c.start_time
    ]
    assert current, f"no running {name} recorded in state.json"
    component = current[-1]
    argv, env = control.command_of(component)

    def gone() -> bool:
        return bool(control.process_start_time(component.pid) != component.start_time)

    os.killpg(component.pid, signal.SIGTERM)
    try:  # the grace `testbed/down` gives too; open watches can hold it up for longer
        wait_for(f"{name} to exit", gone, timeout=10, interval=0.1)
    except AssertionError:
        os.killpg(component.pid, signal.SIGKILL)
        wait_for(f"{name} to be killed", gone, timeout=10, interval=0.1)
    try:
        yield
    finally:
        control.start(state, name, argv, env)


def scheduler_healthy(testbed: Testbed) -> bool:
    """kube-scheduler's /healthz answers (it serves it on a self-signed certificate)."""
    assert testbed.state_dir is not None
    control = _control_module()
    port = control.State.load(testbed.state_dir).ports.scheduler
    return bool(
        control.http_ok(f"https://127.0.0.1:{port}/healthz", control.insecure_tls_context())
    )


def json_patch(
    testbed: Testbed, kind: str, name: str, namespace: str, patch: Any, *extra: str
) -> bool:
    """A merge patch; False when it was refused (conflict, gone) rather than raising."""
    result = testbed.kubectl(
        "patch", kind, name, f"--namespace={namespace}", "--type=merge", "-p", json.dumps(patch), *extra,
        check=False,
    )  # fmt: skip
    return result.returncode == 0


class PodWriteHold:
    """Holds the updates of pods in one namespace inside the API server, so that a fault meets
    a write in flight, not only pods waiting for one.

    A validating admission webhook (``failurePolicy: Ignore``) whose endpoint, while engaged,
    accepts connections and never answers: an update of a pod there (the operator's gate
    lift, after its claim writes landed; any update of a pod there, metadata included) waits
    in admission until ``release``, or the webhook's 30 s timeout; then the endpoint refuses
    connections, and every call fails at once and is admitted. Creation, binding, the status
    subresource and deletion are not matched.
    """

    def __init__(self, testbed: Testbed, namespace: str) -> None:
        self.testbed, self.namespace = testbed, namespace
        self.name = f"hold-pod-updates-{namespace}"
        self._listener: socket.socket | None = None
        self._held: list[socket.socket] = []
        self._lock = threading.Lock()
        self._port = 0

    def install(self) -> PodWriteHold:
        self.engage()
        self.testbed.apply(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": self.name},
                "webhooks": [
                    {
                        "name": "hold.e2e.dralloc.dev",
                        "clientConfig": {"url": f"https://127.0.0.1:{self._port}/hold"},
                        "rules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": ["UPDATE"],
                                "resources": ["pods"],
                                "scope": "Namespaced",
                            }
                        ],
                        "namespaceSelector": {
                            "matchLabels": {"kubernetes.io/metadata.name": self.namespace}
                        },
                        "failurePolicy": "Ignore",
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                        "timeoutSeconds": 30,
                    }
                ],
            }
        )
        return self

    def engage(self) -> None:
        """From now on, pod updates wait (on the same port the webhook names)."""
        with self._lock:
            if self._listener is not None:
                return
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self._port))
            listener.listen(64)
            self._port = listener.getsockname()[1]
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return  # released
            with self._lock:
                if self._listener is not listener:
                    connection.close()
                    return
                self._held.append(connection)

    def release(self) -> None:
        """Every held update goes on (admitted, the webhook failing), and new ones pass."""
        with self._lock:
            listener, self._listener = self._listener, None
            held, self._held = self._held, []
        if listener is not None:
            with contextlib.suppress(OSError):  # wakes the accept() blocked on it (Linux)
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for connection in held:
            connection.close()

    def uninstall(self) -> None:
        self.release()
        self.testbed.kubectl(
            "delete", "validatingwebhookconfiguration", self.name, "--ignore-not-found",
            check=False,
        )  # fmt: skip


def pod_writes_in_flight(testbed: Testbed, namespace: str, gate: str) -> list[str]:
    """Pods whose claim writes landed and whose own write did not: still carrying ``gate``,
    with a claim allocated and reserved for them. Read from the API server."""
    mode = testbed.api_mode
    pods = (testbed.get("pods", f"--namespace={namespace}") or {}).get("items") or []
    gated = {
        p["metadata"]["uid"]: p["metadata"]["name"]
        for p in pods
        if any(g.get("name") == gate for g in p["spec"].get("schedulingGates") or [])
    }
    claims = (testbed.get(mode.resource("resourceclaims"), f"--namespace={namespace}") or {}).get(
        "items"
    ) or []
    return sorted(
        {
            gated[r["uid"]]
            for c in claims
            if (c.get("status") or {}).get("allocation")
            for r in (c.get("status") or {}).get("reservedFor") or []
            if r.get("uid") in gated
        }
    )
