"""Fixtures for end-to-end tests on a real control plane (see testbed/README.md).

Fixture API (everything under tests/e2e is marked `e2e`; when the testbed binaries are not
built, every such test is skipped with the build's reason):

- `testbed` (session): a running control plane with in-tree DRA off, a `Testbed` with
  `.kubeconfig` (Path), `.bin` (Path of kubectl & co.), `.kubectl(*args, input=None,
  check=True) -> CompletedProcess[str]`, `.apply(*dicts)`, `.get(*args) -> dict | None`,
  `.create_nodes(count, labels, prefix, cpu=None, memory=None, pods=None) -> names` (node
  size: capacity = allocatable; None keeps the testbed's huge default) and `.env()` (environ
  with KUBECONFIG and PATH for subprocesses such as `kopf run`). Started once per session
  with `testbed/up` and stopped at the end; set `DRALLOC_KUBECONFIG` to reuse a running one
  instead (never stopped).
- `dra_testbed` (session): a second control plane with in-tree DRA on, started only when a
  test asks for it (`DRALLOC_DRA_KUBECONFIG` reuses one).
- `kubectl`: shorthand for `testbed.kubectl`.
- `namespace`: a fresh namespace per test, deleted afterwards.
- `api_client`: an async kubernetes_asyncio ApiClient for `testbed` (function scope, runs on
  the test's own event loop).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from subprocess import CompletedProcess

import pytest
import pytest_asyncio
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient

from .kube_helpers import (
    Testbed,
    TestbedUnavailable,
    find_binaries,
    start_testbed,
    stop_testbed,
    unique_name,
)

E2E_DIR = Path(__file__).resolve().parent


def _binaries_or_reason() -> Path | str:
    try:
        return find_binaries()
    except TestbedUnavailable as exc:
        return str(exc)
    except OSError as exc:
        return f"cannot run testbed/build --check: {exc}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    e2e_items = [item for item in items if E2E_DIR in Path(str(item.path)).parents]
    if not e2e_items:
        return
    found = _binaries_or_reason()
    for item in e2e_items:
        item.add_marker(pytest.mark.e2e)
        if isinstance(found, str):
            item.add_marker(pytest.mark.skip(reason=f"testbed unavailable: {found}"))


def _session_testbed(
    tmp_path_factory: pytest.TempPathFactory, *, dra: bool, reuse_env: str
) -> Iterator[Testbed]:
    found = _binaries_or_reason()
    if isinstance(found, str):
        pytest.skip(f"testbed unavailable: {found}")
    reused = os.environ.get(reuse_env)
    if reused:
        yield Testbed(kubeconfig=Path(reused), bin=found, state_dir=None, dra=dra)
        return
    state_dir = tmp_path_factory.mktemp("testbed-dra" if dra else "testbed")
    testbed = start_testbed(state_dir, found, dra=dra)
    try:
        yield testbed
    finally:
        stop_testbed(testbed)


@pytest.fixture(scope="session")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    yield from _session_testbed(tmp_path_factory, dra=False, reuse_env="DRALLOC_KUBECONFIG")


@pytest.fixture(scope="session")
def dra_testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    yield from _session_testbed(tmp_path_factory, dra=True, reuse_env="DRALLOC_DRA_KUBECONFIG")


@pytest.fixture
def kubectl(testbed: Testbed) -> Callable[..., CompletedProcess[str]]:
    return testbed.kubectl


@pytest.fixture
def namespace(testbed: Testbed) -> Iterator[str]:
    name = unique_name("e2e")
    testbed.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        testbed.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest_asyncio.fixture(loop_scope="function")
async def api_client(testbed: Testbed) -> AsyncIterator[ApiClient]:
    client = await kube_config.new_client_from_config(config_file=str(testbed.kubeconfig))
    try:
        yield client
    finally:
        await client.close()
