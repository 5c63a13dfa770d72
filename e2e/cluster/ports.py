"""Reserve free loopback ports that no other local cluster on this machine will also pick.

Ports come from below the kernel's ephemeral range, so outgoing connections (which take their
local port from that range) cannot grab a port between our check and the component's bind. A
port counts as ours while we hold an flock on a per-port file in the system temp dir; the kernel
drops the lock when the process exits, however it exits, so a crashed run never leaks ports.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
import tempfile
from pathlib import Path
from typing import IO

LOCK_DIR = Path(tempfile.gettempdir()) / "kube-queue-ports"
LOWEST_PORT = 20000


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class PortReservation:
    """Holds port locks until ``release()``; ports are handed out by ``take()``."""

    def __init__(self) -> None:
        self._locks: list[IO[str]] = []
        self.ports: list[int] = []

    def take(self) -> int:
        LOCK_DIR.mkdir(exist_ok=True)
        high = max(_ephemeral_low() - 1, LOWEST_PORT + 1000)
        for _ in range(200):
            port = random.randint(LOWEST_PORT, high)
            lock = open(LOCK_DIR / f"{port}.lock", "w")  # noqa: SIM115 - held until release()
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.close()
                continue
            if not _bindable(port):
                lock.close()
                continue
            lock.write(str(os.getpid()))
            lock.flush()
            self._locks.append(lock)
            self.ports.append(port)
            return port
        raise RuntimeError(f"no free loopback port found in {LOWEST_PORT}-{high}")

    def release(self) -> None:
        for lock in self._locks:
            with contextlib.suppress(OSError):
                lock.close()
        self._locks.clear()
        self.ports.clear()
