"""Typed helpers behind the e2e fixtures (conftest.py): kubectl, fake nodes, polling.

They are async because the controller under test may run in the same event loop as the tests;
a blocking call in a fixture would stall it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from e2e.cluster.nodes import FAKE_NODE_LABEL, FAKE_NODE_LABEL_VALUE, NodeSpec, node_list_json
from e2e.cluster.runner import LocalCluster

T = TypeVar("T")

# Every node a test creates carries this label, with the test's id as value.
TEST_LABEL = "e2e.kube-queue.io/test"
NODE_READY_TIMEOUT_S = 60.0


class KubectlError(RuntimeError):
    """kubectl exited non-zero; carries the command and its stderr."""

    def __init__(self, args: tuple[str, ...], code: int, stderr: str) -> None:
        super().__init__(f"kubectl {' '.join(args)} failed ({code}): {stderr.strip()}")
        self.code = code
        self.stderr = stderr


class Kubectl:
    """The kubectl built with the cluster (same version as the apiserver), bound to its
    kubeconfig and context."""

    def __init__(self, binary: Path, kubeconfig: Path, context: str | None = None) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.context = context

    def argv(self, *args: str) -> list[str]:
        context = [f"--context={self.context}"] if self.context else []
        return [str(self.binary), f"--kubeconfig={self.kubeconfig}", *context, *args]

    async def __call__(self, *args: str, stdin: str | None = None, timeout_s: float = 60.0) -> str:
        """Run kubectl; return stdout; raise KubectlError on a non-zero exit."""
        proc = await asyncio.create_subprocess_exec(
            *self.argv(*args),
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(
                proc.communicate(stdin.encode() if stdin is not None else None), timeout_s
            )
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        if proc.returncode != 0:
            raise KubectlError(args, proc.returncode or 0, err.decode())
        return out.decode()

    async def json(self, *args: str) -> Any:
        """``kubectl <args> -o json``, parsed."""
        return json.loads(await self(*args, "-o", "json"))

    async def apply(self, manifest: Mapping[str, Any], *args: str) -> str:
        """``kubectl apply -f -`` of one manifest (a dict); extra args e.g. ``-n ns``."""
        return await self("apply", "-f", "-", *args, stdin=json.dumps(manifest))


@dataclass(frozen=True)
class ClusterHandle:
    """The cluster the e2e session runs against.

    ``local`` is the LocalCluster this session started, or None for an existing cluster (then
    ``logs_dir`` holds only what the session itself ran, e.g. KWOK).
    """

    kubeconfig: Path
    context: str | None
    kubectl: Kubectl
    logs_dir: Path
    local: LocalCluster | None


async def wait_until(
    description: str,
    probe: Callable[[], Awaitable[T | None]],
    timeout_s: float = 30.0,
    interval_s: float = 0.25,
) -> T:
    """Await ``probe`` until it returns something other than None/False; return that."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while True:
        try:
            result = await probe()
            if result is not None and result is not False:
                return result
        except KubectlError as error:  # e.g. NotFound while the object is being created
            last_error = error
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            raise TimeoutError(f"timed out after {timeout_s:.0f}s: {description}{detail}")
        await asyncio.sleep(interval_s)


class FakeNodes:
    """Creates fake (KWOK) nodes for one test; see the ``fake_nodes`` fixture for guarantees."""

    def __init__(self, kubectl: Kubectl, test_id: str) -> None:
        self._kubectl = kubectl
        self.test_id = test_id
        self.names: list[str] = []

    async def create(self, *specs: NodeSpec) -> list[str]:
        """Create nodes and wait until the scheduler can use them; return their names.

        Names are ``<spec.name>-<test id>``: unique per test, so a pod still bound to a node of
        an earlier test can never count against a node of this one.
        """
        manifests = [
            spec.manifest(
                name=f"{spec.name}-{self.test_id}", extra_labels={TEST_LABEL: self.test_id}
            )
            for spec in specs
        ]
        names = [m["metadata"]["name"] for m in manifests]
        await self._kubectl("create", "-f", "-", stdin=node_list_json(manifests))
        self.names += names
        for name in names:
            await wait_until(
                f"node {name} Ready and untainted",
                functools.partial(self._usable, name),
                NODE_READY_TIMEOUT_S,
            )
        return names

    async def _usable(self, name: str) -> bool:
        # The TaintNodesByCondition admission plugin adds node.kubernetes.io/not-ready on
        # create; the node lifecycle controller removes it only after KWOK reported Ready.
        node = await self._kubectl.json("get", "node", name)
        ready = any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in node.get("status", {}).get("conditions", [])
        )
        system_taints = [
            t
            for t in node.get("spec", {}).get("taints", [])
            if t["key"].startswith("node.kubernetes.io/")
        ]
        return ready and not system_taints

    async def delete(self, *names: str) -> None:
        if names:
            await self._kubectl("delete", "node", "--ignore-not-found", *names)
            self.names = [n for n in self.names if n not in names]

    async def delete_all_fake_nodes(self) -> None:
        """Delete every fake node in the cluster, this test's or not."""
        await self._kubectl("delete", "nodes", "-l", f"{FAKE_NODE_LABEL}={FAKE_NODE_LABEL_VALUE}")
        self.names.clear()


def new_test_id() -> str:
    return uuid.uuid4().hex[:6]
