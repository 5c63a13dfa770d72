"""kube/credentials.py: token files reread, exec plugins run as real processes (rerun when their
credential expires or is refused), and TLS with our own CA and client certificates against a
local HTTPS server."""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubequeue.kube.client import TransportError, connect
from kubequeue.kube.credentials import CredentialError, Credentials, tls_context
from kubequeue.kube.kubeconfig import ClusterAccess, ConfigError, ExecPlugin
from unit.apiserver import client_for

V1 = "client.authentication.k8s.io/v1"
PATH = "/api/v1/namespaces"


# -- a real plugin --------------------------------------------------------------------------

PLUGIN = """#!{python}
import os, pathlib, sys, time
here = pathlib.Path(__file__).parent
with (here / "runs").open("a") as f:
    f.write("x")
run = len((here / "runs").read_text())
(here / f"exec-info-{{run}}.json").write_text(os.environ.get("KUBERNETES_EXEC_INFO", ""))
(here / f"argv-{{run}}.json").write_text(repr(sys.argv[1:]) + " " + os.environ.get("REGION", ""))
time.sleep(float(os.environ.get("SLEEP", "0")))
sys.stderr.write(os.environ.get("COMPLAIN", ""))
sys.stdout.write((here / "response").read_text().replace("RUN", str(run)))
sys.exit(int(os.environ.get("EXIT", "0")))
"""


@dataclass
class Plugin:
    directory: Path

    @property
    def script(self) -> Path:
        return self.directory / "plugin.py"

    @property
    def runs(self) -> int:
        path = self.directory / "runs"
        return len(path.read_text()) if path.exists() else 0

    def respond(self, status: dict[str, Any] | str, api_version: str = V1) -> None:
        body = status if isinstance(status, str) else json.dumps(
            {"apiVersion": api_version, "kind": "ExecCredential", "status": status}
        )
        (self.directory / "response").write_text(body)

    def exec_info(self, run: int) -> dict[str, Any]:
        info: dict[str, Any] = json.loads((self.directory / f"exec-info-{run}.json").read_text())
        return info

    def config(self, *env: tuple[str, str], args: tuple[str, ...] = ()) -> ExecPlugin:
        return ExecPlugin(command=str(self.script), api_version=V1, args=args, env=env,
                          where="user 'dev' in test")


@pytest.fixture
def plugin(tmp_path: Path) -> Plugin:
    found = Plugin(tmp_path / "plugin")
    found.directory.mkdir()
    found.script.write_text(PLUGIN.format(python=sys.executable))
    found.script.chmod(0o755)
    found.respond({"token": "token-RUN"})
    return found


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def stamp(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def authorization(credentials: Credentials) -> str | None:
    return (await credentials.current()).headers.get("Authorization")


# -- static and file tokens -------------------------------------------------------------------


async def test_static_token_and_basic_auth() -> None:
    assert await authorization(Credentials(ClusterAccess("http://x", token="t"))) == "Bearer t"
    basic = Credentials(ClusterAccess("http://x", basic=("user", "pa:ss")))
    assert await authorization(basic) == "Basic dXNlcjpwYTpzcw=="
    assert await authorization(Credentials(ClusterAccess("http://x"))) is None
    with pytest.raises(ConfigError, match="control characters"):
        Credentials(ClusterAccess("http://x", token="t\r\nX-Injected: 1"))


async def test_a_token_file_is_reread_every_period_and_after_a_401(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")
    clock = Clock()
    credentials = Credentials(
        ClusterAccess("http://x", token_file=token), monotonic=clock, token_period=60
    )
    first = await credentials.current()
    assert first.headers["Authorization"] == "Bearer one"
    token.write_text("two")  # the kubelet rotated it
    clock.now += 59
    assert await credentials.current() is first
    clock.now += 1
    assert await authorization(credentials) == "Bearer two"
    token.write_text("three")
    credentials.rejected(await credentials.current())  # the server no longer takes "two"
    assert await authorization(credentials) == "Bearer three"


async def test_an_unreadable_token_file_keeps_the_last_token(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("good")
    clock = Clock()
    credentials = Credentials(ClusterAccess("http://x", token_file=token), monotonic=clock)
    assert await authorization(credentials) == "Bearer good"
    token.unlink()
    clock.now += 3600
    assert await authorization(credentials) == "Bearer good"
    fallback = Credentials(ClusterAccess("http://x", token="static", token_file=token))
    assert await authorization(fallback) == "Bearer static"  # as client-go: file, else token
    with pytest.raises(CredentialError, match="cannot read token file"):
        await Credentials(ClusterAccess("http://x", token_file=token)).current()


# -- exec plugins -----------------------------------------------------------------------------


async def test_an_exec_plugin_runs_once_and_is_told_what_it_needs(plugin: Plugin) -> None:
    exec_plugin = ExecPlugin(
        command=str(plugin.script),
        api_version=V1,
        args=("--cluster", "dev"),
        env=(("REGION", "eu"),),
        cluster={"server": "https://api.example"},
    )
    credentials = Credentials(ClusterAccess("http://x", exec=exec_plugin))
    assert await authorization(credentials) == "Bearer token-1"
    assert await authorization(credentials) == "Bearer token-1"  # no expiry: kept
    assert plugin.runs == 1
    assert plugin.exec_info(1) == {
        "apiVersion": V1,
        "kind": "ExecCredential",
        "spec": {"interactive": False, "cluster": {"server": "https://api.example"}},
    }
    assert (plugin.directory / "argv-1.json").read_text() == "['--cluster', 'dev'] eu"


async def test_an_expired_credential_runs_the_plugin_again(plugin: Plugin) -> None:
    clock = Clock()
    plugin.respond({"token": "token-RUN", "expirationTimestamp": stamp(clock.now + 600)})
    credentials = Credentials(ClusterAccess("http://x", exec=plugin.config()), clock=clock)
    assert await authorization(credentials) == "Bearer token-1"
    clock.now += 599
    assert await authorization(credentials) == "Bearer token-1"
    assert plugin.runs == 1
    clock.now += 1
    assert await authorization(credentials) == "Bearer token-2"
    assert plugin.runs == 2
    assert "spec" in plugin.exec_info(2) and "cluster" not in plugin.exec_info(2)["spec"]


async def test_concurrent_requests_share_one_plugin_run(plugin: Plugin) -> None:
    credentials = Credentials(ClusterAccess("http://x", exec=plugin.config()))
    seen: list[str | None] = []

    async def ask() -> None:
        seen.append(await authorization(credentials))

    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(ask)
    assert seen == ["Bearer token-1"] * 10
    assert plugin.runs == 1


async def test_a_refused_credential_runs_the_plugin_once_more(plugin: Plugin) -> None:
    credentials = Credentials(ClusterAccess("http://x", exec=plugin.config()))
    refused = await credentials.current()
    credentials.rejected(refused)
    assert await authorization(credentials) == "Bearer token-2"
    credentials.rejected(refused)  # a late 401 for the old token: the new one stays
    assert await authorization(credentials) == "Bearer token-2"
    assert plugin.runs == 2


@pytest.mark.parametrize(
    ("response", "env", "message"),
    [
        ({"token": "t"}, (("EXIT", "3"), ("COMPLAIN", "login expired")),
         "exited with status 3: login expired"),
        ("not json", (), "did not print an ExecCredential as JSON"),
        ('{"kind": "Other"}', (), "did not print an ExecCredential"),
        ({}, (), "neither a token nor a client certificate"),
        ({"clientCertificateData": "PEM"}, (), "come together"),
        ({"token": 5}, (), "status.token must be a string"),
        ({"token": "t", "expirationTimestamp": "tomorrow"}, (), "is not RFC 3339"),
        ({"token": "t", "expirationTimestamp": "2030-01-01T00:00:00"}, (), "is not RFC 3339"),
    ],
)
async def test_a_failing_or_confused_plugin_is_a_credential_error(
    plugin: Plugin, response: Any, env: tuple[tuple[str, str], ...], message: str
) -> None:
    plugin.respond(response)
    with pytest.raises(CredentialError, match=message):
        await Credentials(ClusterAccess("http://x", exec=plugin.config(*env))).current()


async def test_plugin_api_version_must_match(plugin: Plugin) -> None:
    plugin.respond({"token": "t"}, api_version="client.authentication.k8s.io/v1beta1")
    with pytest.raises(CredentialError, match=r"printed apiVersion .*v1beta1.*configured .*v1'"):
        await Credentials(ClusterAccess("http://x", exec=plugin.config())).current()


async def test_a_missing_or_hung_plugin(plugin: Plugin, tmp_path: Path) -> None:
    missing = ExecPlugin(command=str(tmp_path / "nope"), api_version=V1,
                         install_hint="brew install nope")
    with pytest.raises(CredentialError, match=r"could not be started: .*; brew install nope"):
        await Credentials(ClusterAccess("http://x", exec=missing)).current()
    hung = Credentials(
        ClusterAccess("http://x", exec=plugin.config(("SLEEP", "30"))), exec_timeout=0.5
    )
    with anyio.fail_after(10), pytest.raises(CredentialError, match=r"did not finish in 0\.5s"):
        await hung.current()


# -- TLS -----------------------------------------------------------------------------------------


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@dataclass
class Pki:
    ca: bytes
    server_cert: bytes
    server_key: bytes
    client_cert: bytes
    client_key: bytes
    other_client_cert: bytes
    other_client_key: bytes


def make_pki(server_names: list[x509.GeneralName]) -> Pki:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])

    def issue(
        subject: str, public: ec.EllipticCurvePublicKey, ca: bool = False,
        usage: x509.ObjectIdentifier | None = None, sans: list[x509.GeneralName] | None = None,
    ) -> bytes:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(ca_name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
        )
        if ca:
            builder = builder.add_extension(
                x509.KeyUsage(True, False, False, False, False, True, True, False, False),
                critical=True,
            )
        if usage is not None:
            builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)

    server_key, client_key, other_key = _key(), _key(), _key()
    return Pki(
        ca=issue("test-ca", ca_key.public_key(), ca=True),
        server_cert=issue("apiserver", server_key.public_key(),
                          usage=ExtendedKeyUsageOID.SERVER_AUTH, sans=server_names),
        server_key=_pem_key(server_key),
        client_cert=issue("alice", client_key.public_key(),
                          usage=ExtendedKeyUsageOID.CLIENT_AUTH),
        client_key=_pem_key(client_key),
        other_client_cert=issue("bob", other_key.public_key(),
                                usage=ExtendedKeyUsageOID.CLIENT_AUTH),
        other_client_key=_pem_key(other_key),
    )


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])


def _files(directory: Path, **named: bytes) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, data in named.items():
        paths[name] = directory / name
        paths[name].write_bytes(data)
    return paths


@asynccontextmanager
async def https_server(pki: Pki, tmp_path: Path) -> AsyncIterator[tuple[str, list[str]]]:
    """An HTTPS server that requires a client certificate from ``pki``'s CA; it answers with
    the client's common name and records it and the Authorization header."""
    seen: list[str] = []
    files = _files(tmp_path / "server", ca=pki.ca, cert=pki.server_cert, key=pki.server_key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(files["ca"]))
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(files["cert"], files["key"])

    async def handle(request: web.Request) -> web.Response:
        assert request.transport is not None
        peer = request.transport.get_extra_info("peercert")
        cn = next(v for ((k, v),) in peer["subject"] if k == "commonName")
        seen.append(f"{cn} {request.headers.get('Authorization')}")
        return web.json_response({"kind": "NamespaceList", "items": [], "cn": cn})

    app = web.Application()
    app.router.add_get(PATH, handle)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    try:
        yield f"https://127.0.0.1:{runner.addresses[0][1]}", seen
    finally:
        await runner.cleanup()


async def test_tls_with_our_ca_and_a_client_certificate(pki: Pki, tmp_path: Path) -> None:
    async with https_server(pki, tmp_path) as (url, seen):
        async with client_for(url, ca=pki.ca, client_cert=pki.client_cert,
                              client_key=pki.client_key, token="t") as client:
            assert (await client.get(PATH))["cn"] == "alice"
            assert (await client.lease.get(PATH))["cn"] == "alice"
        assert seen == ["alice Bearer t", "alice Bearer t"]
        # Without our CA the system roots do not trust the server: nothing is sent.
        async with client_for(url, client_cert=pki.client_cert,
                              client_key=pki.client_key) as client:
            with pytest.raises(TransportError) as caught:
                await client.get(PATH)
            assert not caught.value.maybe_applied
            assert "certificate verify failed" in str(caught.value)
        # insecure-skip-tls-verify: no check of the server at all.
        async with client_for(url, insecure=True, client_cert=pki.client_cert,
                              client_key=pki.client_key) as client:
            assert (await client.get(PATH))["cn"] == "alice"


async def test_tls_server_name_checks_the_certificate_against_that_name(
    tmp_path: Path,
) -> None:
    pki = make_pki([x509.DNSName("kubernetes.default.svc")])  # no IP: dialled by address
    tls = {"ca": pki.ca, "client_cert": pki.client_cert, "client_key": pki.client_key}
    async with https_server(pki, tmp_path) as (url, _):
        async with client_for(url, **tls) as client:
            with pytest.raises(TransportError, match=r"127\.0\.0\.1"):
                await client.get(PATH)
        async with client_for(url, tls_server_name="kubernetes.default.svc", **tls) as client:
            assert (await client.get(PATH))["cn"] == "alice"


async def test_a_kubeconfig_with_an_exec_plugin_that_returns_a_client_certificate(
    pki: Pki, plugin: Plugin, tmp_path: Path
) -> None:
    """The whole path: kubeconfig file (relative paths), connect(), a real plugin process
    whose certificate (and token) the TLS handshake presents, rerun when it expires."""
    plugin.respond({
        "token": "token-RUN",
        "clientCertificateData": pki.other_client_cert.decode(),
        "clientKeyData": pki.other_client_key.decode(),
        "expirationTimestamp": stamp(0),  # long expired: every request reruns it
    })
    _files(tmp_path, **{"ca.crt": pki.ca})
    async with https_server(pki, tmp_path) as (url, seen):
        config = {
            "current-context": "dev",
            "contexts": [{"name": "dev", "context": {"cluster": "dev", "user": "dev"}}],
            "clusters": [{"name": "dev", "cluster": {"server": url,
                                                     "certificate-authority": "ca.crt"}}],
            "users": [{"name": "dev", "user": {"exec": {
                "apiVersion": V1, "command": "./plugin/plugin.py", "interactiveMode": "Never",
            }}}],
        }
        (tmp_path / "config").write_text(yaml.safe_dump(config))
        async with connect(str(tmp_path / "config")) as client:
            assert (await client.get(PATH))["cn"] == "bob"
            assert (await client.get(PATH))["cn"] == "bob"
    assert seen == ["bob Bearer token-2", "bob Bearer token-3"]  # run 1 was connect()'s check


async def test_connect_fails_early_when_the_plugin_fails(plugin: Plugin, tmp_path: Path) -> None:
    config = {
        "current-context": "dev",
        "contexts": [{"name": "dev", "context": {"cluster": "dev", "user": "dev"}}],
        "clusters": [{"name": "dev", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "dev", "user": {"exec": {
            "apiVersion": V1, "command": str(plugin.script),
            "env": [{"name": "EXIT", "value": "1"}],
        }}}],
    }
    (tmp_path / "config").write_text(yaml.safe_dump(config))
    with pytest.raises(CredentialError, match="exited with status 1"):
        async with connect(str(tmp_path / "config")):
            pass


async def test_a_plugin_failure_while_running_is_a_transport_error_never_sent(
    plugin: Plugin,
) -> None:
    async with client_for("http://127.0.0.1:1", exec=plugin.config(("EXIT", "2"))) as client:
        with pytest.raises(TransportError) as caught:
            await client.merge_patch(PATH, {"metadata": {}})
    assert isinstance(caught.value.cause, CredentialError)
    assert not caught.value.maybe_applied


async def test_a_401_makes_the_next_request_use_fresh_credentials(plugin: Plugin) -> None:
    from unit.apiserver import serve

    async def handle(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != "Bearer token-2":
            return web.json_response({"kind": "Status", "reason": "Unauthorized"}, status=401)
        return web.json_response({"items": []})

    app = web.Application()
    app.router.add_get(PATH, handle)
    async with serve(app) as url, client_for(url, exec=plugin.config()) as client:
        from kubequeue.kube.client import ApiError

        with pytest.raises(ApiError) as refused:
            await client.get(PATH)
        assert refused.value.status == 401
        assert await client.get(PATH) == {"items": []}
    assert plugin.runs == 2


@pytest.mark.parametrize("memory", [True, False])
def test_client_keys_are_loaded_without_leaving_files(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, memory: bool
) -> None:
    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    access = ClusterAccess("https://x", ca=pki.ca)
    context = tls_context(access, pki.client_cert, pki.client_key, memory=memory)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert list(scratch.iterdir()) == []


def test_unusable_tls_material_is_a_config_error(pki: Pki) -> None:
    with pytest.raises(ConfigError, match="certificate authority is not PEM"):
        tls_context(ClusterAccess("https://x", ca=b"garbage"))
    with pytest.raises(ConfigError, match="certificate authority is not PEM"):
        tls_context(ClusterAccess("https://x", ca=b"  \n"))  # not "trust the system's"
    with pytest.raises(ConfigError, match="client certificate or key is not usable"):
        tls_context(ClusterAccess("https://x"), pki.client_cert, pki.other_client_key)
