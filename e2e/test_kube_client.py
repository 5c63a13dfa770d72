"""kube-queue's own API client against the real API server: TLS with the cluster's CA, and the
ways it proves who it is - a client certificate (the admin kubeconfig), a bearer token (a
ServiceAccount's, as the controller runs, also as an in-cluster service account directory) and
an exec credential plugin (a real process)."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import anyio
import pytest
import yaml

from e2e.support import ClusterHandle, Kubectl
from kubequeue.kube.client import ApiError, KubeClient, TransportError, connect, open_client
from kubequeue.kube.credentials import CredentialError
from kubequeue.kube.kubeconfig import ConfigError, in_cluster

pytestmark = pytest.mark.e2e

NAMESPACE = "/api/v1/namespaces/default"


def _admin(cluster: ClusterHandle) -> tuple[dict[str, Any], dict[str, Any]]:
    """The (cluster, user) entries of the session's kubeconfig context."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    name = cluster.context or config["current-context"]
    context = next(c for c in config["contexts"] if c["name"] == name)["context"]
    entry = next(c for c in config["clusters"] if c["name"] == context["cluster"])["cluster"]
    user = next(u for u in config["users"] if u["name"] == context["user"])["user"]
    return entry, user


def _kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    path.chmod(0o600)
    return path


async def test_the_admin_kubeconfig_over_tls(api_client: KubeClient) -> None:
    assert api_client.host.startswith("https://")
    namespace = await api_client.get(NAMESPACE)
    assert namespace["metadata"]["name"] == "default"
    with pytest.raises(ApiError) as missing:
        await api_client.get(NAMESPACE + "-that-does-not-exist")
    assert missing.value.not_found


async def test_a_service_account_token_is_who_we_are(
    cluster: ClusterHandle, kubectl: Kubectl, tmp_path: Path
) -> None:
    entry, _ = _admin(cluster)
    token = (await kubectl("create", "token", "default", "-n", "default")).strip()
    async with connect(str(_kubeconfig(tmp_path / "sa", entry, {"token": token}))) as client:
        with pytest.raises(ApiError) as denied:
            await client.get(NAMESPACE)  # authenticated, but RBAC grants it nothing
    assert denied.value.status == 403
    assert "system:serviceaccount:default:default" in denied.value.message
    bad = _kubeconfig(tmp_path / "bad", entry, {"token": "not-a-token"})
    async with connect(str(bad)) as client:
        with pytest.raises(ApiError) as refused:
            await client.get(NAMESPACE)
    assert refused.value.status == 401


async def test_an_exec_plugin_that_returns_a_client_certificate(
    cluster: ClusterHandle, tmp_path: Path
) -> None:
    entry, user = _admin(cluster)
    if "client-certificate-data" not in user or "client-key-data" not in user:
        pytest.skip("the session's kubeconfig has no embedded client certificate")
    status = {
        "clientCertificateData": base64.b64decode(user["client-certificate-data"]).decode(),
        "clientKeyData": base64.b64decode(user["client-key-data"]).decode(),
    }
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": status,
    }
    (tmp_path / "credential.json").write_text(json.dumps(credential))
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        f"#!{sys.executable}\nimport pathlib, sys\n"
        "sys.stdout.write((pathlib.Path(__file__).parent / 'credential.json').read_text())\n"
    )
    plugin.chmod(0o700)
    exec_user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "./plugin.py",
            "interactiveMode": "Never",
        }
    }
    async with connect(str(_kubeconfig(tmp_path / "config", entry, exec_user))) as client:
        assert (await client.get(NAMESPACE))["metadata"]["name"] == "default"


async def test_in_cluster_configuration_with_a_service_account_directory(
    cluster: ClusterHandle, kubectl: Kubectl, tmp_path: Path
) -> None:
    """What a pod sees, minus the pod: the Service's address in the environment, the projected
    token and the cluster's CA in files."""
    entry, _ = _admin(cluster)
    if "certificate-authority-data" not in entry:
        pytest.skip("the session's kubeconfig has no embedded CA")
    server = urlsplit(entry["server"])
    account = tmp_path / "serviceaccount"
    account.mkdir()
    token = (await kubectl("create", "token", "default", "-n", "default")).strip()
    (account / "token").write_text(token)
    (account / "ca.crt").write_bytes(base64.b64decode(entry["certificate-authority-data"]))
    env = {
        "KUBERNETES_SERVICE_HOST": server.hostname or "",
        "KUBERNETES_SERVICE_PORT": str(server.port),
    }
    async with open_client(in_cluster(env, account)) as client:
        with pytest.raises(ApiError) as denied:
            await client.get(NAMESPACE)
    assert denied.value.status == 403  # authenticated as the ServiceAccount, TLS verified
    assert "system:serviceaccount:default:default" in denied.value.message


async def test_list_watch_and_patch(api_client: KubeClient, namespace: str) -> None:
    """What the controller does with every kind: list, watch from the list's resourceVersion,
    merge-patch with a resourceVersion precondition (a stale one is a 409)."""
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    created = await api_client.create(
        path,
        {"metadata": {"name": "probe", "labels": {"probe": "yes"}}, "data": {"step": "created"}},
    )
    listed = await api_client.get(path, [("labelSelector", "probe=yes")])
    assert [item["metadata"]["name"] for item in listed["items"]] == ["probe"]
    query = [
        ("watch", "1"),
        ("labelSelector", "probe=yes"),
        ("resourceVersion", listed["metadata"]["resourceVersion"]),
        ("timeoutSeconds", "30"),
    ]
    timeout = aiohttp.ClientTimeout(total=60, sock_connect=10, sock_read=30)
    async with api_client.stream(path, query, timeout) as resp:
        patched = await api_client.merge_patch(
            f"{path}/probe",
            {
                "metadata": {"resourceVersion": created["metadata"]["resourceVersion"]},
                "data": {"step": "patched"},
            },
        )
        assert patched["data"] == {"step": "patched"}
        with anyio.fail_after(20):
            line = await resp.content.readline()
    event = json.loads(line)
    assert event["type"] == "MODIFIED"
    assert event["object"]["data"] == {"step": "patched"}
    with pytest.raises(ApiError) as stale:
        await api_client.merge_patch(
            f"{path}/probe",
            {
                "metadata": {"resourceVersion": created["metadata"]["resourceVersion"]},
                "data": {"step": "again"},
            },
        )
    assert stale.value.conflict and not stale.value.maybe_applied


async def test_a_token_file_is_reread_after_a_401(
    cluster: ClusterHandle, kubectl: Kubectl, tmp_path: Path
) -> None:
    """A rotated token (as the kubelet rotates the service account's) is picked up at once when
    the server refuses the old one, without waiting for the periodic reread."""
    entry, _ = _admin(cluster)
    token_file = tmp_path / "token"
    token_file.write_text("expired-token\n")
    config = _kubeconfig(tmp_path / "config", entry, {"tokenFile": "token"})
    async with connect(str(config)) as client:
        with pytest.raises(ApiError) as refused:
            await client.get(NAMESPACE)
        assert refused.value.status == 401
        token_file.write_text(await kubectl("create", "token", "default", "-n", "default"))
        with pytest.raises(ApiError) as denied:
            await client.get(NAMESPACE)
    assert denied.value.status == 403  # the new token authenticated
    assert "system:serviceaccount:default:default" in denied.value.message


async def test_tls_is_verified(cluster: ClusterHandle, tmp_path: Path) -> None:
    """The server's certificate must chain to the kubeconfig's CA and name the host we asked
    for (or tls-server-name); a failed handshake is a transport error that sent nothing."""
    entry, user = _admin(cluster)
    if "certificate-authority-data" not in entry:
        pytest.skip("the session's kubeconfig has no embedded CA")
    # The serving certificate names 127.0.0.1, localhost and kubernetes.default.svc: with
    # tls-server-name, that name is verified instead of the server's address.
    renamed = {**entry, "tls-server-name": "not-the-apiserver.example"}
    async with connect(str(_kubeconfig(tmp_path / "wrong-name", renamed, user))) as client:
        with pytest.raises(TransportError) as mismatch:
            await client.get(NAMESPACE)
    assert not mismatch.value.maybe_applied
    assert "not-the-apiserver.example" in str(mismatch.value)
    named = {**entry, "tls-server-name": "kubernetes.default.svc"}
    async with connect(str(_kubeconfig(tmp_path / "named", named, user))) as client:
        assert (await client.get(NAMESPACE))["metadata"]["name"] == "default"
    # Another certificate as the only trusted root: the server's does not chain to it.
    other_ca = {**entry, "certificate-authority-data": user["client-certificate-data"]}
    async with connect(str(_kubeconfig(tmp_path / "other-ca", other_ca, user))) as client:
        with pytest.raises(TransportError) as untrusted:
            await client.get(NAMESPACE)
    assert "certificate verify failed" in str(untrusted.value)


async def test_a_bad_kubeconfig_is_a_clear_error(cluster: ClusterHandle, tmp_path: Path) -> None:
    """Nothing is sent, and the message names the file and what is wrong with it."""
    entry, user = _admin(cluster)
    missing = tmp_path / "missing"
    with pytest.raises(ConfigError, match=f"kubeconfig {re.escape(str(missing))} does not exist"):
        async with connect(str(missing)):
            pass
    garbled = {**user, "client-key-data": "not base64!"}
    config = _kubeconfig(tmp_path / "garbled", entry, garbled)
    with pytest.raises(
        ConfigError, match=f"user 'u' in {re.escape(str(config))}: client-key-data is not valid"
    ):
        async with connect(str(config)):
            pass
    with pytest.raises(ConfigError, match=r"context 'elsewhere' not found"):
        async with connect(str(_kubeconfig(tmp_path / "ok", entry, user)), "elsewhere"):
            pass
    broken_plugin = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "kube-queue-e2e-no-such-plugin",
            "installHint": "install the plugin",
        }
    }
    config = _kubeconfig(tmp_path / "plugin", entry, broken_plugin)
    with pytest.raises(CredentialError, match=r"could not be started.*install the plugin"):
        async with connect(str(config)):
            pass


async def test_https_through_a_connect_proxy_from_the_environment_or_the_kubeconfig(
    cluster: ClusterHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTPS_PROXY (read once, credentials sent on the CONNECT) and the kubeconfig's
    proxy-url (which wins) both tunnel TLS to the real API server; NO_PROXY goes direct."""
    entry, user = _admin(cluster)
    target = urlsplit(entry["server"])
    tunnels: list[tuple[str, str | None]] = []

    async def tunnel(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        request_line, *lines = head.split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines if ": " in line)
        tunnels.append((request_line, headers.get("Proxy-Authorization")))
        up_reader, up_writer = await asyncio.open_connection(target.hostname, target.port)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except ConnectionError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(tunnel, "127.0.0.1", 0)
    proxy = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    expected = f"CONNECT {target.hostname}:{target.port} HTTP/1.1"
    kubeconfig = str(_kubeconfig(tmp_path / "k", entry, user))
    try:
        for name in ("NO_PROXY", "no_proxy", "https_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTPS_PROXY", f"http://who:secret@{proxy}")
        async with connect(kubeconfig) as client:
            assert (await client.get(NAMESPACE))["metadata"]["name"] == "default"
        basic = "Basic " + base64.b64encode(b"who:secret").decode()
        assert tunnels and all(t == (expected, basic) for t in tunnels)
        tunnels.clear()
        monkeypatch.setenv("NO_PROXY", target.hostname or "")
        async with connect(kubeconfig) as client:
            assert (await client.get(NAMESPACE))["metadata"]["name"] == "default"
        assert tunnels == []
        via = str(_kubeconfig(tmp_path / "via", {**entry, "proxy-url": f"http://{proxy}"}, user))
        async with connect(via) as client:  # proxy-url is used even where NO_PROXY says not
            assert (await client.get(NAMESPACE))["metadata"]["name"] == "default"
        assert tunnels and all(t == (expected, None) for t in tunnels)
    finally:
        server.close()
