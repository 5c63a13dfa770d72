"""Queue objects for e2e tests: cluster-scoped, so every test names them after itself and the
``queues`` fixture deletes them afterwards."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.support import Kubectl

QUEUE_LABEL = "kube-queue.io/queue-name"


class Queues:
    def __init__(self, kubectl: Kubectl, prefix: str) -> None:
        self.kubectl = kubectl
        self.prefix = prefix
        self.created: list[str] = []

    def name(self, short: str) -> str:
        return f"{self.prefix}-{short}"

    async def create(self, short: str, **spec: Any) -> str:
        name = self.name(short)
        if "parent" in spec:
            spec["parent"] = self.name(spec["parent"])
        await self.kubectl.apply(
            {"apiVersion": "kube-queue.io/v1alpha1", "kind": "Queue",
             "metadata": {"name": name}, "spec": spec}
        )
        self.created.append(name)
        return name

    async def get(self, short: str) -> dict[str, Any]:
        found: dict[str, Any] = await self.kubectl.json("get", "queue", self.name(short))
        return found

    def label(self, short: str) -> dict[str, str]:
        return {QUEUE_LABEL: self.name(short)}


@pytest.fixture
async def queues(kubectl: Kubectl, namespace: str) -> AsyncIterator[Queues]:
    made = Queues(kubectl, namespace[-20:].strip("-"))
    yield made
    for name in reversed(made.created):
        await kubectl("delete", "queue", name, "--ignore-not-found", "--wait=false")
