"""A TCP proxy in front of the kube-apiserver that misbehaves on demand, for one client (the
controller under test) whose kubeconfig points at it. TLS passes through untouched (the
apiserver's certificate names 127.0.0.1, so verification still holds).

Modes, switched at any moment with ``proxy.mode = ...``:

- ``pass``: forward bytes both ways;
- ``delay``: forward each chunk ``delay_s`` late (a slow apiserver or a congested link);
- ``drop``: keep connections open but discard every byte both ways, and accept new
  connections that then hear nothing (a partition: requests time out, nothing stale lands
  later because nothing is buffered);
- ``reset``: close every connection now, and new ones at once (connection resets).
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

import anyio
from anyio.abc import SocketStream, TaskStatus

Mode = Literal["pass", "delay", "drop", "reset"]


class FaultProxy:
    def __init__(self, upstream_port: int, delay_s: float = 0.5) -> None:
        self.upstream_port = upstream_port
        self.delay_s = delay_s
        self.mode: Mode = "pass"
        self.port = 0
        self.connections = 0
        self.dropped_bytes = 0
        self._open: dict[anyio.CancelScope, tuple[SocketStream, ...]] = {}

    def set(self, mode: Mode) -> None:
        self.mode = mode
        if mode == "reset":
            for scope, streams in list(self._open.items()):
                for stream in streams:
                    self._linger_zero(stream)
                scope.cancel()  # the streams close on the way out: with an RST

    @staticmethod
    def _linger_zero(stream: SocketStream) -> None:
        """SO_LINGER 0: closing sends an RST, as a reset connection looks to the other end."""
        sock = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[FaultProxy]:
        async with anyio.create_task_group() as tg:
            await tg.start(self._serve)
            try:
                yield self
            finally:
                tg.cancel_scope.cancel()

    async def _serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = int(listener.extra(anyio.abc.SocketAttribute.local_port))
        task_status.started()
        async with listener:
            await listener.serve(self._handle)

    async def _handle(self, client: SocketStream) -> None:
        self.connections += 1
        if self.mode == "reset":
            self._linger_zero(client)
            await client.aclose()
            return
        try:
            upstream = await anyio.connect_tcp("127.0.0.1", self.upstream_port)
        except OSError:
            self._linger_zero(client)
            await client.aclose()
            return
        scope = anyio.CancelScope()
        self._open[scope] = (client, upstream)
        try:
            async with client, upstream:
                with scope:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._pump, client, upstream, tg.cancel_scope)
                        tg.start_soon(self._pump, upstream, client, tg.cancel_scope)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            self._open.pop(scope, None)

    async def _pump(self, source: SocketStream, sink: SocketStream,
                    scope: anyio.CancelScope) -> None:
        try:
            while True:
                try:
                    data = await source.receive(65536)
                except (anyio.EndOfStream, anyio.BrokenResourceError,
                        anyio.ClosedResourceError, OSError):
                    return
                if self.mode == "drop":
                    self.dropped_bytes += len(data)
                    continue
                if self.mode == "delay":
                    await anyio.sleep(self.delay_s)
                if self.mode == "reset":
                    return
                await sink.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            return
        finally:
            scope.cancel()
