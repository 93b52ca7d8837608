"""testbed/realnode.py's teardown, offline: what it may touch on the host and what it must not.

No root and no real node here: the host-wide steps (iptables, sysctls, the bridge, the
hard-coded paths) are replaced by recorders, the lock file and node directories live in a
temporary directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.testbed_scripts import load_testbed_script


@pytest.fixture
def realnode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    module = load_testbed_script("realnode", "testbed_realnode_unit")
    host_root = tmp_path / "host"
    monkeypatch.setattr(module, "HOST_ROOT", host_root)
    monkeypatch.setattr(module, "OWNER_FILE", host_root / "owner.json")
    monkeypatch.setattr(module, "HARDCODED_PATHS", [])  # make_testbed adds its stand-ins
    monkeypatch.setattr(module, "_cgroup_hierarchies", list)
    monkeypatch.setattr(module, "_kill_leftovers", lambda nodes: None)
    monkeypatch.setattr(module, "_mounts_below", lambda path: [])
    calls: list[Any] = []
    module.calls = calls  # type: ignore[attr-defined]
    monkeypatch.setattr(module, "_restore_iptables", lambda saved: calls.append(("iptables",)))
    monkeypatch.setattr(module, "_read_sysctl", lambda name: "changed")

    class FakeRun:
        def __init__(self, argv: list[str], **_: Any) -> None:
            calls.append(tuple(argv))
            self.returncode = 0

    monkeypatch.setattr(module.subprocess, "run", FakeRun)
    return module


def make_testbed(realnode: ModuleType, tmp_path: Path, name: str) -> tuple[Path, Any, Path]:
    """A state directory with a host record and one node whose root exists."""
    state_dir = tmp_path / name
    state_dir.mkdir()
    created = tmp_path / f"{name}-var-lib-kubelet"
    created.mkdir()
    realnode.HARDCODED_PATHS.append(str(created))
    record = {"sysctls": {}, "iptables": {"iptables/filter": ""}, "created_paths": [str(created)]}
    (state_dir / "host-record.json").write_text(json.dumps(record))
    root = realnode.HOST_ROOT / name / "n0"
    root.mkdir(parents=True)
    node = realnode.RealNode(name="real-node-0", root=str(root), cgroup_root=f"/dralloc-testbed-{name}-n0",
                             kubelet_port=1, healthz_port=2, subnet="10.88.0.0/24")  # fmt: skip
    return state_dir, node, created


def own(realnode: ModuleType, state_dir: Path) -> None:
    realnode.OWNER_FILE.parent.mkdir(parents=True, exist_ok=True)
    realnode.OWNER_FILE.write_text(json.dumps({"state_dir": str(state_dir), "pid": 1}))


def test_the_owner_restores_the_host_and_releases_it(realnode: ModuleType, tmp_path: Path) -> None:
    state_dir, node, created = make_testbed(realnode, tmp_path, "a")
    own(realnode, state_dir)
    realnode.teardown(state_dir, [node])
    assert ("iptables",) in realnode.calls
    assert ("ip", "link", "delete", realnode.BRIDGE) in realnode.calls
    assert not created.exists() and not Path(node.root).exists()
    assert not realnode.OWNER_FILE.exists()


def test_a_second_down_leaves_the_host_alone(realnode: ModuleType, tmp_path: Path) -> None:
    state_dir, node, _ = make_testbed(realnode, tmp_path, "a")
    own(realnode, state_dir)
    realnode.teardown(state_dir, [node])
    realnode.calls.clear()
    realnode.teardown(state_dir, [node])
    assert realnode.calls == [], "the second teardown touched iptables or the bridge"


def test_down_of_a_stale_testbed_spares_the_current_owner(
    realnode: ModuleType, tmp_path: Path
) -> None:
    """B holds the host; A (whose lock B took over, or which was downed before) is downed:
    B's iptables rules, bridge, lock and hard-coded paths stay; A's own node directory goes."""
    state_a, node_a, created_a = make_testbed(realnode, tmp_path, "a")
    state_b, _, _ = make_testbed(realnode, tmp_path, "b")
    own(realnode, state_b)
    realnode.teardown(state_a, [node_a])
    assert ("iptables",) not in realnode.calls
    assert ("ip", "link", "delete", realnode.BRIDGE) not in realnode.calls
    assert created_a.exists(), "a path the owner's kubelet uses was removed"
    assert json.loads(realnode.OWNER_FILE.read_text())["state_dir"] == str(state_b)
    assert not Path(node_a.root).exists()


def test_a_tree_with_a_mount_left_is_not_deleted(
    realnode: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rmtree would descend into a mount that umount could not detach (a subPath bind mount
    of a host directory): the tree stays."""
    tree = tmp_path / "root"
    (tree / "pods/volume-subpaths").mkdir(parents=True)
    host_file = tree / "pods/volume-subpaths/host-file"
    host_file.write_text("not ours")
    monkeypatch.setattr(realnode, "_mounts_below", lambda path: [str(host_file.parent)])
    realnode._remove_tree(tree)
    assert host_file.exists()


def test_mount_points_are_unescaped(
    realnode: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = load_testbed_script("realnode", "testbed_realnode_raw")
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "1 2 0:1 / /var/lib/x/a\\040b rw - tmpfs tmpfs rw\n"
        "3 2 0:2 / /var/lib/x/back\\134slash rw - tmpfs tmpfs rw\n"
        "4 2 0:3 / /var/lib/xy rw - tmpfs tmpfs rw\n"
    )
    real_path = Path

    def fake_path(*args: Any) -> Path:
        return mountinfo if args == ("/proc/self/mountinfo",) else real_path(*args)

    monkeypatch.setattr(raw, "Path", fake_path)
    assert raw._mounts_below(real_path("/var/lib/x")) == [
        "/var/lib/x/back\\slash",
        "/var/lib/x/a b",
    ]


BEFORE_FILTER = """\
# Generated by iptables-save v1.8.9 (nf_tables)
*filter
:INPUT ACCEPT [10:20]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [3:4]
:KUBE-OLD - [0:0]
-A INPUT -j KUBE-OLD
COMMIT
"""
AFTER_FILTER = """\
# Generated by iptables-save v1.8.9 (nf_tables)
*filter
:INPUT ACCEPT [99:999]
:FORWARD ACCEPT [5:6]
:OUTPUT ACCEPT [7:8]
:KUBE-FIREWALL - [0:0]
:KUBE-OLD - [1:2]
:KUBE-FORWARD - [0:0]
-A INPUT -j KUBE-OLD
-A INPUT -j KUBE-FIREWALL
-A INPUT -s 203.0.113.7/32 -m comment --comment "someone else's" -j DROP
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -j DROP
COMMIT
"""


def test_teardown_drops_only_the_kube_rules_it_added(realnode: ModuleType) -> None:
    """What the kubelet and kube-proxy added goes; what was there before stays, and so does
    a rule someone else added while the testbed ran (a wholesale restore dropped it)."""
    cleaned = realnode.without_added_kube_rules(AFTER_FILTER, BEFORE_FILTER)
    assert "KUBE-FIREWALL" not in cleaned and "KUBE-FORWARD" not in cleaned
    assert ":KUBE-OLD - [1:2]" in cleaned and "-A INPUT -j KUBE-OLD" in cleaned
    assert "someone else's" in cleaned
    assert ":INPUT ACCEPT [99:999]" in cleaned and cleaned.rstrip().endswith("COMMIT")
    # A table that did not exist before: every KUBE- line goes.
    assert "KUBE-" not in realnode.without_added_kube_rules(AFTER_FILTER, "")


def test_the_lock_goes_to_one_testbed(
    realnode: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live owner keeps the host; a stale one (its processes gone) is replaced."""
    a, b = tmp_path / "a", tmp_path / "b"
    realnode._claim_host(a)
    assert realnode._owner_state_dir() == str(a)
    monkeypatch.setattr(realnode, "_live_owner", lambda: str(a))
    with pytest.raises(realnode.TestbedError, match="another testbed"):
        realnode._claim_host(b)
    assert realnode._owner_state_dir() == str(a)
    monkeypatch.setattr(realnode, "_live_owner", lambda: None)
    realnode._claim_host(b)
    assert realnode._owner_state_dir() == str(b)
    assert sorted(p.name for p in realnode.HOST_ROOT.iterdir()) == ["owner.json"]


def test_paths_from_a_damaged_state_file_are_not_touched(
    realnode: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state_dir, node, _ = make_testbed(realnode, tmp_path, "a")
    own(realnode, state_dir)
    victim = tmp_path / "victim"
    victim.mkdir()
    removed: list[Path] = []
    monkeypatch.setattr(realnode, "_remove_tree", removed.append)
    bad = [
        realnode.RealNode(**{**vars(node), "root": str(victim)}),
        realnode.RealNode(**{**vars(node), "root": f"{realnode.HOST_ROOT}/a/../../victim"}),
        realnode.RealNode(**{**vars(node), "cgroup_root": "/"}),
    ]
    record = json.loads((state_dir / "host-record.json").read_text())
    record["created_paths"] = [str(victim)]
    (state_dir / "host-record.json").write_text(json.dumps(record))
    realnode.teardown(state_dir, bad)
    assert removed == []
