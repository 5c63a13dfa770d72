import msgspec
import pytest

from kubequeue import demand
from kubequeue.demand import DemandError, parse_resource_map, pod_request, pod_set_from_template
from kubequeue.objects import PodSpec

GI = 2**30 * 1000


def spec(raw: dict) -> PodSpec:
    return msgspec.convert(raw, PodSpec)


def test_sums_app_containers_and_counts_one_pod_slot() -> None:
    s = spec(
        {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "500m", "nvidia.com/gpu": "2"}}},
            ]
        }
    )
    assert pod_request(s) == {"cpu": 1500, "memory": GI, "nvidia.com/gpu": 2000, "pods": 1000}


def test_limits_stand_in_for_missing_requests() -> None:
    s = spec(
        {
            "containers": [
                {
                    "name": "a",
                    "resources": {
                        "limits": {"cpu": "2", "nvidia.com/gpu": "1"},
                        "requests": {"cpu": "1"},
                    },
                },
            ]
        }
    )
    assert pod_request(s) == {"cpu": 1000, "nvidia.com/gpu": 1000, "pods": 1000}


def test_init_containers_take_the_max_not_the_sum() -> None:
    s = spec(
        {
            "initContainers": [
                {"name": "i1", "resources": {"requests": {"cpu": "4"}}},
                {"name": "i2", "resources": {"requests": {"memory": "8Gi"}}},
            ],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
        }
    )
    assert pod_request(s) == {"cpu": 4000, "memory": 8 * GI, "pods": 1000}


def test_sidecars_add_to_the_app_and_to_later_init_steps() -> None:
    s = spec(
        {
            "initContainers": [
                {
                    "name": "side",
                    "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "1"}},
                },
                {"name": "setup", "resources": {"requests": {"cpu": "3"}}},
            ],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "2"}}}],
        }
    )
    # app phase: 2 + sidecar 1 = 3; init phase: setup 3 + sidecar 1 = 4 -> max is 4
    assert pod_request(s)["cpu"] == 4000


def test_overhead_is_added() -> None:
    s = spec(
        {
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
            "overhead": {"cpu": "250m"},
        }
    )
    assert pod_request(s)["cpu"] == 1250


def test_identical_requests_are_shared() -> None:
    raw = {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}
    assert pod_request(spec(raw)) is pod_request(spec(raw))


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        ({"cpu": "-1"}, "negative"),
        ({"cpu": "-0.5m"}, "negative"),  # MilliValue -1 (was rounded to 0 and accepted)
        ({"memory": "-1n"}, "negative"),
        ({"cpu": "lots"}, "not a valid quantity"),
        ({"nvidia com/gpu": "1"}, "not a valid resource name"),
        ({"cpu": True}, "malformed pod template"),
    ],
)
def test_bad_input_is_a_demand_error_naming_the_problem(requests: dict, message: str) -> None:
    template = {"spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]}}
    with pytest.raises(DemandError, match=message):
        pod_set_from_template("main", 1, template, "spec.template")


def test_request_above_limit_is_rejected() -> None:
    template = {
        "spec": {
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}
            ]
        }
    }
    with pytest.raises(DemandError, match="above its limit"):
        pod_set_from_template("main", 1, template, "spec.template")


def test_missing_template_and_bad_count() -> None:
    with pytest.raises(DemandError, match="pod template is missing"):
        pod_set_from_template("main", 1, None, "spec.template")
    with pytest.raises(DemandError, match="replica count"):
        pod_set_from_template("main", -1, {"spec": {"containers": []}}, "x")


def test_malformed_template_shape() -> None:
    with pytest.raises(DemandError, match="malformed pod template"):
        pod_set_from_template("main", 1, {"spec": {"containers": "oops"}}, "spec.template")


def test_bad_affinity_operator_is_reported() -> None:
    template = {
        "spec": {
            "containers": [],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "zone", "operator": "Near", "values": ["a"]}
                                ]
                            }
                        ]
                    }
                }
            },
        }
    }
    with pytest.raises(DemandError, match="operator 'Near'"):
        pod_set_from_template("main", 1, template, "spec.template")


# ------------------------------------------------------------ the scheduler's units per resource
# k8s.io/kubernetes/pkg/scheduler/framework Resource.Add: MilliValue() for cpu, Value() (whole
# units, rounded up) for memory, ephemeral-storage, pods and every scalar resource; taken of the
# pod's summed requests (component-helpers resource.PodRequests adds exact quantities first).
def one_container(requests: dict, limits: dict | None = None) -> PodSpec:
    c: dict = {"name": "a", "resources": {"requests": requests}}
    if limits is not None:
        c["resources"]["limits"] = limits
    return spec({"containers": [c]})


@pytest.mark.parametrize(
    ("requests", "expected"),
    [
        ({"memory": "1.5"}, {"memory": 2000}),
        ({"memory": "100m"}, {"memory": 1000}),
        ({"memory": "1.5Ki"}, {"memory": 1536_000}),
        ({"memory": "0.1Ki"}, {"memory": 103_000}),
        ({"ephemeral-storage": "1n"}, {"ephemeral-storage": 1000}),
        ({"hugepages-2Mi": "2.5"}, {"hugepages-2Mi": 3000}),
        ({"nvidia.com/gpu": "0.5"}, {"nvidia.com/gpu": 1000}),
        ({"example.com/foo": "1001m"}, {"example.com/foo": 2000}),
        ({"cpu": "1.5m"}, {"cpu": 2}),  # CPU stays in millicores
        ({"cpu": "100u"}, {"cpu": 1}),
    ],
)
def test_non_cpu_amounts_round_up_to_whole_units(requests: dict, expected: dict) -> None:
    assert pod_request(one_container(requests)) == {**expected, "pods": 1000}


def test_the_pod_total_is_rounded_not_each_container() -> None:
    s = spec(
        {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "100u", "memory": "0.4"}}},
                {"name": "b", "resources": {"requests": {"cpu": "100u", "memory": "0.4"}}},
            ],
            "overhead": {"memory": "0.1"},
        }
    )
    # 0.0002 cpu -> 1m (not 1m + 1m); 0.9 bytes -> 1 byte (not 1 + 1 + 1).
    assert pod_request(s) == {"cpu": 1, "memory": 1000, "pods": 1000}


def test_allocatable_is_accounted_in_the_same_units() -> None:
    # NodeInfo.SetNode: Allocatable = NewResource(node.Status.Allocatable).
    allocatable = {"cpu": "1.5m", "memory": "1.5", "pods": "110", "nvidia.com/gpu": "8"}
    assert parse_resource_map(allocatable, "node") == {
        "cpu": 2,
        "memory": 2000,
        "pods": 110_000,
        "nvidia.com/gpu": 8000,
    }


def test_a_cpu_total_beyond_int64_millicores_is_refused() -> None:
    with pytest.raises(DemandError, match="too large"):
        pod_request(one_container({"cpu": "9223372036854776"}))  # 2**63 - 1 millicores + 193
    big = "5000000000000000000"  # each fits an int64, their sum does not
    s = spec(
        {
            "containers": [
                {"name": "a", "resources": {"requests": {"memory": big}}},
                {"name": "b", "resources": {"requests": {"memory": big}}},
            ]
        }
    )
    with pytest.raises(DemandError, match="too large"):
        pod_request(s)


# ------------------------------------------------------------ explicit zeros: presence decides
# k8s.io/kubernetes/pkg/apis/core/v1/defaults.go SetDefaults_Pod copies a limit only into an
# *absent* request; validation.go validateResourceRequirements refuses request > limit wherever
# a limit is set, "0" included.
@pytest.mark.parametrize(
    ("requests", "limits", "expected"),
    [
        ({"cpu": "0"}, {"cpu": "4"}, {}),
        ({"cpu": "0m", "memory": "1Gi"}, {"cpu": "4", "memory": "2Gi"}, {"memory": GI}),
        ({"nvidia.com/gpu": "0"}, {"nvidia.com/gpu": "0"}, {}),
        ({}, {"cpu": "0"}, {}),
        ({"memory": "1Gi"}, {"cpu": "2", "memory": "1Gi"}, {"cpu": 2000, "memory": GI}),
    ],
)
def test_limits_default_only_absent_requests(requests: dict, limits: dict, expected: dict) -> None:
    s = one_container(requests, limits)
    assert pod_request(s) == {**expected, "pods": 1000}
    assert demand._compute_pod_request(s, "pod") == pod_request(s)  # the memo agrees


@pytest.mark.parametrize(
    ("requests", "limits"),
    [
        ({"cpu": "1"}, {"cpu": "0"}),
        ({"memory": "1Gi"}, {"memory": "0"}),
        ({"cpu": "1000001n"}, {"cpu": "1m"}),  # compared exactly, not after rounding
    ],
)
def test_request_above_an_explicit_limit_is_rejected(requests: dict, limits: dict) -> None:
    for containers in ("containers", "initContainers"):
        raw = {containers: [{"name": "c", "resources": {"requests": requests, "limits": limits}}]}
        with pytest.raises(DemandError, match="above its limit"):
            pod_set_from_template("main", 1, {"spec": raw}, "spec.template")


def test_a_zero_init_request_does_not_take_its_limit() -> None:
    s = spec(
        {
            "initContainers": [
                {"name": "i", "resources": {"requests": {"cpu": "0"}, "limits": {"cpu": "8"}}}
            ],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
        }
    )
    assert pod_request(s) == {"cpu": 1000, "pods": 1000}
