"""`testbed/up --real-nodes` and `testbed/down` on the host: a kubelet changes its host
(sysctls, iptables, hard-coded paths, cgroups, a bridge, mounts), and `down` must put every bit
of it back, also with a pod still running; a second testbed with real nodes is refused while
one runs; kwok leaves the real node to its kubelet while it still fakes the kwok nodes.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .kube_helpers import (
    TESTBED_DIR,
    Testbed,
    TestbedRegistry,
    start_testbed,
    stop_testbed,
    unique_name,
    wait_for,
    wait_for_real_nodes,
)

pytestmark = [pytest.mark.timeout(300), pytest.mark.real_node]

SYSCTLS = ("kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory", "net/ipv4/ip_forward")
HOST_PATHS = ("/var/lib/kubelet", "/var/log/containers", "/var/lib/cni", "/var/log/pods",
              "/var/lib/dralloc-testbed")  # fmt: skip


def iptables() -> str:
    """Every iptables and ip6tables rule, without counters and the save comments."""
    out = []
    for family in ("iptables-save", "ip6tables-save"):
        text = subprocess.run([family], capture_output=True, text=True, check=True).stdout
        out += [re.sub(r"\[\d+:\d+\]", "", line) for line in text.splitlines()
                if not line.startswith("#")]  # fmt: skip
    return "\n".join(out)


def host() -> dict[str, Any]:
    cgroups = sorted(str(p) for p in Path("/sys/fs/cgroup").glob("*/dralloc-testbed-*"))
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    return {
        "sysctls": {n: Path("/proc/sys", n).read_text().strip() for n in SYSCTLS},
        "iptables": iptables(),
        "paths": {p: Path(p).exists() for p in HOST_PATHS},
        "cgroups": cgroups,
        "mounts": sorted(m for m in mounts if "dralloc-testbed" in m or "/kubelet" in m),
        "bridge": "dralloc0" in links.stdout,
    }


def processes_under(root: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if root in cmdline:
                found.append(cmdline)
    return found


@pytest.fixture
def bin_dir(testbeds: TestbedRegistry) -> Path:
    reason = wait_for_real_nodes(testbeds)
    if reason:
        pytest.skip(f"real nodes unavailable: {reason}")
    return testbeds.bin


def test_down_puts_the_host_back_with_a_pod_still_running(bin_dir: Path, tmp_path: Path) -> None:
    before = host()
    testbed: Testbed = start_testbed(tmp_path / "tb", bin_dir, dra=True, real_nodes=1)
    try:
        testbed.create_nodes(1, {}, "kwok")
        name = unique_name("sleeper")
        testbed.apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "nodeName": "real-node-0",
                    "containers": [
                        {
                            "name": "c",
                            "image": "localhost/busybox:testbed",
                            "imagePullPolicy": "Never",
                            "command": ["sleep", "3600"],
                        }
                    ],
                },
            }
        )
        wait_for(
            "the pod Running on the real node",
            lambda: (testbed.get("pod", name) or {}).get("status", {}).get("phase") == "Running",
            timeout=90,
        )
        during = host()
        assert during != before, "a real node that changes nothing on the host: test is void"
        assert during["cgroups"] and during["bridge"], during

        # kwok fakes its node, not the real one: the real node's kubelet reports itself.
        nodes = {n["metadata"]["name"]: n for n in testbed.get("nodes")["items"]}  # type: ignore[index]
        assert set(nodes) == {"kwok-0", "real-node-0"}
        real_runtime = nodes["real-node-0"]["status"]["nodeInfo"]["containerRuntimeVersion"]
        assert real_runtime.startswith("containerd://"), real_runtime

        second = subprocess.run(
            [str(TESTBED_DIR / "up"), f"--dir={tmp_path / 'second'}", f"--bin={bin_dir}",
             "--real-nodes=1"],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        assert second.returncode != 0
        assert "another testbed with real nodes runs on this host" in second.stderr
        assert str(tmp_path / "tb") in second.stderr
        state = json.loads((tmp_path / "tb" / "state.json").read_text())
        root = state["real_nodes"][0]["root"]
    finally:
        stop_testbed(testbed)

    assert host() == before
    assert processes_under(root) == []
