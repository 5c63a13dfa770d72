"""The Helm chart: lint, and what each value renders (no cluster needed, only our helm)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from e2e.cluster.build import ensure_binaries
from e2e.controller import CHART, render_chart

EXTENSIONS = {
    "tf": ("kubeflow.org", "tfjobs", "tfjob"),
    "pytorch": ("kubeflow.org", "pytorchjobs", "pytorchjob"),
    "mpi": ("kubeflow.org", "mpijobs", "mpijob"),
    "spark": ("sparkoperator.k8s.io", "sparkapplications", "sparkapplication"),
    "ray": ("ray.io", "rayjobs", "rayjob"),
    "argo": ("argoproj.io", "workflows", "workflow"),
}


async def render(*values: str) -> dict[str, list[dict[str, Any]]]:
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for manifest in await render_chart(ensure_binaries().helm, *values, namespace="kq"):
        by_kind.setdefault(manifest["kind"], []).append(manifest)
    return by_kind


def kinds_arg(rendered: dict[str, list[dict[str, Any]]]) -> list[str]:
    [deployment] = rendered["Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    [flag] = [a for a in args if a.startswith("--kinds=")]
    return flag.removeprefix("--kinds=").split(",")


def rules(rendered: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    [role] = rendered["ClusterRole"]
    result: list[dict[str, Any]] = role["rules"]
    return result


async def test_chart_lints() -> None:
    proc = await asyncio.create_subprocess_exec(
        str(ensure_binaries().helm),
        "lint",
        "--strict",
        str(CHART),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0, out.decode()


async def test_defaults_queue_only_jobs_with_least_privilege() -> None:
    rendered = await render()
    assert kinds_arg(rendered) == ["job"]
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in rules(rendered):
        for g in rule["apiGroups"]:
            for r in rule["resources"]:
                granted.setdefault((g, r), set()).update(rule["verbs"])
    assert granted == {
        ("", "nodes"): {"list", "watch"},
        ("", "pods"): {"list", "watch", "patch"},  # patch: pinning's gate and nodeSelector
        ("", "namespaces"): {"list", "watch"},
        ("scheduling.k8s.io", "priorityclasses"): {"list", "watch"},
        ("kube-queue.io", "queues"): {"list", "watch"},
        ("kube-queue.io", "queues/status"): {"patch"},
        ("", "events"): {"create", "patch"},
        ("batch", "jobs"): {"list", "watch", "patch"},
    }
    [lease_role] = rendered["Role"]
    assert {tuple(r["verbs"]) for r in lease_role["rules"]} == {("create",), ("get", "update")}
    assert lease_role["rules"][1]["resourceNames"] == ["kube-queue"]
    # Pinning on, no suspend-annotation kinds and auto-queue off: the webhook only gates pods,
    # of Jobs, never failing a pod's creation, nowhere in kube-system.
    [config] = rendered["MutatingWebhookConfiguration"]
    [hook] = config["webhooks"]
    assert hook["clientConfig"]["service"]["path"] == "/mutate/pod-gate"
    assert hook["failurePolicy"] == "Ignore"
    assert hook["objectSelector"] == {
        "matchExpressions": [{"key": "batch.kubernetes.io/job-name", "operator": "Exists"}]
    }
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system"]
    assert [r["resources"] for r in hook["rules"]] == [["pods"]]
    args = rendered["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--webhook-port=9443" in args and "--no-pin-placement" not in args


async def test_without_pinning_pods_are_neither_gated_nor_patchable() -> None:
    rendered = await render("webhook.pinPlacement=false")
    assert not [r for r in rules(rendered) if "patch" in r["verbs"] and "pods" in r["resources"]]
    assert "MutatingWebhookConfiguration" not in rendered
    args = rendered["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--no-pin-placement" in args and "--webhook-port=9443" not in args


@pytest.mark.parametrize("extension", sorted(EXTENSIONS))
async def test_each_extension_adds_its_kind_and_only_its_rbac(extension: str) -> None:
    group, resource, kind = EXTENSIONS[extension]
    rendered = await render(f"extension.{extension}.enable=true")
    assert kinds_arg(rendered) == ["job", kind]
    extra = [
        rule
        for rule in rules(rendered)
        if rule["apiGroups"] not in ([""], ["batch"], ["scheduling.k8s.io"], ["kube-queue.io"])
    ]
    assert extra == [
        {"apiGroups": [group], "resources": [resource], "verbs": ["list", "watch", "patch"]}
    ]
    hooked = {
        r
        for config in rendered.get("MutatingWebhookConfiguration", [])
        for hook in config["webhooks"]
        for rule in hook["rules"]
        for r in rule["resources"]
    }
    assert hooked == ({"pods"} if extension == "argo" else {resource, "pods"})
    pod_labels = [
        hook["objectSelector"]["matchExpressions"][0]["key"]
        for config in rendered["MutatingWebhookConfiguration"]
        for hook in config["webhooks"]
        if hook["clientConfig"]["service"]["path"] == "/mutate/pod-gate"
    ]
    assert pod_labels[0] == "batch.kubernetes.io/job-name" and len(pod_labels) == 2


async def test_all_extensions_together() -> None:
    rendered = await render(*(f"extension.{e}.enable=true" for e in EXTENSIONS))
    assert kinds_arg(rendered) == [
        "job",
        "tfjob",
        "pytorchjob",
        "mpijob",
        "sparkapplication",
        "rayjob",
        "workflow",
    ]
    kubeflow = [r for r in rules(rendered) if r["apiGroups"] == ["kubeflow.org"]]
    assert kubeflow[0]["resources"] == ["tfjobs", "pytorchjobs", "mpijobs"]


async def test_pod_runs_as_non_root_read_only_with_probes_and_webhook_cert() -> None:
    rendered = await render(
        "webhook.autoQueue.enabled=true",
        "webhook.failurePolicy=Ignore",
        "webhook.pinPlacement=false",
    )
    [deployment] = rendered["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    [container] = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert "--webhook-port=9443" in container["args"]
    assert pod["volumes"][0]["secret"]["secretName"] == "e2e-kube-queue-webhook-tls"
    [config] = rendered["MutatingWebhookConfiguration"]
    [hook] = config["webhooks"]
    assert hook["name"] == "auto-queue.kube-queue.io"
    assert hook["failurePolicy"] == "Ignore"
    assert hook["namespaceSelector"] == {"matchLabels": {"kube-queue.io/managed": "true"}}
    assert rendered["Service"][0]["metadata"]["name"] in (
        "e2e-kube-queue-metrics",
        "e2e-kube-queue-webhook",
    )


async def test_queues_value_renders_queue_objects_and_the_crd_ships() -> None:
    assert not (await render()).get("Queue"), "no Queue objects by default"
    rendered = await render(
        "queues[0].name=research",
        "queues[0].quota.min.nvidia\\.com/gpu=16",
        "queues[1].name=team-a",
        "queues[1].parent=research",
        "queues[1].strategy=StrictFIFO",
        "queues[1].namespaceSelector.matchLabels.team=a",
        "queues[1].preemption.reclaimWithinTree=Any",
        "queues[1].preemption.withinQueue=LowerPriority",
        "queues[1].podsReadyTimeoutSeconds=0",
    )
    research, team_a = rendered["Queue"]
    assert research["metadata"]["name"] == "research"
    assert research["spec"] == {"quota": {"min": {"nvidia.com/gpu": 16}}}
    assert team_a["spec"] == {
        "parent": "research",
        "strategy": "StrictFIFO",
        "namespaceSelector": {"matchLabels": {"team": "a"}},
        "preemption": {"reclaimWithinTree": "Any", "withinQueue": "LowerPriority"},
        "podsReadyTimeoutSeconds": 0,  # 0 (off) is a value, not an absent one
    }
    import yaml

    crd = yaml.safe_load((CHART / "crds" / "queues.kube-queue.io.yaml").read_text())
    version = crd["spec"]["versions"][0]
    assert crd["spec"]["scope"] == "Cluster" and version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["Parent", "Strategy", "Pending", "Admitted", "GPU used/min/max", "Ready",
                       "Age"]


async def test_preemption_and_requeue_values_become_flags() -> None:
    [deployment] = (await render())["Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    for default in ("--preemption=never", "--pods-ready-timeout=600", "--requeue-limit=5",
                    "--requeue-backoff=60", "--unplaceable-timeout=5"):
        assert default in args
    [deployment] = (await render(
        "preemption=lower-priority", "podsReadyTimeoutSeconds=120", "requeueLimit=2",
        "requeueBackoffSeconds=30", "unplaceableTimeoutSeconds=0",
    ))["Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    for flag in ("--preemption=lower-priority", "--pods-ready-timeout=120", "--requeue-limit=2",
                 "--requeue-backoff=30", "--unplaceable-timeout=0"):
        assert flag in args


async def test_leader_election_off_drops_the_lease_role() -> None:
    rendered = await render("leaderElection.enabled=false")
    assert "Role" not in rendered
    [deployment] = rendered["Deployment"]
    assert "--no-leader-elect" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
