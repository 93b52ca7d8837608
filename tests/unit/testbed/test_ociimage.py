"""testbed/ociimage.py: the OCI archives the real nodes import (`ctr images import`) must be
self-consistent (every digest names its blob, diff_ids name the uncompressed layers), carry the
image name, hold exactly the files asked for, and be byte-identical for the same inputs."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.testbed_scripts import load_testbed_script

TESTBED = Path(__file__).resolve().parents[3] / "testbed"


@pytest.fixture(scope="module")
def ociimage() -> ModuleType:
    return load_testbed_script("ociimage")


def blobs(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def blob(files: dict[str, bytes], digest: str) -> bytes:
    data = files["blobs/sha256/" + digest.removeprefix("sha256:")]
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
    return data


def build(ociimage: ModuleType, tmp_path: Path, name: str) -> Path:
    program = tmp_path / "program"
    program.write_bytes(b"#!/bin/sh\necho hi\n")
    program.chmod(0o755)
    spec = ociimage.ImageSpec(
        ref="localhost/sample:test",
        files={"/bin/program": program},
        symlinks={"/bin/alias": "program"},
        directories={"/tmp": 0o1777},
        texts={"/etc/passwd": "root:x:0:0:root:/:/bin/sh\n"},
        entrypoint=["/bin/program"],
        env=["PATH=/bin"],
    )
    archive = tmp_path / name
    ociimage.write_archive(spec, archive)
    return archive


def test_digests_name_their_blobs_and_the_image_is_named(
    ociimage: ModuleType, tmp_path: Path
) -> None:
    files = blobs(build(ociimage, tmp_path, "a.tar"))
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "localhost/sample:test"
    manifest = json.loads(blob(files, entry["digest"]))
    assert entry["size"] == len(blob(files, entry["digest"]))
    config = json.loads(blob(files, manifest["config"]["digest"]))
    (layer_descriptor,) = manifest["layers"]
    layer = blob(files, layer_descriptor["digest"])
    assert layer_descriptor["mediaType"] == "application/vnd.oci.image.layer.v1.tar"
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    assert config["config"]["Entrypoint"] == ["/bin/program"]
    assert (config["os"], config["architecture"]) == ("linux", ociimage.ARCHITECTURE)


def test_the_layer_holds_the_files_asked_for(ociimage: ModuleType, tmp_path: Path) -> None:
    files = blobs(build(ociimage, tmp_path, "a.tar"))
    (entry,) = json.loads(files["index.json"])["manifests"]
    manifest = json.loads(blob(files, entry["digest"]))
    layer = blob(files, manifest["layers"][0]["digest"])
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {"bin", "bin/program", "bin/alias", "etc", "etc/passwd", "tmp"}
        assert tar.extractfile("bin/program").read() == b"#!/bin/sh\necho hi\n"  # type: ignore[union-attr]
    assert members["bin/program"].mode == 0o755
    assert members["bin/alias"].issym() and members["bin/alias"].linkname == "program"
    assert members["tmp"].isdir() and members["tmp"].mode == 0o1777
    assert all(m.uid == 0 and m.mtime == 0 for m in members.values())


def test_same_inputs_give_the_same_bytes(ociimage: ModuleType, tmp_path: Path) -> None:
    first = build(ociimage, tmp_path, "a.tar").read_bytes()
    assert build(ociimage, tmp_path, "b.tar").read_bytes() == first
