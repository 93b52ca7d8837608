"""The robustness suite's recorder and checker for one e2e test: every change of the claims
and pods of the test's namespaces, and whether a rule was broken at any moment.

An e2e test states what it saw at the end; "no device in two claims" must hold at every
revision in between too. ``recording(testbed, namespaces)`` watches from before the test
acts until it asks for the history; ``history()`` first touches a marker object of each kind
(in a namespace of its own) and waits until the watches have seen the touch, so everything
before it is in the history (no fixed sleep).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from operators.kube import NAMESPACES, PODS, RESOURCE_CLAIMS, KubeClient
from robustness.checker import Report, check
from robustness.history import History, Kind
from robustness.recorder import Recorder

from .kube_helpers import Testbed

SEEN_TIMEOUT_S = 60.0


class Recording:
    """A recorder on its own event loop in a thread, over some namespaces.

    ``marks``: the namespace where :meth:`history` keeps a pod and a claim of its own to
    touch (recorded, and nothing the test counts or dralloc acts on: the pod asks for no
    claims and fits no node, the claim is no pod's)."""

    def __init__(self, testbed: Testbed, namespaces: Sequence[str], marks: str) -> None:
        self.testbed = testbed
        self.marks = marks
        self.namespaces = frozenset([*namespaces, marks])
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.recorder: Recorder | None = None
        self.client: KubeClient | None = None
        self.task: asyncio.Task[None] | None = None
        self.touches = 0

    def start(self) -> None:
        self.thread.start()
        self._run(self._start(), timeout=30)

    def _run(self, coroutine: Any, timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=timeout)

    async def _start(self) -> None:
        self.client = await KubeClient.connect(
            str(self.testbed.kubeconfig), user_agent="dralloc-e2e-history",
            api_group=self.testbed.api_mode.group,
        )  # fmt: skip
        kinds: dict[Kind, Any] = {"claim": RESOURCE_CLAIMS, "pod": PODS}
        self.recorder = Recorder(self.client, kinds, keep=lambda ns: ns in self.namespaces)
        self.task = asyncio.ensure_future(self.recorder.run())
        await self.client.create(NAMESPACES, {"metadata": {"name": self.marks}})
        await self.client.create(PODS, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mark", "namespace": self.marks},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/none"}],
                     "nodeSelector": {"e2e-history": "no-such-node"}},
        }, self.marks)  # fmt: skip
        await self.client.create(RESOURCE_CLAIMS, {
            "apiVersion": f"{self.testbed.api_mode.group}/v1", "kind": "ResourceClaim",
            "metadata": {"name": "mark", "namespace": self.marks},
            "spec": {"devices": {"requests": []}},
        }, self.marks)  # fmt: skip

    def history(self) -> History:
        """Everything up to now: the marks are touched (a new value each time), and the
        history is taken once both touches are recorded."""
        result: History = self._run(self._history(), timeout=SEEN_TIMEOUT_S + 10)
        return result

    async def _history(self) -> History:
        assert self.client is not None and self.recorder is not None and self.task is not None
        if self.task.done():
            self.task.result()  # the recorder failed: say why
        self.touches += 1
        wanted: dict[Kind, int] = {}
        marks: list[tuple[Kind, Any]] = [("claim", RESOURCE_CLAIMS), ("pod", PODS)]
        for kind, resource in marks:
            touched = await self.client.merge_patch(
                resource, "mark", {"metadata": {"labels": {"e2e-touch": str(self.touches)}}},
                namespace=self.marks,
            )  # fmt: skip
            wanted[kind] = int(touched["metadata"]["resourceVersion"])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SEEN_TIMEOUT_S
        while any(self.recorder.last_rv[kind] < rv for kind, rv in wanted.items()):
            if loop.time() > deadline:
                raise AssertionError(
                    f"the recorder did not see the marks: {self.recorder.last_rv} "
                    f"(watch errors: {self.recorder.watch_errors})"
                )
            await asyncio.sleep(0.2)
        return self.recorder.history(settled=False)

    def stop(self) -> None:
        async def _stop() -> None:
            if self.task is not None:
                self.task.cancel()
                await asyncio.gather(self.task, return_exceptions=True)
            if self.client is not None:
                with contextlib.suppress(Exception):
                    await self.client.delete(NAMESPACES, self.marks)
                await self.client.close()

        if self.thread.is_alive():
            try:
                self._run(_stop(), timeout=30)
            finally:
                self.loop.call_soon_threadsafe(self.loop.stop)
                self.thread.join(timeout=30)
        if not self.thread.is_alive():
            self.loop.close()


@contextmanager
def recording(testbed: Testbed, namespaces: Sequence[str], marks: str) -> Iterator[Recording]:
    """Record the namespaces' claims and pods from now until the block ends."""
    recorder = Recording(testbed, namespaces, marks)
    try:
        recorder.start()
        yield recorder
    finally:
        recorder.stop()


def judged(history: History) -> Report:
    """The checker's verdict on the history (rules that need a settled end are left out)."""
    return check(history)
