"""Serving certificates Kueue insists on when it runs out of cluster.

With ``internalCertManagement`` off (its cert rotator would need a Service, a Secret and the
webhook configurations of an in-cluster install), the manager refuses to start unless it finds a
``tls.crt``/``tls.key`` pair in the webhook ``certDir`` AND in ``/etc/kueue/metrics/certs``, a
path hard-coded in cmd/kueue/main.go, even with metrics off. Nothing ever connects to either
server (no webhook configuration points at it, metrics are off), so a self-signed pair is enough.

The ``/etc`` path is shared by every Kueue on the machine, and other people's sessions may run
one at the same time. So the directory is reference-counted under an flock: whoever finds it
missing creates it and marks it as ours, every user registers its pid, and the last one to leave
(dead pids are pruned, so a crashed session does not pin it) removes it together with the parent
directories we created. A pair that was there before us is used as is and never removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

# Private helpers of the cluster PKI, reused so both make keys and validity windows alike.
from e2e.cluster.certs import _builder, _name, _new_key, _write_key

METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
_MARKER = ".created-by-kube-queue-e2e.json"  # lists the directories we created
_USERS = ".kube-queue-e2e-users"  # one file per pid that relies on the pair
_LOCK = Path(tempfile.gettempdir()) / "kube-queue-kueue-metrics-certs.lock"


class CertDirError(RuntimeError):
    """The hard-coded metrics cert directory cannot be created or written."""


def write_self_signed(directory: Path, common_name: str = "kueue-e2e") -> None:
    """Write a self-signed serving pair ``tls.crt``/``tls.key`` for 127.0.0.1 into
    ``directory``; each file is replaced atomically, so a starting Kueue never reads half."""
    directory.mkdir(parents=True, exist_ok=True)
    key = _new_key()
    name = _name(common_name)
    cert = (
        _builder(name, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    scratch_key = directory / f".tls.key.{os.getpid()}"
    scratch_crt = directory / f".tls.crt.{os.getpid()}"
    _write_key(scratch_key, key)
    scratch_crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    scratch_key.replace(directory / "tls.key")
    scratch_crt.replace(directory / "tls.crt")


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    with open(_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def acquire_metrics_certs(directory: Path = METRICS_CERT_DIR) -> bool:
    """Make sure ``directory`` holds a serving pair; register this process as a user of it.

    Returns True if the pair is ours (created by this or another kube-queue session), False if
    it was there before and belongs to someone else. Raises CertDirError, saying what to do, if
    the directory cannot be created.
    """
    with _locked():
        marker = directory / _MARKER
        if (directory / "tls.crt").is_file() and (directory / "tls.key").is_file():
            if not marker.is_file():
                return False  # someone else's Kueue install: leave it alone
        else:
            created: list[str] = []
            missing = [p for p in (directory, *directory.parents) if not p.exists()]
            try:
                for path in reversed(missing):
                    path.mkdir()
                    created.append(str(path))
                write_self_signed(directory, "kueue-metrics-e2e")
            except OSError as error:
                raise CertDirError(
                    f"Kueue needs a serving certificate in {directory} (hard-coded in its "
                    f"cmd/kueue/main.go when internalCertManagement is off) and it could not be "
                    f"written: {error}. Run as a user who may create {directory}, or create it "
                    "once with tls.crt/tls.key (any self-signed pair) in it."
                ) from error
            if not marker.is_file():
                marker.write_text(json.dumps({"created": created}) + "\n")
        users = directory / _USERS
        users.mkdir(exist_ok=True)
        (users / str(os.getpid())).touch()
        return True


def release_metrics_certs(directory: Path = METRICS_CERT_DIR) -> bool:
    """Unregister this process; the last user removes the pair and the directories we created.

    Returns True if the directory was removed.
    """
    with _locked():
        marker = directory / _MARKER
        users = directory / _USERS
        if not marker.is_file():
            return False
        with contextlib.suppress(FileNotFoundError):
            (users / str(os.getpid())).unlink()
        for entry in users.iterdir() if users.is_dir() else ():
            if entry.name.isdigit() and not _alive(int(entry.name)):
                entry.unlink(missing_ok=True)
        if users.is_dir() and any(users.iterdir()):
            return False
        try:
            created = [Path(p) for p in json.loads(marker.read_text()).get("created", [])]
        except ValueError:
            created = []
        for name in ("tls.crt", "tls.key", _MARKER):
            (directory / name).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            users.rmdir()
        # Deepest first; a directory someone else put files into meanwhile stays.
        for path in sorted(created, key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                path.rmdir()
        return True
