"""Local stand-ins for the API server, for tests that must exercise the real HTTP client.

``serve`` runs an aiohttp app on 127.0.0.1 (well-behaved HTTP, any status); ``raw_server`` runs
a bare TCP server whose handler can misbehave in ways HTTP frameworks will not (drop the
connection mid-request, cut a body short). ``FakeApi`` is a small in-memory API server: objects
by path with resourceVersion preconditions, lists, empty watches held open, as the controller
needs them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from kubequeue.kube.client import KubeClient, PoolLimits, open_client
from kubequeue.kube.kubeconfig import ClusterAccess
from unit.jsonpatch import NOT_APPLIED, PatchFailed, apply_patch


@asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    """The app on a free local port; yields its base URL."""
    runner = web.AppRunner(app, shutdown_timeout=0.5, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


RawHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def raw_server(handler: RawHandler) -> AsyncIterator[str]:
    async def guarded(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(guarded, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


async def read_request(reader: asyncio.StreamReader) -> tuple[str, bytes]:
    """One HTTP/1.1 request off the wire: its request line and body."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    body = await reader.readexactly(length) if length else b""
    return lines[0], body


def access(url: str, **fields: Any) -> ClusterAccess:
    """The server at ``url``, without credentials unless given."""
    return ClusterAccess(server=url, **fields)


@asynccontextmanager
async def client_for(
    url: str, limits: PoolLimits | None = None, **fields: Any
) -> AsyncIterator[KubeClient]:
    async with open_client(access(url, **fields), limits or PoolLimits()) as client:
        yield client


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "code": code, "reason": reason, "message": message}
    return web.json_response(body, status=code)


class FakeApi:
    """Objects by path, each write checked against ``metadata.resourceVersion`` like the API
    server does; GET on a collection lists it, with ``?watch=1`` it opens a watch that stays
    silent until the client goes away. Counts what it was asked, for assertions."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.authorization: set[str | None] = set()
        # Methods whose next request has its connection closed before anything is done.
        self.drop: list[str] = []
        self.open_watches = 0
        self._rv = itertools.count(100)
        self.app = web.Application()
        self.app.router.add_route("*", "/{tail:.*}", self._handle)

    def put(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        obj.setdefault("metadata", {})["resourceVersion"] = str(next(self._rv))
        self.objects[path] = obj
        return obj

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        self.requests.append((request.method, path))
        self.authorization.add(request.headers.get("Authorization"))
        if request.method in self.drop and request.transport is not None:
            self.drop.remove(request.method)
            request.transport.close()
            return web.Response(status=500)  # never sent: the connection is gone
        if request.method == "GET" and request.query.get("watch"):
            return await self._watch(request)
        if request.method == "GET":
            if path in self.objects:
                return web.json_response(self.objects[path])
            if _is_collection(path):
                items = [o for p, o in self.objects.items() if path in _collections_of(p)]
                selector = request.query.get("fieldSelector", "")
                if selector.startswith("metadata.name="):
                    wanted = selector.partition("=")[2]
                    items = [o for o in items if o["metadata"].get("name") == wanted]
                meta = {"resourceVersion": str(next(self._rv))}
                return web.json_response({"metadata": meta, "items": items})
            return _status(404, "NotFound", f"{path} not found")
        body = await request.json()
        if request.method == "POST":
            name = body["metadata"]["name"]
            target = f"{path}/{name}"
            if target in self.objects:
                return _status(409, "AlreadyExists", f"{name} exists")
            return web.json_response(self.put(target, body), status=201)
        current = self.objects.get(path)
        if current is None:
            return _status(404, "NotFound", f"{path} not found")
        if request.content_type == "application/json-patch+json":
            try:
                patched = apply_patch(current, body)
            except PatchFailed:
                return _status(422, "Invalid", NOT_APPLIED)
            return web.json_response(self.put(path, patched))
        expected = (body.get("metadata") or {}).get("resourceVersion")
        if expected and expected != current["metadata"]["resourceVersion"]:
            return _status(409, "Conflict", "the object has been modified")
        if request.method == "PUT":
            return web.json_response(self.put(path, body))
        merged = _merge(json.loads(json.dumps(current)), body)
        return web.json_response(self.put(path, merged))

    async def _watch(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        self.open_watches += 1
        try:
            await asyncio.Event().wait()  # until the client disconnects (handler cancelled)
        finally:
            self.open_watches -= 1
        return resp


def _is_collection(path: str) -> bool:
    parts = path.strip("/").split("/")
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    return len(rest) == 1


def _collections_of(path: str) -> tuple[str, str]:
    """The namespaced and the all-namespaces collection an object path belongs to."""
    parent = path.rpartition("/")[0]
    head, sep, tail = parent.partition("/namespaces/")
    return parent, (f"{head}/{tail.partition('/')[2]}" if sep else parent)


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    for key, value in patch.items():
        if value is None:
            base.pop(key, None)
        elif isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base
