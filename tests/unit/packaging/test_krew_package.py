"""scripts/krew-package: the krew manifest names the archive it made (sha256), the archive
holds the shim and the LICENSE, the same sources give the same bytes, and the shim really
starts the plugin."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
URL = "https://example.invalid/kubectl-dralloc-v9.9.9.tar.gz"


def package(out: Path) -> tuple[dict, Path]:  # type: ignore[type-arg]
    result = subprocess.run(
        [str(REPO / "scripts" / "krew-package"), "v9.9.9", URL, str(out)],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    manifest = yaml.safe_load(Path(result.stdout.strip().splitlines()[-1]).read_text())
    return manifest, out / "kubectl-dralloc-v9.9.9.tar.gz"


def test_manifest_names_the_archive(tmp_path: Path) -> None:
    manifest, archive = package(tmp_path)
    assert manifest["kind"] == "Plugin" and manifest["metadata"]["name"] == "dralloc"
    assert manifest["spec"]["version"] == "v9.9.9"
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    platforms = manifest["spec"]["platforms"]
    assert {p["selector"]["matchLabels"]["os"] for p in platforms} == {"linux", "darwin"}
    for platform in platforms:
        assert platform["uri"] == URL and platform["sha256"] == digest
        assert platform["bin"] == "kubectl-dralloc"
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == ["LICENSE", "kubectl-dralloc"]


def test_same_sources_same_archive(tmp_path: Path) -> None:
    _, first = package(tmp_path / "a")
    _, second = package(tmp_path / "b")
    assert first.read_bytes() == second.read_bytes()


def test_the_shim_starts_the_plugin(tmp_path: Path) -> None:
    _, archive = package(tmp_path)
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "x", filter="data")
    shim = tmp_path / "x" / "kubectl-dralloc"
    assert os.access(shim, os.X_OK)
    env = {**os.environ, "DRALLOC_PYTHON": sys.executable}
    usage = subprocess.run([str(shim)], capture_output=True, text=True, env=env, timeout=60)
    assert usage.returncode == 2 and "usage: kubectl dralloc" in usage.stderr
    missing = subprocess.run(
        [str(shim)], capture_output=True, text=True, timeout=60,
        env={"PATH": "/nonexistent", "DRALLOC_PYTHON": "/bin/false"},
    )  # fmt: skip
    assert missing.returncode == 2 and "pip install dralloc" in missing.stderr
