"""The informer's contract against a scripted API: list, watch, relist on resync, and a handler
that fails on one object without losing the others."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from kubequeue.kube.informer import Informer, dict_codec


def _obj(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": rv}}


class _Content:
    def __init__(self, lines: list[bytes]) -> None:
        self._lines = lines

    async def iter_any(self) -> AsyncIterator[bytes]:
        for line in self._lines:
            yield line


class _Response:
    def __init__(self, lines: list[bytes]) -> None:
        self.content = _Content(lines)


class ScriptedApi:
    """Lists return ``items``; each watch delivers ``watch_lines`` once, then ends (as a server
    timeout would)."""

    def __init__(self, items: list[dict[str, Any]], watch_lines: list[bytes]) -> None:
        self.items = items
        self.watch_lines = watch_lines
        self.lists = 0
        self.watches = 0

    async def request(self, method: str, path: str, **_: Any) -> bytes:
        self.lists += 1
        return json.dumps(
            {"metadata": {"resourceVersion": str(10 + self.lists)}, "items": self.items}
        ).encode()

    @asynccontextmanager
    async def stream(self, path: str, query: Any, timeout: Any) -> AsyncIterator[_Response]:
        self.watches += 1
        lines = self.watch_lines if self.watches == 1 else []
        await anyio.sleep(0.01)
        yield _Response(lines)


class Recorder:
    def __init__(self, fail_on: str = "") -> None:
        self.fail_on = fail_on
        self.seen: list[str] = []
        self.synced_count = 0

    def upsert(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        self.seen.append(name)
        if name == self.fail_on:
            raise RuntimeError("a bug on this object")

    def delete(self, key: str) -> None:
        self.seen.append(f"-{key}")

    def synced(self) -> None:
        self.synced_count += 1


async def _run_until(informer: Informer[Any], done: Any, timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        async with anyio.create_task_group() as tg:
            await tg.start(informer.run)
            while not done():  # noqa: ASYNC110 - polling a plain predicate
                await anyio.sleep(0.01)
            tg.cancel_scope.cancel()


async def test_a_handler_failure_on_one_object_spares_the_rest_and_resync_judges_it_again() -> None:
    line = json.dumps({"type": "ADDED", "object": _obj("c", "5")}).encode() + b"\n"
    api = ScriptedApi([_obj("a", "1"), _obj("b", "2")], [line])
    handler = Recorder(fail_on="a")
    informer = Informer(
        api,  # type: ignore[arg-type]
        "jobs",
        "/apis/batch/v1/jobs",
        dict_codec(),
        handler,
        resync=0.05,
    )
    await _run_until(informer, lambda: handler.synced_count >= 3)
    # First list: a (fails), b; the watch adds c; each resync lists a and b again.
    assert handler.seen[:3] == ["a", "b", "c"]
    assert handler.seen.count("a") >= 3, "the failed object is judged again on every resync"
    assert api.lists >= 3


async def test_without_resync_the_informer_only_lists_once() -> None:
    api = ScriptedApi([_obj("a", "1")], [])
    handler = Recorder()
    informer = Informer(api, "jobs", "/apis/batch/v1/jobs", dict_codec(), handler)  # type: ignore[arg-type]

    await _run_until(informer, lambda: api.watches >= 5)
    assert api.lists == 1
    assert handler.seen == ["a"]
