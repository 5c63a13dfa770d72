"""The chaos suite's fault proxy does what the fault scenarios rely on (against a local echo
server): pass, delay, drop (nothing arrives, nothing arrives later either), reset."""

from __future__ import annotations

import time

import anyio
import pytest
from anyio.abc import SocketStream
from e2e.chaos.proxy import FaultProxy


async def _echo(stream: SocketStream) -> None:
    async with stream:
        try:
            while True:
                await stream.send(await stream.receive())
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return


async def test_pass_delay_drop_reset() -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = int(listener.extra(anyio.abc.SocketAttribute.local_port))
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, _echo)
        proxy = FaultProxy(port, delay_s=0.3)
        async with proxy.serving():
            conn = await anyio.connect_tcp("127.0.0.1", proxy.port)
            await conn.send(b"hello")
            assert await conn.receive() == b"hello"

            proxy.set("delay")
            started = time.monotonic()
            await conn.send(b"slow")
            assert await conn.receive() == b"slow"
            assert time.monotonic() - started >= 0.5  # delayed each way

            proxy.set("drop")
            await conn.send(b"lost")
            with anyio.move_on_after(0.5) as waited:
                await conn.receive()
            assert waited.cancelled_caught, "nothing comes back while dropping"
            proxy.set("pass")
            await conn.send(b"after")
            assert await conn.receive() == b"after", "the dropped bytes never arrive late"
            assert proxy.dropped_bytes == 4

            proxy.set("reset")
            broken = (anyio.BrokenResourceError, anyio.EndOfStream, OSError)
            with pytest.raises(broken):
                await _round_trip(conn)
            with pytest.raises(broken):
                await _round_trip(await anyio.connect_tcp("127.0.0.1", proxy.port))
        tg.cancel_scope.cancel()


async def _round_trip(conn: SocketStream) -> bytes:
    await conn.send(b"x")
    return await conn.receive()
