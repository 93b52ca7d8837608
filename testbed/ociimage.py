"""Write a one-layer OCI image archive from local files, for containerd's `ctr images import`.

Why our own writer: the real nodes' images (a busybox for test pods, the sandbox "pause"
image) must be made locally, since no registry is reachable, and they are a handful of files.
The archive is deterministic (fixed mtimes and owners), so the same inputs give the same digest.
Standard library only.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
# The files come from this host, so the image is for its architecture (`ctr images import`
# skips an image whose platform is not the host's).
ARCHITECTURE = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


@dataclass(frozen=True)
class ImageSpec:
    """What goes into the image: files copied from the host, symlinks, empty directories."""

    ref: str
    files: dict[str, Path] = field(default_factory=dict)  # path in image -> host file
    symlinks: dict[str, str] = field(default_factory=dict)  # path in image -> target
    directories: dict[str, int] = field(default_factory=dict)  # path in image -> mode
    texts: dict[str, str] = field(default_factory=dict)  # path in image -> content
    entrypoint: list[str] | None = None
    cmd: list[str] | None = None
    env: list[str] = field(default_factory=lambda: ["PATH=/bin:/usr/bin"])


def _member(name: str, kind: bytes, mode: int, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size = kind, mode, size
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "root", "root"
    return info


def _parents(paths: list[str]) -> list[str]:
    parents = {str(p) for path in paths for p in Path(path).parents if str(p) not in (".", "/")}
    return sorted(parents)


def layer_tar(spec: ImageSpec) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entries = [*spec.files, *spec.symlinks, *spec.texts, *spec.directories]
        for directory in sorted(set(_parents(entries)) | set(spec.directories)):
            mode = spec.directories.get(directory, 0o755)
            tar.addfile(_member(directory.lstrip("/"), tarfile.DIRTYPE, mode))
        for path, source in sorted(spec.files.items()):
            data = source.read_bytes()
            mode = source.stat().st_mode & 0o7777
            tar.addfile(
                _member(path.lstrip("/"), tarfile.REGTYPE, mode, len(data)), io.BytesIO(data)
            )
        for path, text in sorted(spec.texts.items()):
            data = text.encode()
            tar.addfile(
                _member(path.lstrip("/"), tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data)
            )
        for path, target in sorted(spec.symlinks.items()):
            info = _member(path.lstrip("/"), tarfile.SYMTYPE, 0o777)
            info.linkname = target
            tar.addfile(info)
    return buffer.getvalue()


def _descriptor(media_type: str, blob: bytes) -> dict[str, object]:
    return {
        "mediaType": media_type,
        "digest": "sha256:" + hashlib.sha256(blob).hexdigest(),
        "size": len(blob),
    }


def write_archive(spec: ImageSpec, path: Path) -> str:
    """Write the OCI archive to ``path``; returns the manifest digest."""
    layer = layer_tar(spec)
    config: dict[str, object] = {"Env": spec.env}
    if spec.entrypoint is not None:
        config["Entrypoint"] = spec.entrypoint
    if spec.cmd is not None:
        config["Cmd"] = spec.cmd
    image_config = json.dumps(
        {
            "architecture": ARCHITECTURE,
            "os": "linux",
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": [_descriptor("", layer)["digest"]]},
        },
        sort_keys=True,
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": _descriptor(CONFIG_MEDIA_TYPE, image_config),
            "layers": [_descriptor(LAYER_MEDIA_TYPE, layer)],
        },
        sort_keys=True,
    ).encode()
    manifest_descriptor = _descriptor(MANIFEST_MEDIA_TYPE, manifest)
    manifest_descriptor["annotations"] = {
        "io.containerd.image.name": spec.ref,
        "org.opencontainers.image.ref.name": spec.ref,
    }
    manifest_descriptor["platform"] = {"architecture": ARCHITECTURE, "os": "linux"}
    index = json.dumps(
        {"schemaVersion": 2, "manifests": [manifest_descriptor]}, sort_keys=True
    ).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, mode="w", format=tarfile.PAX_FORMAT) as tar:
        blobs = [layer, image_config, manifest]
        members = {"oci-layout": b'{"imageLayoutVersion":"1.0.0"}', "index.json": index}
        for blob in blobs:
            members["blobs/sha256/" + hashlib.sha256(blob).hexdigest()] = blob
        for directory in ("blobs", "blobs/sha256"):
            tar.addfile(_member(directory, tarfile.DIRTYPE, 0o755))
        for name, data in members.items():
            tar.addfile(_member(name, tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
    return str(manifest_descriptor["digest"])
