"""Fixtures for end-to-end tests on a real control plane (see testbed/README.md).

Fixture API (everything under tests/e2e is marked `e2e`; when the testbed binaries are not
built, every such test is skipped with the build's reason):

- `testbed` (module): a running control plane, a `Testbed` with `.kubeconfig` (Path), `.bin`
  (Path of kubectl & co.), `.api_mode` (the operator's API mode of the test, modes.py),
  `.kubectl(*args, input=None, check=True) -> CompletedProcess[str]`, `.apply(*dicts)`,
  `.get(*args) -> dict | None`, `.create_nodes(count, labels, prefix, cpu=None, memory=None,
  pods=None) -> names` (node size: capacity = allocatable; None keeps the testbed's huge
  default) and `.env()` (environ with KUBECONFIG and PATH for subprocesses such as `kopf
  run`). It is the testbed of the mode's kind: in-tree DRA off for crd mode; for in-tree mode
  in-tree DRA with kube-scheduler's DynamicResources plugin and without kcm's DRA
  controllers, which dralloc replaces.
- `api_mode` (module): the mode. A module opts in to running in every mode with
  `pytestmark = pytest.mark.api_modes`: each of its tests that uses the testbed then runs
  once per mode, ids `crd` and `in-tree` (`-k crd`, `-k in-tree`), one mode after the other.
  `@pytest.mark.only_api_modes("crd", reason="...")` keeps one test to the modes named; in
  the others it is reported as skipped, with the reason. Modules that do not opt in run in
  crd mode.
- `testbeds` (session): the registry of testbeds by kind (kube_helpers.TESTBED_KINDS). Each
  kind is started with `testbed/up` at its first use and stopped at the end of the session,
  so moving between modes never restarts a control plane. An environment variable per kind
  reuses a running one instead (never stopped): `DRALLOC_KUBECONFIG` (in-tree DRA off),
  `DRALLOC_DRA_SCHEDULER_KUBECONFIG` (in-tree mode's), `DRALLOC_DRA_KUBECONFIG` (in-tree DRA
  with kcm's DRA controllers), and for the two mode testbeds that also serve upstream's
  Workload API (`testbed/up --workload-api`, modes.WITH_WORKLOAD_API; test_gang.py runs on
  them and stops them when done) `DRALLOC_WORKLOAD_KUBECONFIG` and
  `DRALLOC_DRA_SCHEDULER_WORKLOAD_KUBECONFIG`.
- `dra_testbed` (session): the testbed with in-tree DRA on entirely (`testbed/up --dra`:
  kube-scheduler's plugin and kcm's DRA controllers), started only when a test asks for it.
- `kubectl`: shorthand for `testbed.kubectl`.
- `namespace`: a fresh namespace per test, deleted afterwards.
- `kube_client`: dralloc's own KubeClient for `testbed` (function scope, runs on the test's
  own event loop).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from subprocess import CompletedProcess

import pytest
import pytest_asyncio

from operators.kube import KubeClient

from .kube_helpers import (
    Testbed,
    TestbedRegistry,
    TestbedUnavailable,
    find_binaries,
    unique_name,
)
from .modes import API_MODES, CRD, TESTBED_DRA, ApiMode

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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "api_modes: run the module's tests in every API mode of the operator (modes.py)"
    )
    config.addinivalue_line(
        "markers",
        "only_api_modes(*names, reason): run the test only in the API modes named (with "
        "api_modes); skipped with the reason in the others",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "api_mode" not in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("api_modes") is None:
        return
    only = metafunc.definition.get_closest_marker("only_api_modes")
    if only is not None:
        unknown = set(only.args) - {mode.name for mode in API_MODES}
        assert not unknown, f"only_api_modes names unknown modes {sorted(unknown)}"
        assert only.kwargs.get("reason"), "only_api_modes needs a reason="
    params = []
    for mode in API_MODES:
        marks = []
        if only is not None and mode.name not in only.args:
            only_in = " and ".join(only.args)
            reason = f"{mode.name} mode: runs in {only_in} mode only: {only.kwargs['reason']}"
            marks.append(pytest.mark.skip(reason=reason))
        params.append(pytest.param(mode, id=mode.name, marks=marks))
    # Module scope: a module's tests run mode by mode, each mode with its own operator.
    metafunc.parametrize("api_mode", params, indirect=True, scope="module")


@pytest.fixture(scope="module")
def api_mode(request: pytest.FixtureRequest) -> ApiMode:
    return getattr(request, "param", CRD)


@pytest.fixture(scope="session")
def testbeds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestbedRegistry]:
    found = _binaries_or_reason()
    if isinstance(found, str):
        pytest.skip(f"testbed unavailable: {found}")
    registry = TestbedRegistry(found, lambda kind: tmp_path_factory.mktemp(f"testbed-{kind}"))
    try:
        yield registry
    finally:
        registry.stop_all()


@pytest.fixture(scope="module")
def testbed(testbeds: TestbedRegistry, api_mode: ApiMode) -> Testbed:
    return testbeds.get(api_mode.testbed_kind).in_mode(api_mode)


@pytest.fixture(scope="session")
def dra_testbed(testbeds: TestbedRegistry) -> Testbed:
    return testbeds.get(TESTBED_DRA)


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
async def kube_client(testbed: Testbed) -> AsyncIterator[KubeClient]:
    client = await KubeClient.connect(str(testbed.kubeconfig), user_agent="dralloc-e2e")
    try:
        yield client
    finally:
        await client.close()
