"""The run's control plane and operators: start, stop, restart, kill.

A run uses a testbed from ``testbed/`` (started here with ``testbed/up``, or one already
running, e.g. the e2e suite's), and its own operator processes (``python -m operators``),
each on the run's Lease. Faults need the testbed's processes: they are found in its
``state.json`` and restarted with the same command line and environment, recorded there
again, so ``testbed/down`` still stops them.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Final

import yaml

from tests.testbed_scripts import load_testbed_script

REPO_ROOT: Final = Path(__file__).resolve().parents[1]
TESTBED_DIR: Final = REPO_ROOT / "testbed"
DRALLOC_GROUP: Final = "resource.dralloc.dev"
KUBERNETES_GROUP: Final = "resource.k8s.io"


@dataclass(frozen=True)
class Mode:
    """The operator's API mode, as the run needs it."""

    name: str
    group: str
    operator_args: tuple[str, ...]
    up_args: tuple[str, ...]
    """``testbed/up`` flags of the control plane this mode runs on."""

    @property
    def in_tree(self) -> bool:
        return self.group == KUBERNETES_GROUP

    @property
    def api_version(self) -> str:
        return f"{self.group}/v1"


CRD: Final = Mode("crd", DRALLOC_GROUP, (), ())
IN_TREE: Final = Mode(
    "in-tree", KUBERNETES_GROUP, (f"--api-group={KUBERNETES_GROUP}",), ("--dra", "--no-kcm-dra")
)
MODES: Final = {m.name: m for m in (CRD, IN_TREE)}


CLAIM_ALLOCATION_POLICY: Final = REPO_ROOT / "manifests" / "base" / "claim-allocation-policy.yaml"
OPERATOR_IDENTITY: Final = REPO_ROOT / "manifests" / "base" / "pod-protocol-identity.yaml"
OPERATOR_NAMESPACE: Final = "dralloc-system"


def claim_allocation_policy(
    name: str,
    namespaces: Sequence[str],
    usernames: Sequence[str],
    group: str = KUBERNETES_GROUP,
    extended_classes: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """The shipped claim-allocation policy (for the claims of ``group``: the in-tree
    component's switch), named ``name`` with a binding and parameters of its own over
    ``namespaces`` only: a run (or a test) guards its own namespaces without touching the
    shipped objects, nor what other tests on the same control plane leave to kube-scheduler.
    ``usernames``: the operator's user names (the API server's view of its credentials)."""
    documents = [d for d in yaml.safe_load_all(CLAIM_ALLOCATION_POLICY.read_text()) if d]
    policy = next(d for d in documents if d["kind"] == "ValidatingAdmissionPolicy")
    binding = next(d for d in documents if d["kind"] == "ValidatingAdmissionPolicyBinding")
    params = yaml.safe_load(OPERATOR_IDENTITY.read_text())
    params["metadata"]["name"] = name
    params["data"] |= {
        "usernames": ",".join(usernames),
        "groups": "",
        "extendedClasses": ",".join(extended_classes),
    }
    policy["metadata"]["name"] = name
    policy["spec"]["matchConstraints"]["resourceRules"][0]["apiGroups"] = [group]
    binding["metadata"]["name"] = name
    binding["spec"]["policyName"] = name
    binding["spec"]["paramRef"]["name"] = name
    binding["spec"]["matchResources"]["namespaceSelector"] = {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(namespaces)}
        ]
    }
    return [params, policy, binding]


REFUSED: Final = "are allocated by the dralloc operator only"
"""What the claim-allocation policy's refusal says."""


def wait_policy_in_force(bin_dir: Path, kubeconfig: Path, namespace: str) -> None:
    """Wait until the claim-allocation policy refuses an allocation in ``namespace`` (a new
    policy or binding takes a moment to be in force): a probe claim of resource.k8s.io is
    allocated by hand (the admin is no operator) until the API server refuses it."""
    name = f"policy-probe-{os.getpid()}"

    def kubectl(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(bin_dir / "kubectl"), f"--kubeconfig={kubeconfig}", f"--namespace={namespace}",
             *args],
            input=input, capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip

    probe = {
        "apiVersion": f"{KUBERNETES_GROUP}/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "probe"}}]}},
    }
    result = {"request": "r", "driver": "probe.example.com", "pool": "probe", "device": "probe"}
    allocate = {"status": {"allocation": {"devices": {"results": [result]}}}}
    resource = f"resourceclaims.{KUBERNETES_GROUP}"
    kubectl("create", "-f", "-", input=json.dumps(probe))
    deadline = time.monotonic() + 60
    try:
        while True:
            written = kubectl(
                "patch", resource, name, "--subresource=status", "--type=merge",
                "-p", json.dumps(allocate),
            )  # fmt: skip
            if written.returncode != 0 and REFUSED in written.stderr:
                return
            if written.returncode == 0:  # not in force yet: give the probe's device back
                kubectl(
                    "patch", resource, name, "--subresource=status", "--type=merge",
                    "-p", '{"status": {"allocation": null}}',
                )  # fmt: skip
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the claim-allocation policy is not in force in {namespace} after 60 s: "
                    f"{written.stderr.strip() or 'the probe allocation was admitted'}"
                )
            time.sleep(0.5)
    finally:
        kubectl("delete", resource, name, "--ignore-not-found", "--wait=false")


def claim_allocation_policy_removal(name: str) -> list[tuple[str, ...]]:
    """The kubectl arguments that delete what :func:`claim_allocation_policy` made (the
    binding first: without its parameters it would refuse every claim status write)."""
    return [
        ("delete", "validatingadmissionpolicybinding", name, "--ignore-not-found"),
        ("delete", "validatingadmissionpolicy", name, "--ignore-not-found"),
        ("delete", "configmap", name, f"--namespace={OPERATOR_NAMESPACE}", "--ignore-not-found"),
    ]


class Unavailable(RuntimeError):
    """What the run needs is not built or cannot start; the message says why."""


def find_binaries() -> Path:
    override = os.environ.get("DRALLOC_TESTBED_BIN")
    if override:
        return Path(override)
    found = subprocess.run(
        [str(TESTBED_DIR / "build"), "--check"], capture_output=True, text=True, check=False
    )
    lines = found.stdout.strip().splitlines()
    if found.returncode != 0 or not lines:
        raise Unavailable(lines[-1] if lines else found.stderr.strip() or "testbed/build --check")
    return Path(lines[-1])


@dataclass
class Cluster:
    kubeconfig: Path
    bin: Path
    state_dir: Path | None
    """The testbed's state directory; None for one the run may not restart (faults need it)."""
    mode: Mode
    owned: bool = False

    @classmethod
    def up(cls, mode: Mode, state_dir: Path, *, workload_api: bool = False) -> Cluster:
        """A fresh testbed of the mode's kind; ``workload_api`` serves PodGroups too."""
        bin_dir = find_binaries()
        args = [
            str(TESTBED_DIR / "up"), f"--dir={state_dir}", f"--bin={bin_dir}",
            f"--owner-pid={os.getpid()}", *mode.up_args,
            *(["--workload-api"] if workload_api else []),
        ]  # fmt: skip
        result = subprocess.run(args, capture_output=True, text=True, check=False, timeout=300)
        if result.returncode != 0:
            raise Unavailable(f"testbed/up failed: {result.stderr.strip()[-800:]}")
        kubeconfig = Path(result.stdout.strip().splitlines()[-1])
        return cls(kubeconfig, bin_dir, state_dir, mode, owned=True)

    def down(self) -> None:
        if self.owned and self.state_dir is not None:
            subprocess.run(
                [str(TESTBED_DIR / "down"), str(self.state_dir)], check=False, timeout=120
            )

    @property
    def operator_kubeconfig(self) -> Path:
        """The operator's own credentials (a user name of its own, which the admission
        policies trust as the operator's); the admin's for a testbed without them."""
        own = self.kubeconfig.with_name("operator.kubeconfig")
        return own if own.is_file() else self.kubeconfig

    def operator_user(self) -> str:
        """The user name the API server sees for :attr:`operator_kubeconfig`."""
        return self.kubectl(
            f"--kubeconfig={self.operator_kubeconfig}", "auth", "whoami",
            "-o", "jsonpath={.status.userInfo.username}",
        ).strip()  # fmt: skip

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            [str(self.bin / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=input, capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        if check and result.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def wait_established(self, *crds: str, timeout: float = 60.0) -> None:
        """Wait until the CustomResourceDefinitions are Established; ``kubectl wait`` gives up
        at once on one just created whose status has no conditions yet (".status.conditions
        accessor error"), so that answer is asked again until the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(1, int(deadline - time.monotonic()))
            args = ("wait", "--for=condition=Established", f"--timeout={left}s", *crds)
            try:
                self.kubectl(*args)
                return
            except RuntimeError as error:
                if "accessor error" not in str(error) or time.monotonic() >= deadline:
                    raise
            time.sleep(0.2)

    def apply(self, *manifests: Mapping[str, Any]) -> None:
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(manifests)})
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=body)

    def ready(self) -> bool:
        return (
            subprocess.run(
                [str(self.bin / "kubectl"), f"--kubeconfig={self.kubeconfig}", "get", "--raw", "/readyz"],
                capture_output=True, check=False, timeout=30,
            ).returncode
            == 0
        )  # fmt: skip

    # -- the testbed's processes ---------------------------------------------------------------

    def _control(self) -> ModuleType:
        return load_testbed_script("control", "robustness_testbed_control")

    def restart(self, name: str, down_for: float, wait: Callable[[], bool] | None = None) -> None:
        """Stop a component (SIGTERM to its group, SIGKILL after 10 s), keep it down for
        ``down_for`` seconds, start it again with its own command and environment."""
        if self.state_dir is None:
            raise Unavailable(f"restarting {name} needs a testbed this process may restart")
        control = self._control()
        state = control.State.load(self.state_dir)
        running = [
            c for c in state.components
            if c.name == name and control.process_start_time(c.pid) == c.start_time
        ]  # fmt: skip
        if not running:
            raise RuntimeError(f"no running {name} in the testbed's state.json")
        component = running[-1]
        argv, env = control.command_of(component)
        control.stop_components([component])
        time.sleep(down_for)
        control.start(state, name, argv, env)
        _wait(f"{name} back", wait or (lambda: True), 90)

    def etcd_compact(self) -> int:
        """Compact etcd to its current revision (what kube-apiserver does every 5 minutes);
        returns the revision. Watches behind it then get 410."""
        if self.state_dir is None:
            raise Unavailable("compacting etcd needs the testbed's state")
        port = self._control().State.load(self.state_dir).ports.etcd_client
        base = f"http://127.0.0.1:{port}/v3/kv"
        key = base64.b64encode(b"/registry").decode()
        header = _post(f"{base}/range", {"key": key, "limit": 1, "keys_only": True})["header"]
        revision = int(header["revision"])
        _post(f"{base}/compaction", {"revision": revision, "physical": True})
        return revision


def _post(url: str, body: Mapping[str, Any]) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def _wait(what: str, done: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.5)


@dataclass
class Operator:
    """``python -m operators`` on the run's Lease; its log is kept for the report."""

    cluster: Cluster
    log_path: Path
    lease: str
    identity: str
    extra: tuple[str, ...] = ()
    kubeconfig: Path | None = None
    """How it reaches the API server (the run's proxy); default the cluster's own, as the
    operator's identity."""
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> Operator:
        args = [
            sys.executable, "-m", "operators",
            f"--kubeconfig={self.kubeconfig or self.cluster.operator_kubeconfig}",
            "--metrics-port=0", "--probe-port=0",
            "--lease-duration=8", "--renew-deadline=6", "--retry-period=1",
            "--requeue-max-delay=2", "--log-format=json", "--log-level=INFO",
            f"--lease-name={self.lease}", f"--identity={self.identity}",
            *self.cluster.mode.operator_args, *self.extra,
        ]  # fmt: skip
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                args, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, env=self.cluster.env()
            )
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_ready(self, timeout: float = 120) -> None:
        def ready() -> bool:
            if not self.alive():
                raise RuntimeError(f"operator {self.identity} exited:\n{self.log()[-2000:]}")
            return "controllers starting" in self.log()

        _wait(f"operator {self.identity} ready", ready, timeout)

    def kill(self) -> None:
        if self.alive():
            assert self.process is not None
            self.process.kill()
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
