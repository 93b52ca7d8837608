"""testbed/ociimage.py: the archive's descriptors agree with its blobs, and its platform is
the host's (the files in it are the host's)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.testbed_scripts import load_testbed_script


@pytest.fixture
def ociimage() -> ModuleType:
    return load_testbed_script("ociimage", "testbed_ociimage_platform")


def write(ociimage: ModuleType, tmp_path: Path, name: str) -> tuple[str, Path]:
    program = tmp_path / "program"
    program.write_bytes(b"\x7fELF not really")
    program.chmod(0o755)
    spec = ociimage.ImageSpec(
        ref="localhost/x:test",
        files={"/bin/x": program},
        symlinks={"/bin/y": "x"},
        directories={"/tmp": 0o1777},
        texts={"/etc/passwd": "root:x:0:0::/:/bin/x\n"},
        cmd=["/bin/x"],
    )
    path = tmp_path / name
    return ociimage.write_archive(spec, path), path


def test_digests_sizes_and_diff_ids_match_the_blobs(ociimage: ModuleType, tmp_path: Path) -> None:
    digest, path = write(ociimage, tmp_path, "a.tar")
    with tarfile.open(path) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert name.rsplit("/", 1)[1] == hashlib.sha256(data).hexdigest()
    index = json.loads(files["index.json"])
    [descriptor] = index["manifests"]
    assert descriptor["digest"] == digest
    assert descriptor["annotations"]["io.containerd.image.name"] == "localhost/x:test"
    manifest_blob = files["blobs/sha256/" + digest.split(":")[1]]
    assert descriptor["size"] == len(manifest_blob)
    manifest = json.loads(manifest_blob)
    config_blob = files["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]]
    assert manifest["config"]["size"] == len(config_blob)
    [layer] = manifest["layers"]
    layer_blob = files["blobs/sha256/" + layer["digest"].split(":")[1]]
    assert layer["size"] == len(layer_blob)
    config = json.loads(config_blob)
    # Uncompressed layer: its diff_id is its digest.
    assert config["rootfs"]["diff_ids"] == [layer["digest"]]
    assert config["architecture"] == descriptor["platform"]["architecture"] == ociimage.ARCHITECTURE
    with tarfile.open(fileobj=io.BytesIO(layer_blob)) as tar:
        members = {m.name: m for m in tar}
    assert members["bin/x"].mode == 0o755 and members["tmp"].mode == 0o1777
    assert members["bin/y"].issym() and members["bin/y"].linkname == "x"
    assert list(members).index("bin") < list(members).index("bin/x")
