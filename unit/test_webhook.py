"""The webhook's mutations (pure) and its AdmissionReview handling."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from kubequeue.webhook.mutations import auto_queue, native_suspend
from kubequeue.webhook.server import review_response

SUSPEND = "scheduling.x-k8s.io/suspend"


def apply(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """A minimal RFC 6902 'add' applier, enough to check our patches do what they say."""
    out = copy.deepcopy(obj)
    for op in ops:
        assert op["op"] == "add"
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node = out
        for part in parts[:-1]:
            node = node[part]
        node[parts[-1]] = op["value"]
    return out


def tfjob(annotations: dict[str, str] | None = None, run_policy: Any = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"tfReplicaSpecs": {}}
    if run_policy is not None:
        spec["runPolicy"] = run_policy
    meta: dict[str, Any] = {"name": "t"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": spec}


@pytest.mark.parametrize("run_policy", [None, {}, {"cleanPodPolicy": "None"}])
def test_annotation_becomes_run_policy_suspend(run_policy: Any) -> None:
    obj = tfjob({SUSPEND: "true"}, run_policy)
    result = apply(obj, native_suspend("TFJob", obj))
    assert result["spec"]["runPolicy"]["suspend"] is True
    if run_policy:
        assert result["spec"]["runPolicy"]["cleanPodPolicy"] == "None"


def test_native_suspend_leaves_unannotated_and_already_held_jobs_alone() -> None:
    assert native_suspend("TFJob", tfjob()) == []
    assert native_suspend("TFJob", tfjob({SUSPEND: "true"}, {"suspend": True})) == []
    assert native_suspend("Workflow", {"metadata": {"annotations": {SUSPEND: "true"}}}) == []


def test_rayjob_annotation_sets_spec_suspend() -> None:
    obj = {"metadata": {"annotations": {SUSPEND: "true"}}, "spec": {"entrypoint": "x"}}
    assert apply(obj, native_suspend("RayJob", obj))["spec"]["suspend"] is True


def test_auto_queue_suspends_jobs_and_annotates_operator_kinds() -> None:
    job = {"metadata": {"name": "j"}, "spec": {"template": {}}}
    assert apply(job, auto_queue("Job", job))["spec"]["suspend"] is True
    tf = tfjob()
    held = apply(tf, auto_queue("TFJob", tf))
    assert held["spec"]["runPolicy"]["suspend"] is True
    assert held["metadata"]["annotations"][SUSPEND] == "true"
    spark = {"metadata": {"annotations": {"a": "b"}}, "spec": {}}
    held = apply(spark, auto_queue("SparkApplication", spark))
    assert held["metadata"]["annotations"] == {"a": "b", SUSPEND: "true"}


@pytest.mark.parametrize(
    "obj",
    [
        {"metadata": {"annotations": {"kube-queue.io/ignore": "true"}}, "spec": {}},
        {
            "metadata": {"ownerReferences": [{"kind": "JobSet", "name": "x", "controller": True}]},
            "spec": {},
        },
    ],
    ids=["opted-out", "owned-by-parent"],
)
def test_auto_queue_leaves_opted_out_and_child_jobs(obj: dict[str, Any]) -> None:
    assert auto_queue("Job", obj) == []


def test_auto_queue_keeps_cronjob_children_and_skips_workflows() -> None:
    child = {
        "metadata": {"ownerReferences": [{"kind": "CronJob", "name": "c", "controller": True}]},
        "spec": {},
    }
    assert auto_queue("Job", child) != []
    assert auto_queue("Workflow", {"metadata": {}, "spec": {}}) == []


def test_review_response_carries_uid_and_a_base64_json_patch() -> None:
    review = {
        "request": {
            "uid": "abc",
            "operation": "CREATE",
            "kind": {"kind": "Job"},
            "object": {"metadata": {"name": "j"}, "spec": {}},
        }
    }
    response = review_response(review, auto_queue)["response"]
    assert response["uid"] == "abc"
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == [
        {"op": "add", "path": "/spec/suspend", "value": True}
    ]


def test_review_of_an_update_changes_nothing() -> None:
    review = {
        "request": {
            "uid": "u",
            "operation": "UPDATE",
            "kind": {"kind": "Job"},
            "object": {"metadata": {}, "spec": {}},
        }
    }
    assert review_response(review, auto_queue)["response"] == {"uid": "u", "allowed": True}
