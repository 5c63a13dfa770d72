"""Run one component as a child process with its output in a log file, and stop it for sure.

Each component runs in its own process group, so a Ctrl-C in the terminal reaches only the Python
parent, which then stops the components in order, and so stopping kills anything a component
spawned. On Linux each child also gets PR_SET_PDEATHSIG=SIGKILL: if the parent dies without
cleaning up (SIGKILL, crash), the kernel kills the components instead of leaving them running.
The death signal fires when the *thread* that started the child exits, so start components from
a thread that outlives them (the main thread, as the CLI and the pytest fixture do).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def _death_signal_setter() -> Callable[[], None] | None:
    if not sys.platform.startswith("linux"):
        return None
    # Resolved before fork: the child must not import or allocate before exec.
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def set_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    return set_death_signal


SET_DEATH_SIGNAL = _death_signal_setter()


class Process:
    """A long-running component: started once, stopped once, its log kept for diagnosis."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = [str(arg) for arg in argv]
        self.log_path = log_dir / f"{name}.log"
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(self.argv)}\n".encode())
            log.flush()
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env,
                cwd=self._cwd,
                process_group=0,
                preexec_fn=SET_DEATH_SIGNAL,  # only calls a prctl resolved before fork
            )

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen else None

    def exit_code(self) -> int | None:
        """None while running (or never started), else the exit code."""
        return self._popen.poll() if self._popen else None

    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after ``grace_s``; idempotent."""
        if self._popen is None:
            return
        pgid = self._popen.pid  # process_group=0 makes the child the leader of its own group
        if self._popen.poll() is None:
            self._signal_group(pgid, signal.SIGTERM)
            try:
                self._popen.wait(grace_s)
            except subprocess.TimeoutExpired:
                self._signal_group(pgid, signal.SIGKILL)
                self._popen.wait()
        # Helpers the component forked may still be alive in its group even if it exited.
        self._signal_group(pgid, signal.SIGKILL)

    @staticmethod
    def _signal_group(pgid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)

    def tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the log, for error messages."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(0, os.SEEK_END)
                size = log.tell()
                log.seek(max(0, size - 64 * 1024))
                text = log.read().decode(errors="replace")
        except OSError as error:
            return f"(no log: {error})"
        return "\n".join(text.splitlines()[-lines:])


def wait_for(
    description: str,
    check: Callable[[], bool],
    timeout_s: float,
    process: Process | None = None,
    interval_s: float = 0.2,
) -> float:
    """Poll ``check`` until it returns True; return the seconds it took.

    Fails fast if ``process`` exits meanwhile, and includes its log tail in the error either way,
    because "timed out" alone never tells why a component did not come up.
    """
    started = time.monotonic()
    deadline = started + timeout_s
    while True:
        if check():
            return time.monotonic() - started
        if process is not None and process.exit_code() is not None:
            raise ComponentError(
                f"{process.name} exited with code {process.exit_code()} while waiting for "
                f"{description}",
                process,
            )
        if time.monotonic() > deadline:
            raise ComponentError(
                f"timed out after {timeout_s:.0f}s waiting for {description}", process
            )
        time.sleep(interval_s)


class ComponentError(RuntimeError):
    """A component failed to start or become healthy; the message carries its log tail."""

    def __init__(self, message: str, process: Process | None) -> None:
        if process is not None:
            message += (
                f"\n--- last lines of {process.log_path} ---\n{process.tail()}\n--- end of log ---"
            )
        super().__init__(message)
