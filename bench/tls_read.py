"""What the size of asyncio's TLS read buffer costs the controller: `python -m bench.tls_read`.

The controller sizes ``asyncio.sslproto.SSLProtocol.max_size`` down to one TLS record (see
``_TLS_READ_SIZE`` in kube/client.py) because asyncio allocates that buffer for every TLS
connection it opens. The buffer is where the socket's ciphertext lands before decryption, so a
smaller one means more, smaller socket reads per response: this measures what that costs on the
largest thing the controller reads, a LIST body, through the real client (TLS, HTTP) up to the
bytes the informer decodes, against a TLS server in another process (so the client's CPU time
is its own). JSON decoding is left out: it does not depend on the buffer, and the informer
decodes page by page.
Prints a Markdown table: MiB/s and client CPU ms per MiB for each buffer size and body size,
median of ``--reads`` reads on a warm connection, plus what the buffers weigh for 80 pooled
connections (the pools' size under load in the backlog benchmark).
"""

from __future__ import annotations

import argparse
import asyncio
import asyncio.sslproto
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiohttp import web
from e2e.webhook import write_serving_cert

from kubequeue.kube.client import PoolLimits, open_client
from kubequeue.kube.kubeconfig import ClusterAccess

_POOLED_CONNECTIONS = 80


def _job_list(mib: float) -> bytes:
    """A JobList of about ``mib`` MiB, items shaped like small real Jobs."""
    item = {
        "metadata": {"name": "job-00000", "namespace": "team-a", "labels": {"app": "x" * 64}},
        "spec": {"suspend": True, "parallelism": 4, "template": {"spec": {"containers": []}}},
    }
    one = json.dumps(item)
    count = max(1, int(mib * 2**20 / len(one)))
    items = ",".join(one.replace("job-00000", f"job-{i:07d}") for i in range(count))
    return b'{"kind":"JobList","items":[' + items.encode() + b"]}"


async def _serve(directory: Path, sizes: list[float]) -> None:
    bodies = {f"/list/{mib}": _job_list(mib) for mib in sizes}
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(directory / "tls.crt", directory / "tls.key")

    async def answer(request: web.Request) -> web.Response:
        return web.Response(body=bodies[request.path], content_type="application/json")

    app = web.Application()
    app.router.add_get("/list/{mib}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    print(runner.addresses[0][1], flush=True)
    await asyncio.Event().wait()


async def _measure(url: str, ca: bytes, buffer: int, mib: float, reads: int) -> tuple[float, float]:
    access = ClusterAccess(server=url, ca=ca)
    async with open_client(access, PoolLimits()) as client:
        # open_client applies the controller's size; the class attribute is read again for every
        # connection and every socket read, so setting it here measures ``buffer`` instead.
        asyncio.sslproto.SSLProtocol.max_size = buffer
        await client.request("GET", f"/list/{mib}")  # connect and warm up
        walls, cpus = [], []
        for _ in range(reads):
            wall, cpu = time.perf_counter(), time.process_time()
            await client.request("GET", f"/list/{mib}")
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
    return mib / statistics.median(walls), statistics.median(cpus) * 1000 / mib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", default="1,16,64", help="LIST body sizes, MiB")
    parser.add_argument("--buffers", default="262144,65536,16384", help="read buffer sizes")
    parser.add_argument("--reads", type=int, default=7)
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [float(m) for m in args.mib.split(",")]
    if args.serve:
        asyncio.run(_serve(args.serve, sizes))
        return
    with tempfile.TemporaryDirectory() as tmp:
        ca = write_serving_cert(Path(tmp))
        server = subprocess.Popen(
            [sys.executable, "-m", "bench.tls_read", "--serve", tmp, "--mib", args.mib],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None
            url = f"https://127.0.0.1:{server.stdout.readline().strip()}"
            print(f"# TLS LIST reads, {args.reads} per cell, median; pid {os.getpid()}")
            print(
                "| read buffer | "
                + " | ".join(f"{m:g} MiB: MiB/s, CPU ms/MiB" for m in sizes)
                + " |"
            )
            print("|---|" + "---:|" * len(sizes))
            for buffer in (int(b) for b in args.buffers.split(",")):
                cells = []
                for mib in sizes:
                    rate, cpu = asyncio.run(_measure(url, ca, buffer, mib, args.reads))
                    cells.append(f"{rate:.0f}, {cpu:.1f}")
                weight = buffer * _POOLED_CONNECTIONS / 2**20
                label = f"{buffer // 1024} KiB ({weight:.2f} MiB for {_POOLED_CONNECTIONS} conns)"
                print(f"| {label} | " + " | ".join(cells) + " |")
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
