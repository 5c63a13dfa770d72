"""kube/kubeconfig.py: kubeconfig files read as kubectl reads them, and refused with a message
naming the file, the entry and the field when they cannot work; the in-cluster configuration."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubequeue.kube.kubeconfig import (
    ClusterAccess,
    ConfigError,
    from_kubeconfig,
    in_cluster,
    kubeconfig_paths,
    load,
)

CA = b"-----BEGIN CERTIFICATE-----\nnot checked here\n-----END CERTIFICATE-----\n"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def config(
    cluster: dict[str, Any] | None = None,
    user: dict[str, Any] | None = None,
    *,
    name: str = "dev",
    current: str | None = "dev",
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster or {"server": "https://api.example:6443"}}],
        "users": [{"name": name, "user": user or {}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
    }
    if current is not None:
        doc["current-context"] = current
    return doc


def write(path: Path, doc: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return path


def read(path: Path, context: str | None = None) -> ClusterAccess:
    return from_kubeconfig(path, context, environ={})


def test_token_and_embedded_ca(tmp_path: Path) -> None:
    path = write(
        tmp_path / "config",
        config({"server": "https://api.example:6443/", "certificate-authority-data": b64(CA)},
               {"token": "abc"}),
    )
    access = read(path)
    assert access.server == "https://api.example:6443"  # no trailing slash
    assert access.ca == CA
    assert access.token == "abc"
    assert access.exec is None and access.basic is None and access.client_cert is None
    assert "'dev'" in access.source and str(path) in access.source


def test_paths_are_relative_to_the_kubeconfig_not_the_working_directory(tmp_path: Path) -> None:
    home = tmp_path / "kube"
    (home / "pki").mkdir(parents=True)
    (home / "pki" / "ca.crt").write_bytes(CA)
    (home / "pki" / "client.crt").write_bytes(b"CERT")
    (home / "pki" / "client.key").write_bytes(b"KEY")
    (home / "token").write_text("from-file\n")
    path = write(
        home / "config",
        config(
            {"server": "https://api.example", "certificate-authority": "pki/ca.crt"},
            {"client-certificate": "pki/client.crt", "client-key": "pki/client.key",
             "tokenFile": "token"},
        ),
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cwd = os.getcwd()
    os.chdir(elsewhere)
    try:
        access = from_kubeconfig("../kube/config", environ={})
    finally:
        os.chdir(cwd)
    assert access.ca == CA
    assert (access.client_cert, access.client_key) == (b"CERT", b"KEY")
    assert access.token_file == path.parent / "token"
    assert access.token_file.is_absolute()  # rereads do not depend on the cwd either


def test_data_fields_win_over_files_and_may_wrap_lines(tmp_path: Path) -> None:
    wrapped = b64(b"KEY" * 40)
    wrapped = "\n".join(wrapped[i : i + 20] for i in range(0, len(wrapped), 20))
    path = write(
        tmp_path / "config",
        config(user={"client-certificate-data": b64(b"CERT"), "client-certificate": "missing",
                     "client-key-data": wrapped}),
    )
    access = read(path)
    assert (access.client_cert, access.client_key) == (b"CERT", b"KEY" * 40)


def test_a_context_is_chosen_by_name_and_a_missing_one_is_named(tmp_path: Path) -> None:
    doc = config({"server": "https://a.example"}, {"token": "a"}, name="a", current="a")
    other = config({"server": "https://b.example"}, {"token": "b"}, name="b")
    for section in ("clusters", "users", "contexts"):
        doc[section] += other[section]
    path = write(tmp_path / "config", doc)
    assert read(path).server == "https://a.example"
    assert read(path, "b").token == "b"
    with pytest.raises(ConfigError, match=r"context 'nope' not found in .*config"):
        read(path, "nope")


def test_no_current_context_asks_for_one(tmp_path: Path) -> None:
    path = write(tmp_path / "config", config(current=None))
    with pytest.raises(ConfigError, match=r"no current-context.*--context"):
        read(path)
    assert read(path, "dev").server == "https://api.example:6443"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("clusters: [\n  - name: x\n    cluster: {server: ", "not valid YAML"),
        ("- just\n- a list\n", "top level is not a mapping"),
        ({"clusters": {"name": "x"}, "current-context": "dev"}, "clusters must be a list"),
        ({"clusters": [{"cluster": {}}]}, r"clusters\[0\] has no name"),
        (config({"certificate-authority-data": b64(CA)}), "cluster 'dev' in .*: no server"),
        (config({"server": "ftp://x"}), "server 'ftp://x' is not an http"),
        (config({"server": "https://x:port"}), "invalid port"),
        (config({"server": "https://x", "certificate-authority-data": "%%%"}),
         "certificate-authority-data is not valid base64"),
        (config({"server": "https://x", "certificate-authority": "nowhere/ca.crt"}),
         "cannot read certificate-authority .*nowhere/ca.crt"),
        (config({"server": "https://x", "insecure-skip-tls-verify": "yes please"}),
         "insecure-skip-tls-verify must be true or false"),
        (config({"server": "https://x", "insecure-skip-tls-verify": True,
                 "certificate-authority-data": b64(CA)}), "cannot be used with a certificate"),
        (config(user={"token": 12345}), "user 'dev' in .*: token must be a string, not int"),
        (config(user={"client-certificate-data": b64(b"C")}), "needs both certificate and key"),
        (config(user={"token": "t", "username": "u", "password": "p"}),
         "more than one authentication method"),
        (config(user={"tokenFile": "absent"}), "cannot read tokenFile"),
        (config(user={"as": "admin", "token": "t"}), r"impersonation \(as\) is not supported"),
        (config({"server": "https://x", "proxy-url": "socks5://p:1080"}),
         "only http and https proxies"),
    ],
)
def test_what_cannot_work_is_refused_with_the_field_named(
    tmp_path: Path, content: Any, message: str
) -> None:
    path = write(tmp_path / "config", content)
    with pytest.raises(ConfigError, match=message):
        read(path, "dev")


def test_a_context_naming_a_missing_cluster_or_user(tmp_path: Path) -> None:
    doc = config()
    doc["contexts"][0]["context"] = {"cluster": "gone", "user": "dev"}
    with pytest.raises(ConfigError, match="cluster 'gone' not found"):
        read(write(tmp_path / "a", doc))
    doc["contexts"][0]["context"] = {"cluster": "dev", "user": "gone"}
    with pytest.raises(ConfigError, match="user 'gone' not found"):
        read(write(tmp_path / "b", doc))


def test_auth_providers_are_refused_with_a_pointer_to_exec_plugins(tmp_path: Path) -> None:
    user = {"auth-provider": {"name": "gcp", "config": {"access-token": "x"}}}
    path = write(tmp_path / "config", config(user=user))
    with pytest.raises(ConfigError, match=r"auth-provider 'gcp' is not supported.*exec"):
        read(path)


def test_basic_auth_and_a_user_without_credentials(tmp_path: Path) -> None:
    basic = read(write(tmp_path / "a", config(user={"username": "u", "password": "p"})))
    assert basic.basic == ("u", "p")
    doc = config()
    doc["users"] = [{"name": "dev"}]  # kubectl accepts a user with no fields at all
    anonymous = read(write(tmp_path / "b", doc))
    assert (anonymous.token, anonymous.basic, anonymous.exec) == (None, None, None)


def test_a_server_without_scheme_is_https_only_with_tls_settings(tmp_path: Path) -> None:
    plain = read(write(tmp_path / "a", config({"server": "localhost:8080"})))
    assert plain.server == "http://localhost:8080"
    tls = read(write(tmp_path / "b", config({"server": "10.0.0.1:6443",
                                             "certificate-authority-data": b64(CA)})))
    assert tls.server == "https://10.0.0.1:6443"


def test_cluster_tls_options(tmp_path: Path) -> None:
    cluster = {"server": "https://10.0.0.1:6443/prefix", "insecure-skip-tls-verify": True,
               "tls-server-name": "kubernetes", "proxy-url": "http://proxy:3128"}
    access = read(write(tmp_path / "config", config(cluster)))
    assert access.server == "https://10.0.0.1:6443/prefix"
    assert access.insecure and access.ca is None
    assert access.tls_server_name == "kubernetes"
    assert access.proxy == "http://proxy:3128"


def test_exec_plugin_configuration(tmp_path: Path) -> None:
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "bin/get-token",
            "args": ["--cluster", "dev"],
            "env": [{"name": "REGION", "value": "eu"}],
            "interactiveMode": "Never",
            "provideClusterInfo": True,
            "installHint": "install get-token",
        }
    }
    cluster = {
        "server": "https://api.example",
        "certificate-authority-data": b64(CA),
        "extensions": [{"name": "client.authentication.k8s.io/exec",
                        "extension": {"audience": "kube"}}],
    }
    access = read(write(tmp_path / "config", config(cluster, user)))
    plugin = access.exec
    assert plugin is not None
    assert plugin.command == str(tmp_path / "bin" / "get-token")  # has a '/': relative to file
    assert plugin.args == ("--cluster", "dev")
    assert plugin.env == (("REGION", "eu"),)
    assert plugin.install_hint == "install get-token"
    assert plugin.cluster == {
        "server": "https://api.example",
        "insecure-skip-tls-verify": False,
        "certificate-authority-data": b64(CA),
        "config": {"audience": "kube"},
    }
    on_path = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws"}}
    plugin = read(write(tmp_path / "b", config(user=on_path))).exec
    assert plugin is not None and plugin.command == "aws" and plugin.cluster is None


def test_static_credentials_take_precedence_over_an_exec_plugin(tmp_path: Path) -> None:
    user = {"token": "t", "exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                   "command": "never-run"}}
    assert read(write(tmp_path / "config", config(user=user))).exec is None


@pytest.mark.parametrize(
    ("exec_spec", "message"),
    [
        ({"apiVersion": "client.authentication.k8s.io/v1"}, "exec: no command"),
        ({"command": "x", "apiVersion": "client.authentication.k8s.io/v1alpha1"},
         "apiVersion 'client.authentication.k8s.io/v1alpha1' is not supported"),
        ({"command": "x", "apiVersion": "client.authentication.k8s.io/v1",
          "interactiveMode": "Always"}, "interactiveMode Always is not supported"),
        ({"command": "x", "apiVersion": "client.authentication.k8s.io/v1", "args": "--flag"},
         "args must be a list of strings"),
        ({"command": "x", "apiVersion": "client.authentication.k8s.io/v1", "env": "A=1"},
         "env must be a list"),
        ({"command": "x", "apiVersion": "client.authentication.k8s.io/v1",
          "env": [{"value": "1"}]}, r"env\[0\] needs a name"),
    ],
)
def test_broken_exec_configurations(tmp_path: Path, exec_spec: Any, message: str) -> None:
    path = write(tmp_path / "config", config(user={"exec": exec_spec}))
    with pytest.raises(ConfigError, match=message):
        read(path)


def test_kubeconfig_lists_merge_first_file_wins(tmp_path: Path) -> None:
    # a: current-context, a user and a cluster; b: the context, and the same names again.
    a = write(tmp_path / "a" / "config", {
        "current-context": "ctx",
        "users": [{"name": "me", "user": {"tokenFile": "token-a"}}],
        "clusters": [{"name": "shared", "cluster": {"server": "https://from-a"}}],
    })
    (tmp_path / "a" / "token-a").write_text("A")
    b = write(tmp_path / "b" / "config", {
        "current-context": "ignored",
        "contexts": [{"name": "ctx", "context": {"cluster": "shared", "user": "me"}}],
        "clusters": [{"name": "shared", "cluster": {"server": "https://from-b"}}],
        "users": [{"name": "me", "user": {"token": "from-b"}}],
    })
    listed = os.pathsep.join([str(a), str(tmp_path / "absent"), "", str(b)])
    access = from_kubeconfig(environ={"KUBECONFIG": listed})
    assert access.server == "https://from-a"
    assert access.token_file == tmp_path / "a" / "token-a"  # relative to a, where it came from
    assert access.token is None


def test_which_files_are_read(tmp_path: Path) -> None:
    assert kubeconfig_paths("x", {"KUBECONFIG": "y"}) == ([Path("x")], True)
    assert kubeconfig_paths(None, {"KUBECONFIG": f"y{os.pathsep}z{os.pathsep}y"}) == (
        [Path("y"), Path("z")],
        False,
    )
    assert kubeconfig_paths(None, {}, home=tmp_path) == ([tmp_path / ".kube/config"], False)
    with pytest.raises(ConfigError, match=r"kubeconfig .*missing does not exist"):
        from_kubeconfig(tmp_path / "missing", environ={})
    with pytest.raises(ConfigError, match=r"no kubeconfig: .*not found"):
        from_kubeconfig(environ={}, home=tmp_path)


def service_account(tmp_path: Path, token: str = "sa-token\n") -> Path:
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(token)
    (account / "ca.crt").write_bytes(CA)
    return account


def test_in_cluster_configuration(tmp_path: Path) -> None:
    account = service_account(tmp_path)
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    access = in_cluster(env, account)
    assert access.server == "https://10.96.0.1:443"
    assert access.ca == CA
    assert access.token_file == account / "token"  # reread while running: bound tokens rotate
    assert access.token is None
    env6 = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}
    assert in_cluster(env6, account).server == "https://[fd00::1]:6443"


def test_in_cluster_failures(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT"):
        in_cluster({"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, tmp_path)
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(ConfigError, match=r"in-cluster configuration: .*token"):
        in_cluster(env, tmp_path)
    with pytest.raises(ConfigError, match="is empty"):
        in_cluster(env, service_account(tmp_path, token=" \n"))


def test_load_prefers_an_explicit_kubeconfig_then_in_cluster(tmp_path: Path) -> None:
    path = write(tmp_path / "config", config(user={"token": "t"}))
    in_pod = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443",
              "KUBECONFIG": str(path)}
    assert load(path, environ=in_pod).token == "t"
    assert load(None, environ=in_pod, account_dir=service_account(tmp_path)).server == (
        "https://10.96.0.1:443"
    )
    assert load(None, environ={"KUBECONFIG": str(path)}).token == "t"


def test_the_kubectl_plugin_reports_a_bad_kubeconfig_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kubequeue.cli import plugin_main

    path = write(tmp_path / "config", config(user={"auth-provider": {"name": "oidc"}}))
    assert plugin_main(["--kubeconfig", str(path), "status"]) == 1
    assert capsys.readouterr().err.startswith("error: user 'dev' in ")
