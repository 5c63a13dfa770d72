"""Least privilege, proven against the real authorizer: what the chart's identity must not do.

Every other e2e test shows the chart's RBAC is enough (the controller runs under it). This one
shows it is not more: the API server itself answers, for a kubeconfig holding the identity's
token, SelfSubjectAccessReviews (what ``kubectl auth can-i`` sends, without kubectl's need for
the resource to exist: the kinds' CRDs are not installed here) and real requests that must come
back Forbidden. The identity is a release of its own with only the Ray extension on, so kinds
whose extension is off are checked too.
"""

from __future__ import annotations

import json
from typing import NamedTuple

import pytest

from e2e.cluster.build import ensure_binaries
from e2e.controller import SYSTEM_NAMESPACE, install_identity
from e2e.support import ClusterHandle, Kubectl, KubectlError, new_test_id

pytestmark = pytest.mark.e2e


class Access(NamedTuple):
    verb: str
    resource: str  # "resource.group" or "resource" for the core group; "/sub" for a subresource
    namespace: str = ""  # "" means all namespaces / cluster-scoped
    name: str = ""

    def review(self) -> dict[str, object]:
        resource, _, subresource = self.resource.partition("/")
        plural, _, group = resource.partition(".")
        attrs = {"verb": self.verb, "group": group, "resource": plural}
        attrs |= {k: v for k, v in (("subresource", subresource), ("namespace", self.namespace),
                                     ("name", self.name)) if v}
        return {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attrs},
        }


LEASES = "leases.coordination.k8s.io"
ALLOWED = [
    Access("patch", "jobs.batch"),
    Access("watch", "pods"),
    Access("patch", "pods"),  # pinning (on by default): the gate and the nodeSelector only
    Access("list", "nodes"),
    Access("create", "events"),
    Access("patch", "queues.kube-queue.io/status"),
    Access("patch", "rayjobs.ray.io"),  # the one extension enabled
    Access("update", LEASES, SYSTEM_NAMESPACE, "kube-queue"),
    Access("create", LEASES, SYSTEM_NAMESPACE),
]
DENIED = [
    Access("delete", "pods"),
    Access("create", "pods"),
    Access("update", "pods"),
    Access("create", "pods/eviction"),
    Access("delete", "jobs.batch"),
    Access("create", "jobs.batch"),
    Access("get", "secrets"),
    Access("list", "secrets", SYSTEM_NAMESPACE),
    Access("patch", "nodes"),
    Access("delete", "nodes"),
    Access("patch", "queues.kube-queue.io"),  # users own the spec; the controller the status
    Access("delete", "priorityclasses.scheduling.k8s.io"),
    Access("update", LEASES, "kube-system", "kube-queue"),
    Access("update", LEASES, SYSTEM_NAMESPACE, "kube-scheduler"),
    Access("delete", LEASES, SYSTEM_NAMESPACE, "kube-queue"),
    Access("create", "clusterroles.rbac.authorization.k8s.io"),
    Access("impersonate", "serviceaccounts"),
    # Kinds whose extension is off in this release.
    Access("patch", "tfjobs.kubeflow.org"),
    Access("patch", "pytorchjobs.kubeflow.org"),
    Access("patch", "mpijobs.kubeflow.org"),
    Access("patch", "sparkapplications.sparkoperator.k8s.io"),
    Access("patch", "workflows.argoproj.io"),
    Access("list", "workflows.argoproj.io"),
]


async def _allowed(as_controller: Kubectl, access: Access) -> bool:
    answer = json.loads(await as_controller("create", "--validate=false", "-f", "-", "-o", "json",
                                            stdin=json.dumps(access.review())))
    return bool(answer["status"].get("allowed"))


async def test_the_chart_identity_cannot_do_what_it_must_not(
    kubectl: Kubectl, cluster: ClusterHandle, namespace: str
) -> None:
    release = f"rbac-{new_test_id()}"
    identity = await install_identity(
        ensure_binaries().helm,
        kubectl,
        cluster.logs_dir / "rbac",
        "extension.ray.enable=true",
        release=release,
    )
    as_controller = Kubectl(kubectl.binary, identity.kubeconfig)
    try:
        answers = {a: await _allowed(as_controller, a) for a in ALLOWED + DENIED}
        assert not [a for a in DENIED if answers[a]], "the identity may do what it must not"
        assert all(answers[a] for a in ALLOWED), "the identity lacks what it needs"

        # Real requests, not only reviews: the API server refuses them.
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "sneaky", "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }
        refused = [
            ("get", "secrets", "-n", SYSTEM_NAMESPACE),
            ("create", "--validate=false", "-f", "-"),
            # Named objects that need not exist: authorization comes before the lookup.
            ("label", "node", "any-node", "kube-queue-test=1"),
            ("delete", "job", "any-job", "-n", namespace),
            ("delete", "pod", "any-pod", "-n", namespace),
        ]
        for args in refused:
            stdin = json.dumps(pod) if args[0] == "create" else None
            with pytest.raises(KubectlError, match=r"(?i)forbidden"):
                await as_controller(*args, stdin=stdin)
        # And what it needs works through the same kubeconfig (the refusals are not a broken
        # kubeconfig).
        await as_controller("get", "jobs", "-n", namespace)
    finally:
        for obj in identity.rbac:
            meta = obj["metadata"]
            scope = ["-n", meta["namespace"]] if meta.get("namespace") else []
            await kubectl("delete", obj["kind"], meta["name"], *scope, "--ignore-not-found")
