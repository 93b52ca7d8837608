"""Helpers for end-to-end tests against the loopback control plane from `testbed/`.

Why here and not in the package: they drive the testbed scripts and kubectl, which only the
tests need. The fixtures in `conftest.py` are thin wrappers around these functions.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from tests.testbed_scripts import load_testbed_script

from .modes import (
    CRD,
    TESTBED_DRA,
    TESTBED_DRA_SCHEDULER,
    TESTBED_DRA_SCHEDULER_WORKLOAD,
    TESTBED_PLAIN,
    TESTBED_PLAIN_WORKLOAD,
    TESTBED_REAL_NODE,
    TESTBED_REAL_NODE_DRA,
    ApiMode,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTBED_DIR = REPO_ROOT / "testbed"
UP_TIMEOUT_S = 240.0
KUBECTL_TIMEOUT_S = 120.0

JsonObject = dict[str, Any]


class TestbedUnavailable(RuntimeError):
    """The binaries are not built; the message is the reason (shown as the skip reason)."""

    __test__ = False


def find_binaries() -> Path:
    """The directory with kubectl & co. from `testbed/build`, without building.

    `$DRALLOC_TESTBED_BIN` overrides the lookup. Raises TestbedUnavailable with the build's own
    explanation (e.g. the last build error) when they are missing.
    """
    override = os.environ.get("DRALLOC_TESTBED_BIN")
    if override:
        return Path(override)
    result = subprocess.run(
        [str(TESTBED_DIR / "build"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        reason = lines[-1] if lines else (result.stderr.strip() or "testbed/build --check failed")
        raise TestbedUnavailable(reason)
    return Path(lines[-1])


@dataclass(frozen=True)
class Testbed:
    """A running control plane.

    kubeconfig: admin kubeconfig (client certificate, system:masters).
    bin: directory holding kubectl, kube-apiserver, ... from `testbed/build`.
    state_dir: the `testbed/up` state directory (logs in `logs/`), or None for a testbed that
        was reused via an environment variable and is not ours to stop.
    dra: whether in-tree DRA (scheduler plugin + kcm's DRA controllers) is on.
    kcm_controllers: kube-controller-manager's --controllers as given to `testbed/up
        --kcm-controllers`, or None for the testbed's default (`state.json` records the list).
    api_mode: the operator's API mode the test runs in (modes.py); the operator fixtures
        take the kinds, the pod protocol and the operator's arguments from it.
    """

    __test__: ClassVar[bool] = False  # not a test class, despite the name

    kubeconfig: Path
    bin: Path
    state_dir: Path | None
    dra: bool
    kcm_controllers: str | None = None
    api_mode: ApiMode = CRD
    real_nodes: tuple[str, ...] = ()
    """Names of the real nodes (kubelet + containerd + DRA test driver), if any."""

    @property
    def operator_kubeconfig(self) -> Path:
        """The operator's own credentials (``testbed/up`` writes ``operator.kubeconfig``: all
        rights, a user name of its own that admission policies trust as the operator's);
        the admin's for a reused testbed without one."""
        own = self.kubeconfig.with_name("operator.kubeconfig")
        return own if own.is_file() else self.kubeconfig

    @property
    def operator_user(self) -> str:
        """The user name the API server sees for the operator's requests."""
        result = subprocess.run(
            [str(self.bin / "kubectl"), f"--kubeconfig={self.operator_kubeconfig}", "auth",
             "whoami", "-o", "jsonpath={.status.userInfo.username}"],
            capture_output=True, text=True, check=True, timeout=KUBECTL_TIMEOUT_S,
        )  # fmt: skip
        return result.stdout.strip()

    def in_mode(self, mode: ApiMode) -> Testbed:
        """This control plane, seen by a test of ``mode``."""
        return self if mode == self.api_mode else replace(self, api_mode=mode)

    def env(self) -> dict[str, str]:
        """os.environ plus KUBECONFIG and PATH pointing at this testbed (for subprocesses)."""
        return {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def wait_established(self, *crds: str, timeout: float = 60.0) -> None:
        """Wait until the CustomResourceDefinitions (``crd/<name>``) are Established.

        ``kubectl wait`` gives up at once, instead of waiting, on a definition just created
        whose status has no conditions yet (".status.conditions accessor error: <nil>"); CI
        lost a module's setup to it. That answer is asked again until the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(1, int(deadline - time.monotonic()))
            result = self.kubectl(
                "wait", "--for=condition=Established", f"--timeout={left}s", *crds, check=False
            )
            if result.returncode == 0:
                return
            if "accessor error" not in result.stderr or time.monotonic() >= deadline:
                raise AssertionError(f"{' '.join(crds)} not Established: {result.stderr.strip()}")
            time.sleep(0.2)

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = KUBECTL_TIMEOUT_S,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this testbed; with check=True a non-zero exit raises with stderr."""
        result = subprocess.run(
            [str(self.bin / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}"
            )
        return result

    def apply(self, *manifests: Mapping[str, Any]) -> None:
        """Server-side apply (forcing ownership of conflicting fields) of manifests as dicts."""
        doc = {"apiVersion": "v1", "kind": "List", "items": list(manifests)}
        self.kubectl(
            "apply", "--server-side", "--force-conflicts", "--field-manager=e2e", "-f", "-",
            input=json.dumps(doc),
        )  # fmt: skip

    def get(self, *args: str) -> JsonObject | None:
        """`kubectl get ... -o json`, or None when the object does not exist."""
        result = self.kubectl("get", *args, "-o", "json", check=False)
        if result.returncode != 0:
            if "NotFound" in result.stderr or "not found" in result.stderr:
                return None
            raise AssertionError(f"kubectl get {' '.join(args)}: {result.stderr.strip()}")
        obj: JsonObject = json.loads(result.stdout)
        return obj

    def create_nodes(
        self,
        count: int,
        labels: Mapping[str, str],
        prefix: str,
        *,
        cpu: str | int | None = None,
        memory: str | None = None,
        pods: int | None = None,
    ) -> list[str]:
        """Create kwok fake nodes through `testbed/nodes`; returns their names.

        cpu, memory (Kubernetes quantities) and pods set capacity and allocatable; None keeps
        the script's defaults (sized so that only devices limit a pod).
        """
        label_args = [arg for k, v in labels.items() for arg in ("--label", f"{k}={v}")]
        size = {"--cpu": cpu, "--memory": memory, "--pods": pods}
        size_args = [f"{flag}={value}" for flag, value in size.items() if value is not None]
        result = subprocess.run(
            [str(TESTBED_DIR / "nodes"), f"--kubeconfig={self.kubeconfig}", f"--bin={self.bin}",
             f"--prefix={prefix}", *label_args, *size_args, str(count)],
            capture_output=True, text=True, check=False, timeout=KUBECTL_TIMEOUT_S,
        )  # fmt: skip
        if result.returncode != 0:
            raise AssertionError(f"testbed/nodes failed: {result.stderr.strip()}")
        return result.stdout.split()

    def logs_hint(self) -> str:
        return f" (component logs: {self.state_dir / 'logs'})" if self.state_dir else ""


def start_testbed(
    state_dir: Path,
    bin_dir: Path,
    *,
    dra: bool,
    kcm_controllers: str | None = None,
    kcm_dra: bool = True,
    real_nodes: int = 0,
    workload_api: bool = False,
) -> Testbed:
    """Run `testbed/up` into state_dir; raises with its stderr if the control plane fails.

    The testbed stops itself when the calling process exits, even without `stop_testbed`.
    """
    # The owner pid makes the testbed stop itself should this test process be killed.
    args = [
        str(TESTBED_DIR / "up"),
        f"--dir={state_dir}",
        f"--bin={bin_dir}",
        f"--owner-pid={os.getpid()}",
    ]
    if dra:
        args.append("--dra")
    if kcm_controllers is not None:
        args.append(f"--kcm-controllers={kcm_controllers}")
    if not kcm_dra:
        args.append("--no-kcm-dra")
    if real_nodes:
        args.append(f"--real-nodes={real_nodes}")
    if workload_api:
        args.append("--workload-api")
    result = subprocess.run(args, capture_output=True, text=True, check=False, timeout=UP_TIMEOUT_S)
    if result.returncode != 0:
        raise RuntimeError(f"testbed/up failed:\n{result.stderr.strip()}")
    kubeconfig = Path(result.stdout.strip().splitlines()[-1])
    return Testbed(
        kubeconfig=kubeconfig,
        bin=bin_dir,
        state_dir=state_dir,
        dra=dra,
        kcm_controllers=kcm_controllers,
        real_nodes=tuple(f"real-node-{i}" for i in range(real_nodes)),
    )


def k8s_minor(bin_dir: Path) -> int:
    """The Kubernetes minor version of the testbed's binaries (testbed/control.py reads it)."""
    minor: int = load_testbed_script("control").k8s_minor(bin_dir)
    return minor


def workload_api_missing(bin_dir: Path) -> str | None:
    """Why a testbed of these binaries cannot serve upstream's Workload API, or None."""
    control = load_testbed_script("control")
    minor = k8s_minor(bin_dir)
    if minor >= control.WORKLOAD_API_MIN_MINOR:
        return None
    return (
        f"the Workload API ({control.WORKLOAD_API_VERSION}) needs Kubernetes "
        f"1.{control.WORKLOAD_API_MIN_MINOR}+; the testbed runs 1.{minor}"
    )


def real_nodes_unavailable(bin_dir: Path) -> str | None:
    """Why this host cannot run real nodes (testbed/realnode.py says), or None."""
    reason: str | None = load_testbed_script("realnode").unavailable(bin_dir)
    return reason


HOST_BUSY = "another testbed with real nodes runs on this host"
HOST_WAIT_S = 300.0


def wait_for_real_nodes(registry: TestbedRegistry) -> str | None:
    """Free the host for a testbed with real nodes: stop this session's own, then wait (up to
    HOST_WAIT_S) while another session's holds it. Returns why real nodes cannot run, or None."""
    registry.stop_real_nodes()
    deadline = time.monotonic() + HOST_WAIT_S
    while True:
        reason = real_nodes_unavailable(registry.bin)
        if reason is None or HOST_BUSY not in reason or time.monotonic() > deadline:
            return reason
        time.sleep(5)


def stop_testbed(testbed: Testbed) -> None:
    if testbed.state_dir is not None:
        subprocess.run(
            [str(TESTBED_DIR / "down"), str(testbed.state_dir)], check=False, timeout=120
        )


@dataclass(frozen=True)
class TestbedKind:
    """One way of starting a testbed, named for the tests that need it (modes.TESTBED_*)."""

    __test__: ClassVar[bool] = False

    name: str
    dra: bool
    kcm_dra: bool = True
    """kube-controller-manager runs its DRA controllers (with ``dra``); False where dralloc's
    claim and taint controllers replace them (``testbed/up --no-kcm-dra``)."""
    real_nodes: int = 0
    """Real nodes to start beside kwok (one testbed with real nodes per host at a time)."""
    workload_api: bool = False
    """Upstream's Workload API served (``testbed/up --workload-api``)."""
    reuse_env: str = ""
    """An environment variable naming the kubeconfig of a running testbed of this kind, to
    use instead of starting one (for debugging; such a testbed is never stopped)."""


TESTBED_KINDS: dict[str, TestbedKind] = {
    kind.name: kind
    for kind in (
        TestbedKind(TESTBED_PLAIN, dra=False, reuse_env="DRALLOC_KUBECONFIG"),
        TestbedKind(TESTBED_DRA, dra=True, reuse_env="DRALLOC_DRA_KUBECONFIG"),
        TestbedKind(
            TESTBED_DRA_SCHEDULER,
            dra=True,
            kcm_dra=False,
            reuse_env="DRALLOC_DRA_SCHEDULER_KUBECONFIG",
        ),
        TestbedKind(
            TESTBED_REAL_NODE_DRA,
            dra=True,
            real_nodes=1,
            reuse_env="DRALLOC_REAL_NODE_DRA_KUBECONFIG",
        ),
        TestbedKind(
            TESTBED_REAL_NODE,
            dra=True,
            kcm_dra=False,
            real_nodes=1,
            reuse_env="DRALLOC_REAL_NODE_KUBECONFIG",
        ),
        TestbedKind(
            TESTBED_PLAIN_WORKLOAD,
            dra=False,
            workload_api=True,
            reuse_env="DRALLOC_WORKLOAD_KUBECONFIG",
        ),
        TestbedKind(
            TESTBED_DRA_SCHEDULER_WORKLOAD,
            dra=True,
            kcm_dra=False,
            workload_api=True,
            reuse_env="DRALLOC_DRA_SCHEDULER_WORKLOAD_KUBECONFIG",
        ),
    )
}


@dataclass
class TestbedRegistry:
    """The testbeds of one test session by kind: each started at its first use (or reused
    from its kind's environment variable), all stopped by ``stop_all``.

    A kind that failed to start fails again at once for every later test that asks for it,
    with the first error, instead of being started again.
    """

    __test__: ClassVar[bool] = False

    bin: Path
    state_root: Callable[[str], Path]
    """Makes a fresh state directory for a testbed of the named kind."""
    running: dict[str, Testbed] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def get(self, kind_name: str) -> Testbed:
        if kind_name in self.running:
            return self.running[kind_name]
        if kind_name in self.failed:
            raise RuntimeError(
                f"testbed {kind_name!r} failed to start earlier:\n{self.failed[kind_name]}"
            )
        kind = TESTBED_KINDS[kind_name]
        if kind.workload_api and not os.environ.get(kind.reuse_env):
            missing = workload_api_missing(self.bin)
            if missing is not None:
                pytest.skip(missing)
        if kind.real_nodes:
            self.stop_real_nodes()
        reused = os.environ.get(kind.reuse_env)
        if reused:
            testbed = Testbed(
                kubeconfig=Path(reused), bin=self.bin, state_dir=None, dra=kind.dra,
                real_nodes=tuple(f"real-node-{i}" for i in range(kind.real_nodes)),
            )  # fmt: skip
        else:
            try:
                testbed = start_testbed(
                    self.state_root(kind.name), self.bin, dra=kind.dra,
                    kcm_dra=kind.kcm_dra, real_nodes=kind.real_nodes,
                    workload_api=kind.workload_api,
                )  # fmt: skip
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                self.failed[kind_name] = str(exc)
                raise
        self.running[kind_name] = testbed
        return testbed

    def stop_real_nodes(self) -> None:
        """Stop the running testbed with real nodes, if any: they use host-wide paths, so one
        such testbed runs at a time."""
        for name, running in list(self.running.items()):
            if running.real_nodes:
                stop_testbed(running)
                del self.running[name]

    def stop(self, kind_name: str) -> None:
        """Stop the testbed of one kind if this registry started it (a module that alone
        needs a kind frees its memory when it is done; a later ``get`` starts it again)."""
        running = self.running.pop(kind_name, None)
        if running is not None:
            stop_testbed(running)

    def stop_all(self) -> None:
        for testbed in self.running.values():
            stop_testbed(testbed)
        self.running.clear()


def token_kubeconfig(testbed: Testbed, token: str, path: Path) -> Path:
    """The testbed's kubeconfig with a bearer token (e.g. a pod-bound ServiceAccount token)
    as its one user."""
    config = yaml.safe_load(testbed.kubeconfig.read_text())
    config["users"] = [{"name": "token", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "token"
    path.write_text(yaml.safe_dump(config))
    return path


def unique_name(prefix: str) -> str:
    """A DNS-1123 name unlikely to clash on a reused testbed."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_for(
    what: str,
    probe: Callable[[], Any],
    *,
    timeout: float = 60.0,
    interval: float = 0.5,
) -> Any:
    """Poll probe() until it returns something truthy and return that; fail after timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")
