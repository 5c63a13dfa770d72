"""In-process stand-ins for KubeClient with scriptable failures, for the code that writes.

Each failure mode is one way a request can end:

- ``refuse``:  TransportError before the server saw it (maybe_applied is false);
- ``drop``:    the server applies the request, then the answer is lost (TransportError);
- ``cut``:     the connection breaks before the server applied it, but the client cannot know
               that (TransportError, maybe_applied);
- ``timeout``: the server answers 504 Timeout without having applied it (ApiError,
               maybe_applied);
- ``hang``:    no answer until the caller gives up (cancels);
- ``reject``:  the server answers 500 (ApiError).
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import anyio
import anyio.lowlevel

from kubequeue.kube.client import ApiError, TransportError
from unit.jsonpatch import NOT_APPLIED, PatchFailed, apply_patch

FAILURES = ("refuse", "drop", "hang", "reject")


def transport_error(method: str, path: str, *, applied: bool) -> TransportError:
    cause = aiohttp.ServerDisconnectedError() if applied else aiohttp.ConnectionTimeoutError()
    return TransportError(method, path, cause)


class Store:
    """Objects by path, with resourceVersion preconditions as the API server checks them."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self._rv = itertools.count(1)

    def put(self, path: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        stored = copy.deepcopy(dict(obj))
        stored.setdefault("metadata", {})["resourceVersion"] = str(next(self._rv))
        self.objects[path] = stored
        return copy.deepcopy(stored)

    def get(self, path: str) -> dict[str, Any]:
        if path not in self.objects:
            raise ApiError(404, "NotFound", "not found", path)
        return copy.deepcopy(self.objects[path])

    def check(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        current = self.get(path)
        expected = (body.get("metadata") or {}).get("resourceVersion")
        if expected and expected != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified", path)
        return current


class FakeClient:
    """A KubeClient over a Store. ``fail[method]`` is a list of failure modes consumed one per
    call (``broken`` fails every call with one mode); ``calls`` records (method, path)."""

    def __init__(self, store: Store | None = None) -> None:
        self.store = store if store is not None else Store()
        self.fail: dict[str, list[str]] = {}
        self.broken: str | None = None
        self.calls: list[tuple[str, str]] = []
        self.applied: list[tuple[str, str]] = []
        self.on_call: Callable[[str, str], None] | None = None
        self.lease = self

    async def _fail_or_apply(self, method: str, path: str, apply: Callable[[], Any]) -> Any:
        self.calls.append((method, path))
        if self.on_call is not None:
            self.on_call(method, path)
        queued = self.fail.get(method)
        mode = queued.pop(0) if queued else self.broken  # taken even if cancelled just below
        await anyio.lowlevel.checkpoint()
        if mode == "refuse":
            raise transport_error(method, path, applied=False)
        if mode == "cut":
            raise transport_error(method, path, applied=True)
        if mode == "timeout":
            raise ApiError(504, "Timeout", "request did not complete within 60s", path)
        if mode == "hang":
            await anyio.sleep_forever()
        if mode == "reject":
            raise ApiError(500, "InternalError", "etcd is having a bad day", path)
        result = apply()
        self.applied.append((method, path))
        if mode == "drop":
            raise transport_error(method, path, applied=True)
        return result

    async def request(self, method: str, path: str, *, query: Any = (), **_: Any) -> bytes:
        """Raw reads (kube/pods.py lists pods this way): a LIST's JSON body, one page."""
        assert method == "GET", method
        listed = await self._fail_or_apply("LIST", path, lambda: self._list(path, query))
        return json.dumps(listed).encode()

    async def get(self, path: str, query: Any = ()) -> dict[str, Any]:
        if query:
            return await self._fail_or_apply("LIST", path, lambda: self._list(path, query))
        return await self._fail_or_apply("GET", path, lambda: self.store.get(path))

    def _list(self, path: str, query: Any) -> dict[str, Any]:
        selector = dict(query).get("fieldSelector", "")
        name = selector.partition("metadata.name=")[2]
        items = [
            copy.deepcopy(o)
            for p, o in self.store.objects.items()
            if p.rpartition("/")[0] == path and (not name or o["metadata"].get("name") == name)
        ]
        return {"metadata": {"resourceVersion": "0"}, "items": items}

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        target = f"{path}/{body['metadata']['name']}"

        def apply() -> dict[str, Any]:
            if target in self.store.objects:
                raise ApiError(409, "AlreadyExists", "exists", target)
            return self.store.put(target, body)

        return await self._fail_or_apply("POST", target, apply)

    async def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        def apply() -> dict[str, Any]:
            self.store.check(path, body)
            return self.store.put(path, body)

        return await self._fail_or_apply("PUT", path, apply)

    async def merge_patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        def apply() -> dict[str, Any]:
            current = self.store.check(path, body)
            patch = copy.deepcopy(dict(body))
            patch.get("metadata", {}).pop("resourceVersion", None)
            return self.store.put(path, _merge(current, patch))

        return await self._fail_or_apply("PATCH", path, apply)

    async def json_patch(
        self, path: str, ops: list[dict[str, Any]], *, answer: bool = True
    ) -> dict[str, Any]:
        def apply() -> dict[str, Any]:
            current = self.store.get(path)
            try:
                patched = apply_patch(current, ops)
            except PatchFailed:
                raise ApiError(422, "Invalid", NOT_APPLIED, path) from None
            return self.store.put(path, patched)

        return await self._fail_or_apply("PATCH", path, apply)


def _merge(base: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in patch.items():
        if value is None:
            base.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base
