"""Real nodes next to kwok's fake ones: containerd + runc + kubelet + upstream's DRA test
driver on this host, each node with its own directories, cgroup root, ports and pod subnet.

Why: kwok runs no containers and calls no driver, so only a real kubelet shows that a device
dralloc allocated reaches a container (the driver's CDI spec sets environment variables) and is
unprepared when the pod ends, and only a real node runs the operator's own image.

A kubelet changes its host the way it does on any machine: sysctls, iptables chains, a few
paths it hard-codes, cgroups; CNI adds a bridge; kube-proxy (one per host, for Service IPs)
adds iptables rules. `start_nodes` records the host first and `teardown` puts it back, also
when the testbed's watchdog runs it after a killed test run. Because of those host-wide paths
only one testbed with real nodes runs on a host at a time: a lock file names its owner.

Needs root, the binaries of `testbed/build` (its real-node part) and Debian's runc,
busybox-static, containernetworking-plugins and iptables; `unavailable` says what is missing.
Every fix a probe of a real VM needed is here: restrict_oom_score_adj (root without CAP_SYS_RESOURCE), failCgroupV1=false, the driver's
socket directory made beforehand, kwok limited to annotated nodes (control.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

import ociimage
from procs import Component, Recorder, TestbedError, start, tail, wait_until

# Short on purpose: unix socket paths (the driver's, containerd's) must stay under 108 bytes.
HOST_ROOT = Path("/var/lib/dralloc-testbed")
OWNER_FILE = HOST_ROOT / "owner.json"
BRIDGE = "dralloc0"
CLUSTER_CIDR = "10.88.0.0/16"
DRIVER = "test-driver.cdi.k8s.io"
BUSYBOX_IMAGE = "localhost/busybox:testbed"
PAUSE_IMAGE = "localhost/pause:testbed"
NODE_LABEL = "testbed.dralloc.dev/node"
START_TIMEOUT_S = 120.0
# containerd's limit for the shim manager's socket_dir (core/runtime/v2/socket_linux.go).
SHIM_SOCKET_DIR_MAX = 42

# Built by testbed/build into the bin directory.
BINARIES = ("kubelet", "kube-proxy", "dra-test-driver", "containerd", "containerd-shim-runc-v2",
            "ctr", "pause")  # fmt: skip
# From Debian packages: what provides each, for the reason when one is missing.
HOST_FILES = {
    "/usr/sbin/runc": "runc",
    "/bin/busybox": "busybox-static",
    "/usr/lib/cni/bridge": "containernetworking-plugins",
    "/usr/lib/cni/host-local": "containernetworking-plugins",
    "/usr/lib/cni/loopback": "containernetworking-plugins",
    "/usr/sbin/iptables-save": "iptables",
    "/usr/sbin/iptables-restore": "iptables",
    "/usr/sbin/ip6tables-save": "iptables",
    "/usr/sbin/ip6tables-restore": "iptables",
    "/usr/sbin/ip": "iproute2",
}
DEBIAN_PACKAGES = sorted(set(HOST_FILES.values()))
# What a kubelet or kube-proxy sets on its host (probe: kubelet's protectKernelDefaults=false;
# the kubelet's list is setupKernelTunables in pkg/kubelet/cm/container_manager_linux.go).
SYSCTLS = (
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
)
# Paths the kubelet and libcni use whatever their configuration says.
HARDCODED_PATHS = ("/var/lib/kubelet", "/var/log/containers", "/var/lib/cni", "/var/log/pods")
IPTABLES_TABLES = ("filter", "nat", "mangle", "raw")
BUSYBOX_APPLETS = ("sh", "sleep", "echo", "env", "cat", "ls", "ps", "printenv", "true", "false",
                   "hostname", "grep", "wc", "id", "mkdir", "rm", "date", "head", "tail", "test",
                   "touch", "kill", "nc", "wget", "sed")  # fmt: skip


class TestbedState(Recorder, Protocol):
    kubeconfig: str
    server: str
    real_nodes: list[RealNode]


@dataclass
class RealNode:
    """One real node; recorded in state.json so `down` (or the watchdog) can undo it."""

    name: str
    root: str  # the node's directory on the host (kubelet root, containerd, CDI, CNI state)
    cgroup_root: str  # kubelet's cgroupRoot; pods' cgroups live below it in every hierarchy
    kubelet_port: int
    healthz_port: int
    subnet: str

    @property
    def containerd_socket(self) -> str:
        return f"{self.root}/containerd/containerd.sock"

    @property
    def cdi_dir(self) -> str:
        return f"{self.root}/cdi"


@dataclass
class HostRecord:
    """The host before the first real node started: what teardown restores."""

    sysctls: dict[str, str]
    iptables: dict[str, str]  # "<family>/<table>" -> iptables-save output ("" = table absent)
    created_paths: list[str]  # hard-coded paths that did not exist before


def unavailable(bin_dir: Path) -> str | None:
    """Why real nodes cannot start on this host, or None."""
    if os.geteuid() != 0:
        return "real nodes need root (kubelet, containerd, runc, iptables)"
    missing = [b for b in BINARIES if not (bin_dir / b).is_file()]
    if missing:
        error = bin_dir.parent / "realnode-error"
        why = error.read_text().strip() if error.is_file() else "run testbed/build"
        return f"real-node binaries missing in {bin_dir} ({', '.join(missing)}): {why}"
    absent = {pkg for path, pkg in HOST_FILES.items() if not Path(path).exists()}
    if absent:
        return (
            f"Debian packages missing: {' '.join(sorted(absent))} "
            f"(apt-get install {' '.join(DEBIAN_PACKAGES)}; testbed/build does it as root)"
        )
    if not Path("/sys/fs/cgroup").is_dir() or not _cgroup_hierarchies():
        return "no cgroup file system at /sys/fs/cgroup"
    owner = _live_owner()
    if owner is not None:
        return f"another testbed with real nodes runs on this host: {owner}"
    return None


def host_ip() -> str:
    """The address of the default route's interface: the nodes' InternalIP (the kubelet
    refuses a loopback --node-ip) and where pods reach the API server."""
    out = subprocess.run(
        ["ip", "-4", "-j", "route", "get", "192.0.2.255"], capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    if out.returncode == 0:
        with contextlib.suppress(ValueError, IndexError, KeyError):
            return str(json.loads(out.stdout)[0]["prefsrc"])
    raise TestbedError(f"cannot find this host's address (ip route get): {out.stderr.strip()}")


# ---------------------------------------------------------------------------------------------
# start


def start_nodes(
    state: TestbedState,
    bin_dir: Path,
    count: int,
    address: str,
    tls: ssl.SSLContext,
    ports: Sequence[int],
    devices: int,
) -> list[RealNode]:
    """Start ``count`` real nodes real-node-<i> (containerd, kubelet, test driver each) and one
    kube-proxy; returns when every node is Ready and has published its ResourceSlice.

    The caller records the returned nodes in its state *before* anything else can fail (it
    passes a list it saves); here nodes are appended to ``state.real_nodes`` as they start.
    """
    reason = unavailable(bin_dir)
    if reason:
        raise TestbedError(reason)
    state_dir = Path(state.dir)
    testbed_id = hashlib.sha256(str(state_dir).encode()).hexdigest()[:10]
    host_dir = HOST_ROOT / testbed_id
    _claim_host(state_dir)
    record = HostRecord(
        sysctls={name: value for name in SYSCTLS if (value := _read_sysctl(name)) is not None},
        iptables=_save_iptables(),
        created_paths=[p for p in HARDCODED_PATHS if not os.path.lexists(p)],
    )
    (state_dir / "host-record.json").write_text(json.dumps(asdict(record), indent=2))
    images = state_dir / "images"
    _write_images(images, bin_dir)
    nodes = state.real_nodes
    deadline = time.monotonic() + START_TIMEOUT_S
    for i in range(count):
        node = RealNode(
            name=f"real-node-{i}",
            root=str(host_dir / f"n{i}"),
            cgroup_root=f"/dralloc-testbed-{testbed_id}-n{i}",
            kubelet_port=ports[2 * i],
            healthz_port=ports[2 * i + 1],
            subnet=f"10.88.{i}.0/24",
        )
        nodes.append(node)
        state.save()
        _start_node(state, bin_dir, node, address, images, devices, tls, deadline)
    _start_kube_proxy(state, bin_dir, nodes[0], address, ports[2 * count :], deadline)
    return nodes


def _start_node(
    state: TestbedState,
    bin_dir: Path,
    node: RealNode,
    address: str,
    images: Path,
    devices: int,
    tls: ssl.SSLContext,
    deadline: float,
) -> None:
    root = Path(node.root)
    for sub in ("containerd", "kubelet/plugins_registry", f"kubelet/plugins/{DRIVER}", "cdi",
                "cni/net.d", "cni/networks", "pods-logs", "opt"):  # fmt: skip
        (root / sub).mkdir(parents=True, exist_ok=True)
    link = Path(state.dir) / "nodes" / node.name
    link.parent.mkdir(exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(root)
    for hierarchy in _cgroup_hierarchies():
        (hierarchy / node.cgroup_root.lstrip("/")).mkdir(exist_ok=True)
    (root / "cni/net.d/10-dralloc.conflist").write_text(json.dumps(_cni_config(node), indent=2))
    (root / "containerd/config.toml").write_text(_containerd_config(node))
    env = {"PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(root)}
    containerd = start(
        state,
        f"containerd-{node.name}",
        [str(bin_dir / "containerd"), f"--config={root / 'containerd/config.toml'}"],
        env=env,
    )
    ctr = [str(bin_dir / "ctr"), f"--address={node.containerd_socket}", "--namespace=k8s.io"]
    wait_until(
        f"containerd of {node.name}",
        lambda: subprocess.run([*ctr, "version"], capture_output=True, check=False).returncode == 0,
        containerd,
        deadline,
    )
    for archive in sorted(images.glob("*.tar")):
        _run([*ctr, "images", "import", str(archive)], f"import {archive.name}")

    kubelet_config = root / "kubelet/config.yaml"
    kubelet_config.write_text(json.dumps(_kubelet_config(node, address, state), indent=2))
    kubelet = start(
        state,
        f"kubelet-{node.name}",
        [
            str(bin_dir / "kubelet"),
            f"--config={kubelet_config}",
            f"--kubeconfig={state.kubeconfig}",
            f"--root-dir={root / 'kubelet'}",
            f"--cert-dir={root / 'kubelet/pki'}",
            f"--hostname-override={node.name}",
            f"--node-ip={address}",
            f"--node-labels={NODE_LABEL}=real",
            "--v=2",
        ],
        env=env,
    )
    wait_until(
        f"node {node.name} Ready",
        lambda: _node_ready(state.server, node.name, tls),
        kubelet,
        deadline,
        interval=0.5,
    )
    driver = start(
        state,
        f"dra-test-driver-{node.name}",
        [
            str(bin_dir / "dra-test-driver"),
            f"--kubeconfig={state.kubeconfig}",
            "-v=3",
            "kubelet-plugin",
            f"--node-name={node.name}",
            f"--plugin-registration-path={root / 'kubelet/plugins_registry'}",
            f"--datadir={root / 'kubelet/plugins'}",
            f"--cdi-dir={node.cdi_dir}",
            f"--num-devices={devices}",
        ],
        env=env,
    )
    wait_until(
        f"ResourceSlice of {node.name}",
        lambda: _has_slice(state.server, node.name, tls),
        driver,
        deadline,
        interval=0.5,
    )


def _start_kube_proxy(
    state: TestbedState,
    bin_dir: Path,
    node: RealNode,
    address: str,
    ports: Sequence[int],
    deadline: float,
) -> None:
    """One kube-proxy for the host: Service IPs (the `kubernetes` Service the in-cluster
    operator talks to, its webhook Service) for every real node's pods."""
    port, metrics_port = ports
    config = Path(state.dir) / "kube-proxy.yaml"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
                "kind": "KubeProxyConfiguration",
                "clientConnection": {"kubeconfig": state.kubeconfig},
                "mode": "iptables",
                "hostnameOverride": node.name,
                "bindAddress": address,
                "clusterCIDR": CLUSTER_CIDR,
                "healthzBindAddress": f"127.0.0.1:{port}",
                "metricsBindAddress": f"127.0.0.1:{metrics_port}",
                # Root here lacks CAP_SYS_RESOURCE: kube-proxy's default -999 would fail.
                "oomScoreAdj": 0,
                # Leave the host's conntrack sysctls and route_localnet alone.
                "conntrack": {
                    "maxPerCore": 0,
                    "min": 0,
                    "tcpEstablishedTimeout": "0s",
                    "tcpCloseWaitTimeout": "0s",
                },
                "iptables": {"localhostNodePorts": False},
                "nodePortAddresses": [f"{address}/32"],
            },
            indent=2,
        )
    )
    proxy = start(
        state,
        "kube-proxy",
        [str(bin_dir / "kube-proxy"), f"--config={config}", "--v=2"],
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )
    wait_until(
        "kube-proxy /healthz",
        lambda: _http_status(f"http://127.0.0.1:{port}/healthz") == 200,
        proxy,
        deadline,
        interval=0.5,
    )


def import_image(bin_dir: Path, nodes: Sequence[RealNode], archive: Path) -> None:
    """Import an OCI archive into every real node's containerd (images are never pulled)."""
    for node in nodes:
        _run(
            [str(bin_dir / "ctr"), f"--address={node.containerd_socket}", "--namespace=k8s.io",
             "images", "import", str(archive)],
            f"import {archive} into {node.name}",
        )  # fmt: skip


def _write_images(images: Path, bin_dir: Path) -> None:
    busybox = ociimage.ImageSpec(
        ref=BUSYBOX_IMAGE,
        files={"/bin/busybox": Path("/bin/busybox")},
        symlinks={f"/bin/{applet}": "busybox" for applet in BUSYBOX_APPLETS},
        directories={"/tmp": 0o1777, "/etc": 0o755},
        texts={"/etc/passwd": "root:x:0:0:root:/:/bin/sh\n", "/etc/group": "root:x:0:\n"},
        cmd=["/bin/sh"],
        env=["PATH=/bin"],
    )
    ociimage.write_archive(busybox, images / "busybox.tar")
    pause = ociimage.ImageSpec(
        ref=PAUSE_IMAGE, files={"/pause": bin_dir / "pause"}, entrypoint=["/pause"], env=[]
    )
    ociimage.write_archive(pause, images / "pause.tar")


def _containerd_config(node: RealNode) -> str:
    root = node.root
    runtime = "plugins.'io.containerd.cri.v1.runtime'"
    return f"""version = 3
root = "{root}/containerd/root"
state = "{root}/containerd/state"
[grpc]
  address = "{node.containerd_socket}"
[ttrpc]
  address = "{node.containerd_socket}.ttrpc"
[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = "{root}/opt"
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.shim.v1.manager']
    # Default /run/containerd/s: shims' sockets outside the node's directory.
    socket_dir = "{_shim_socket_dir(node)}"
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "{PAUSE_IMAGE}"
  [{runtime}]
    # Root here lacks CAP_SYS_RESOURCE: without this, runc fails to lower oom_score_adj.
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    cdi_spec_dirs = ["{node.cdi_dir}"]
    [{runtime}.containerd]
      default_runtime_name = "runc"
      [{runtime}.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [{runtime}.containerd.runtimes.runc.options]
          BinaryName = "/usr/sbin/runc"
          # Default /run/containerd/runc: runc's state of every container, never removed
          # for containers that were killed rather than deleted.
          Root = "{root}/runc"
          SystemdCgroup = false
    [{runtime}.cni]
      bin_dirs = ["/usr/lib/cni"]
      conf_dir = "{root}/cni/net.d"
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
"""


def _shim_socket_dir(node: RealNode) -> str:
    path = f"{node.root}/s"
    if len(path) > SHIM_SOCKET_DIR_MAX:  # containerd refuses longer ones (socket path limit)
        raise TestbedError(f"shim socket directory {path} longer than {SHIM_SOCKET_DIR_MAX}")
    return path


def _cni_config(node: RealNode) -> dict[str, object]:
    return {
        "cniVersion": "1.0.0",
        "name": "dralloc-testbed",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": node.subnet}]],
                    # The default route (via the bridge) is how pods reach Service IPs.
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": f"{node.root}/cni/networks",
                },
            },
            {"type": "loopback"},
        ],
    }


def _kubelet_config(node: RealNode, address: str, state: TestbedState) -> dict[str, object]:
    ca = str(Path(state.dir) / "pki" / "ca.crt")
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup_root,
        "failSwapOn": False,
        # kubelet 1.36 refuses cgroup v1 by default; this VM has a hybrid v1 hierarchy.
        "failCgroupV1": False,
        "containerRuntimeEndpoint": f"unix://{node.containerd_socket}",
        "address": address,
        "port": node.kubelet_port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": node.healthz_port,
        "podLogsDir": f"{node.root}/pods-logs",
        # The API server authenticates with the testbed's admin client certificate
        # (--kubelet-client-certificate); everything else is refused.
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": ca},
        },
        "authorization": {"mode": "Webhook"},
        "podCIDR": node.subnet,
        "imageGCHighThresholdPercent": 100,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "nodeStatusReportFrequency": "10s",
        "shutdownGracePeriod": "0s",
    }


# ---------------------------------------------------------------------------------------------
# teardown


def teardown(state_dir: Path, nodes: Sequence[RealNode]) -> None:
    """Undo the real nodes after their processes were stopped: kill what containerd's shims
    left (containers outlive containerd), unmount, remove cgroups and directories, restore
    the host's sysctls and iptables. Idempotent; every step runs even if an earlier fails.

    The host-wide part (iptables, sysctls, the bridge, the hard-coded paths) runs only while
    the lock file names this testbed: a second `down`, or a `down` of a testbed whose lock
    another testbed took over since, must not wipe what the current owner's nodes use."""
    # Paths and cgroups come from state.json: act only on what start_nodes could have made
    # (a damaged file must not turn into rmtree("/") or killing every process in a cgroup).
    nodes = [node for node in nodes if _is_ours(node)]
    roots = [Path(node.root) for node in nodes]
    _kill_leftovers(nodes)
    for root in roots:
        _unmount_below(root)
    for node in nodes:
        _remove_cgroups(node.cgroup_root)
    record_path = state_dir / "host-record.json"
    if record_path.exists() and _owner_state_dir() == str(state_dir):
        record = HostRecord(**json.loads(record_path.read_text()))
        _restore_iptables(record.iptables)
        for name, value in record.sysctls.items():
            if _read_sysctl(name) != value:
                with contextlib.suppress(OSError):
                    Path("/proc/sys", name).write_text(value)
        for path in record.created_paths:
            if path in HARDCODED_PATHS:
                _remove_tree(Path(path))
        subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, check=False)
    for root in roots:
        _remove_tree(root)
        with contextlib.suppress(OSError):
            root.parent.rmdir()
    _release_host(state_dir)


def _is_ours(node: RealNode) -> bool:
    root = Path(node.root)
    return (
        root.is_absolute()
        and ".." not in root.parts
        and root.parent.parent == HOST_ROOT
        and node.cgroup_root.startswith("/dralloc-testbed-")
        and ".." not in node.cgroup_root
    )


def _remove_tree(path: Path) -> None:
    """Unmount below ``path``, then delete it, unless a mount is still there: rmtree would
    follow it into whatever is mounted (a pod's subPath bind mount of a host directory)."""
    _unmount_below(path)
    if _mounts_below(path):
        return
    shutil.rmtree(path, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.unlink(path)


def _kill_leftovers(nodes: Sequence[RealNode]) -> None:
    """Containers (in the nodes' cgroups) and shims (started with the node's containerd
    address) survive their containerd; stop them, SIGKILL after a grace period."""

    def leftovers() -> set[int]:
        pids: set[int] = set()
        for node in nodes:
            for hierarchy in _cgroup_hierarchies():
                base = hierarchy / node.cgroup_root.lstrip("/")
                for procs in base.rglob("cgroup.procs") if base.is_dir() else ():
                    with contextlib.suppress(OSError, ValueError):
                        pids.update(int(p) for p in procs.read_text().split())
        markers = [node.root.encode() for node in nodes]
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                cmdline = (entry / "cmdline").read_bytes()
                if b"containerd-shim" in cmdline and any(m in cmdline for m in markers):
                    pids.add(int(entry.name))
        pids.discard(os.getpid())
        return pids

    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        pids = leftovers()
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        end = time.monotonic() + wait
        while time.monotonic() < end and leftovers():
            time.sleep(0.1)


def _mounts_below(path: Path) -> list[str]:
    """Mount points at or below ``path`` (mountinfo escapes space, tab, newline, backslash)."""
    prefix = str(path).rstrip("/") + "/"
    mounts = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
            if point == str(path) or point.startswith(prefix):
                mounts.append(point)
    return sorted(set(mounts), key=len, reverse=True)


def _unmount_below(path: Path) -> None:
    for point in _mounts_below(path):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def _remove_cgroups(cgroup_root: str) -> None:
    for hierarchy in _cgroup_hierarchies():
        base = hierarchy / cgroup_root.lstrip("/")
        if not base.is_dir():
            continue
        for directory in sorted(
            (p for p in base.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        ):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            base.rmdir()


def _cgroup_hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers, named ones and the v2 'unified')."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) > 2 and fields[2] in ("cgroup", "cgroup2"):
                found.append(Path(fields[1]))
    return found


# ---------------------------------------------------------------------------------------------
# host record


def _read_sysctl(name: str) -> str | None:
    try:
        return Path("/proc/sys", name).read_text().strip()
    except OSError:
        return None


def _save_iptables() -> dict[str, str]:
    saved = {}
    for family in ("iptables", "ip6tables"):
        present = subprocess.run(
            [f"{family}-save"], capture_output=True, text=True, check=False
        ).stdout
        for table in IPTABLES_TABLES:
            text = ""
            if f"*{table}\n" in present:
                text = subprocess.run(
                    [f"{family}-save", "-t", table], capture_output=True, text=True, check=False
                ).stdout
            saved[f"{family}/{table}"] = text
    return saved


def _restore_iptables(saved: dict[str, str]) -> None:
    """Each table without the rules and chains the kubelet and kube-proxy added (theirs all
    name a KUBE- chain) that were not there before. Not the recorded table wholesale: that
    would also drop what anything else on the host added meanwhile."""
    for key, text in saved.items():
        family, table = key.split("/")
        current = subprocess.run(
            [f"{family}-save", "-t", table], capture_output=True, text=True, check=False
        )  # fmt: skip
        if current.returncode != 0 or not current.stdout.strip():
            continue
        cleaned = without_added_kube_rules(current.stdout, text)
        if cleaned != current.stdout:
            subprocess.run(
                [f"{family}-restore", "-T", table], input=cleaned, text=True,
                capture_output=True, check=False,
            )  # fmt: skip


def without_added_kube_rules(current: str, recorded: str) -> str:
    """iptables-save text ``current`` without its KUBE- lines that ``recorded`` lacks (chain
    lines compared without their packet counters)."""

    def key(line: str) -> str:
        return re.sub(r" \[\d+:\d+\]$", "", line) if line.startswith(":") else line

    before = {key(line) for line in recorded.splitlines()}
    kept = [
        line
        for line in current.splitlines()
        if "KUBE-" not in line or line.startswith("#") or key(line) in before
    ]
    return "\n".join(kept) + "\n"


def _claim_host(state_dir: Path) -> None:
    """Write the lock file naming ``state_dir``: atomically (a hard link fails if the file
    exists, so of two testbeds starting at once only one gets it), or over a stale owner's."""
    HOST_ROOT.mkdir(parents=True, exist_ok=True)
    tmp = HOST_ROOT / f".owner.{os.getpid()}"
    tmp.write_text(json.dumps({"state_dir": str(state_dir), "pid": os.getpid()}))
    try:
        try:
            os.link(tmp, OWNER_FILE)
            return
        except FileExistsError:
            pass
        owner = _live_owner()
        if owner is not None and owner != str(state_dir):
            raise TestbedError(f"another testbed with real nodes runs on this host: {owner}")
        os.replace(tmp, OWNER_FILE)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _owner_state_dir() -> str | None:
    """The state directory the lock file names, alive or not."""
    try:
        return str(json.loads(OWNER_FILE.read_text())["state_dir"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _release_host(state_dir: Path) -> None:
    if _owner_state_dir() == str(state_dir):
        with contextlib.suppress(OSError):
            OWNER_FILE.unlink()
    with contextlib.suppress(OSError):
        HOST_ROOT.rmdir()


def _live_owner() -> str | None:
    """The state directory of a testbed holding the host, if its processes still run."""
    try:
        owner = json.loads(OWNER_FILE.read_text())["state_dir"]
        state = json.loads((Path(owner) / "state.json").read_text())
    except (OSError, ValueError, KeyError):
        return None
    from procs import process_start_time

    for component in state.get("components", []):
        if process_start_time(component["pid"]) == component["start_time"]:
            return str(owner)
    return None


# ---------------------------------------------------------------------------------------------
# API checks (standard library only: no client library before the virtualenv exists)


def _get_json(url: str, tls: ssl.SSLContext) -> dict[str, object] | None:
    try:
        with urllib.request.urlopen(url, timeout=5, context=tls) as resp:
            data = json.loads(resp.read())
            return data if isinstance(data, dict) else None
    except (urllib.error.URLError, OSError, ssl.SSLError, ValueError):
        return None


def _node_ready(server: str, name: str, tls: ssl.SSLContext) -> bool:
    node = _get_json(f"{server}/api/v1/nodes/{name}", tls)
    status = node.get("status") if node else None
    conditions = status.get("conditions", []) if isinstance(status, dict) else []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _has_slice(server: str, name: str, tls: ssl.SSLContext) -> bool:
    found = _get_json(
        f"{server}/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3D{name}",
        tls,
    )
    return bool(found and found.get("items"))


def _http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return None


def _run(argv: list[str], what: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise TestbedError(f"{what} failed: {(result.stderr or result.stdout).strip()}")


__all__ = [
    "Component",
    "RealNode",
    "import_image",
    "start_nodes",
    "tail",
    "teardown",
    "unavailable",
]
