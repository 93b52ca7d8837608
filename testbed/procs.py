"""Processes of a testbed: start them into a state directory, wait for them, stop them.

Why a module of its own: the control plane (control.py) and the real nodes (realnode.py) start
and stop daemons the same way, and `down` must stop both with the same pid checks. Standard
library only, like the rest of testbed/.
"""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

READY_TIMEOUT_S = 120.0
STOP_GRACE_S = 10.0


class TestbedError(RuntimeError):
    """A start or stop step failed; the message says which and where the logs are."""


@dataclass
class Component:
    name: str
    pid: int
    start_time: int  # /proc/<pid>/stat field 22: tells a recycled pid apart
    log: str


class Recorder(Protocol):
    """Where started components are recorded (the testbed's State)."""

    dir: str
    components: list[Component]

    def save(self) -> None: ...


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
    what: str,
    check: Callable[[], bool],
    component: Component | None,
    deadline: float,
    interval: float = 0.25,
) -> None:
    while time.monotonic() < deadline:
        if check():
            return
        if component is not None and process_start_time(component.pid) is None:
            raise TestbedError(
                f"{what}: process exited; log: {component.log}\n{tail(component.log)}"
            )
        time.sleep(interval)
    log = f"; log: {component.log}\n{tail(component.log)}" if component else ""
    raise TestbedError(f"{what}: not ready in time{log}")


def tail(path: str, lines: int = 15) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def start(
    state: Recorder,
    name: str,
    argv: list[str],
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> Component:
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
            cwd=cwd or state.dir,
        )
    start_time = process_start_time(proc.pid)
    component = Component(name, proc.pid, start_time or 0, str(log_path))
    state.components.append(component)
    state.save()
    return component


def command_of(component: Component) -> tuple[list[str], dict[str, str]]:
    """How a running component was started (its command line and environment, as /proc has
    them), to start it again after a fault stopped it."""
    proc = Path(f"/proc/{component.pid}")
    argv = [a.decode() for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
    env = dict(
        item.decode().split("=", 1)
        for item in (proc / "environ").read_bytes().split(b"\0")
        if b"=" in item
    )
    return argv, env


def stop_components(components: list[Component]) -> list[str]:
    """Stop the recorded components in reverse start order; returns what was stopped."""
    stopped = []
    for component in reversed(components):
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
