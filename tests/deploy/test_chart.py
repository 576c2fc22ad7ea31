"""The Helm chart: renders, lints strictly, and produces objects every supported Kubernetes
version accepts, for the default values and the other ways it is meant to be installed."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from controller.flags import FLAGS as CONTROLLER_FLAGS
from dra_driver.cli.flag_types import duration, percent
from dra_driver.cli.flagdocs import environment_variables
from dra_driver.cli.flags import Flag, build_parser
from dra_driver.deviceclasses import SHAPES, device_classes
from dra_driver.workload_profile import profile_text
from kubeletplugin.flags import FLAGS as PLUGIN_FLAGS
from tests.deploy.chart import CHART, KUBE_VERSIONS, VALUE_SETS, find, one, render, render_text


def _container(objects: tuple[dict[str, Any], ...], kind: str) -> dict[str, Any]:
    containers: list[dict[str, Any]] = one(objects, kind)["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_every_rendered_object_validates_strictly(value_set: str, kube_version: str) -> None:
    objects = render(value_set, kube_version)
    assert objects
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, kube_version, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{value_set}: {obj['kind']} {obj['metadata']['name']}: {err.message}")


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_the_chart_lints_strictly(value_set: str) -> None:
    report = helm.lint(CHART, VALUE_SETS[value_set], strict=True, kube_version="v1.36.0")
    assert report["errors"] == [] and report["messages"] == [], report


def test_kubernetes_before_1_34_is_refused() -> None:
    with pytest.raises(helm.HelmError, match="kubeVersion"):
        render_text({}, "1.33.0")


def test_bad_values_name_the_field() -> None:
    with pytest.raises(helm.HelmValuesError, match="/controller/mode"):
        render_text({"controller": {"mode": "fastest"}})
    with pytest.raises(helm.HelmValuesError, match="/kubeletPlugin/shapes/0"):
        render_text({"kubeletPlugin": {"shapes": ["vgpu"]}})
    with pytest.raises(helm.HelmValuesError, match="additional properties 'replicas'"):
        render_text({"kubeletPlugin": {"replicas": 2}})


@pytest.mark.parametrize(
    ("value_set", "driver", "shapes", "extended"),
    [
        ("defaults", "gpu.dra-driver.dev", SHAPES, {}),
        ("custom-driver", "gpu.example.com", ("gpu", "mig"), {"gpu": "nvidia.com/gpu"}),
        ("plugin-only", "acme.example.org", SHAPES, {}),
    ],
)
def test_device_classes_are_the_ones_the_code_defines(
    value_set: str, driver: str, shapes: tuple[str, ...], extended: dict[str, str]
) -> None:
    rendered = find(render(value_set), "DeviceClass")
    for obj in rendered:
        assert obj["metadata"].pop("labels")["app.kubernetes.io/instance"] == "dra"
    assert rendered == device_classes(driver, shapes, extended)


def test_default_device_class_names() -> None:
    names = [o["metadata"]["name"] for o in find(render("defaults"), "DeviceClass")]
    assert names == [
        "gpu.dra-driver.dev",
        "mig.dra-driver.dev",
        "timeslice.dra-driver.dev",
        "shared.dra-driver.dev",
        "gpu-opportunistic.dra-driver.dev",
    ]


def test_plugin_daemonset_runs_privileged_with_the_kubelet_paths() -> None:
    objects = render("defaults")
    daemonset = one(objects, "DaemonSet")
    assert daemonset["spec"]["updateStrategy"]["rollingUpdate"] == {
        "maxSurge": 1,
        "maxUnavailable": 0,
    }
    pod = daemonset["spec"]["template"]["spec"]
    container = _container(objects, "DaemonSet")
    assert container["securityContext"]["privileged"] is True
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    assert host_paths == {
        "plugins-registry": "/var/lib/kubelet/plugins_registry",
        "plugins": "/var/lib/kubelet/plugins",
        "cdi": "/var/run/cdi",
        "dev": "/dev",
        "driver-root": "/",
        "host-proc": "/proc",
    }
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    # The DRA socket path must be the same inside and outside the container.
    assert mounts["plugins"] == host_paths["plugins"]
    assert mounts["plugins-registry"] == host_paths["plugins-registry"]
    env = _env(container)
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["POD_UID"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    assert env["DRA_NVML"] == "true" and "DRA_FAKE_GPUS" not in env
    assert container["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    assert "127.0.0.1:9401" in container["livenessProbe"]["exec"]["command"][-1]


def test_the_driver_root_is_mounted_read_only_and_named_for_the_runtime() -> None:
    container = _container(render("defaults"), "DaemonSet")
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "driver-root"]
    assert mount == {"name": "driver-root", "mountPath": "/driver-root", "readOnly": True}
    env = _env(container)
    assert env["DRA_DRIVER_ROOT"] == "/driver-root"
    assert env["DRA_CONTAINER_DRIVER_ROOT"] == "/"
    custom = _env(_container(render("custom-driver"), "DaemonSet"))
    assert custom["DRA_CONTAINER_DRIVER_ROOT"] == "/run/nvidia/driver"
    texts = render_text({"containerDriverRoot": "/host/run/nvidia/driver"})
    (daemonset,) = [t for path, t in texts.items() if path.endswith("kubeletplugin-daemonset.yaml")]
    override = _env(yaml.safe_load(daemonset)["spec"]["template"]["spec"]["containers"][0])
    assert override["DRA_CONTAINER_DRIVER_ROOT"] == "/host/run/nvidia/driver"


def test_the_plugin_reads_the_hosts_proc_and_the_telemetry_settings() -> None:
    """NVML names GPU processes by host pid: the host's /proc is mounted read-only and the
    plugin pointed at it (it keeps its own PID namespace); the settings parse as the flags do."""
    objects = render("defaults")
    container = _container(objects, "DaemonSet")
    assert not one(objects, "DaemonSet")["spec"]["template"]["spec"].get("hostPID")
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "host-proc"]
    assert mount == {"name": "host-proc", "mountPath": "/host/proc", "readOnly": True}
    env = _env(container)
    assert env["DRA_PROC_ROOT"] == "/host/proc"
    assert duration(env["DRA_TELEMETRY_INTERVAL"]) == 10
    assert percent(env["DRA_IDLE_THRESHOLD"]) == 5
    assert duration(env["DRA_IDLE_AFTER"]) == 1800


@pytest.mark.parametrize(
    ("telemetry", "expected"),
    [
        ({"interval": 0, "idleThreshold": 0.5, "idleAfter": "1h30m"}, (0.0, 0.5, 5400.0)),
        ({"interval": "2.5", "idleThreshold": 100, "idleAfter": 600}, (2.5, 100.0, 600.0)),
    ],
)
def test_telemetry_settings_reach_the_plugin(
    telemetry: dict[str, Any], expected: tuple[float, float, float]
) -> None:
    texts = render_text({"kubeletPlugin": {"telemetry": telemetry}})
    (daemonset,) = [t for path, t in texts.items() if path.endswith("kubeletplugin-daemonset.yaml")]
    env = _env(yaml.safe_load(daemonset)["spec"]["template"]["spec"]["containers"][0])
    text = {k: v for k, v in env.items() if isinstance(v, str)}
    args = build_parser("dra-kubelet-plugin", "", "0", PLUGIN_FLAGS, environ=text).parse_args([])
    assert (args.telemetry_interval, args.idle_threshold, args.idle_after) == expected


def test_bad_telemetry_settings_name_the_field() -> None:
    for key, value in (("interval", "ten"), ("idleThreshold", 101), ("idleAfter", "30 m")):
        with pytest.raises(helm.HelmValuesError, match=f"/kubeletPlugin/telemetry/{key}"):
            render_text({"kubeletPlugin": {"telemetry": {key: value}}})


def test_fake_gpus_need_neither_dev_nor_the_driver() -> None:
    container = _container(render("kind"), "DaemonSet")
    env = _env(container)
    assert env["DRA_FAKE_GPUS"] == "H100-SXM5-80GB:8" and "DRA_NVML" not in env
    assert "DRA_DRIVER_ROOT" not in env  # fake GPUs run without driver files
    assert {m["name"] for m in container["volumeMounts"]} == {"plugins-registry", "plugins", "cdi"}
    assert container["image"] == "gpu-dra-driver:dev"


def test_controller_is_leader_elected_and_unprivileged() -> None:
    objects = render("defaults")
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    env = _env(_container(objects, "Deployment"))
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["DRA_LEASE_NAME"] == "gpu-dra-driver-dev-controller"
    lease_rules = [
        r for role in find(objects, "Role") for r in role["rules"] if "leases" in r["resources"]
    ]
    named = [r for r in lease_rules if r.get("resourceNames")]
    assert named and named[0]["resourceNames"] == ["gpu-dra-driver-dev-controller"]


def test_custom_names_reach_the_controller() -> None:
    env = _env(_container(render("custom-driver"), "Deployment"))
    assert env["DRA_DRIVER_NAME"] == "gpu.example.com"
    assert env["DRA_GATE_NAME"] == "example.com/gpu-placement"
    assert env["DRA_LEASE_NAME"] == "gpu-placement"
    assert env["DRA_ALLOCATION_MODE"] == "first-fit"


@pytest.mark.parametrize(
    ("value_set", "queue", "hold"),
    [("defaults", "default", 60.0), ("custom-driver", "unassigned", 120.0)],
)
def test_queue_settings_reach_the_controller(value_set: str, queue: str, hold: float) -> None:
    env = _env(_container(render(value_set), "Deployment"))
    text = {k: v for k, v in env.items() if isinstance(v, str)}
    args = build_parser("dra-controller", "", "0", CONTROLLER_FLAGS, environ=text).parse_args([])
    assert (args.default_queue, args.reclaim_hold) == (queue, hold)
    assert "DRA_DEFAULT_QUEUE" in env and "DRA_RECLAIM_HOLD" in env


def test_the_learned_workload_profile_is_kept_in_a_configmap_by_default() -> None:
    env = _env(_container(render("defaults"), "Deployment"))
    assert env["DRA_WORKLOAD_CONFIGMAP"] == f"{env['DRA_LEASE_NAME']}-workload"
    assert "DRA_WORKLOAD_PROFILE" not in env


def test_a_configured_workload_profile_is_mounted_and_read_by_the_controller() -> None:
    profile = {
        "shapes": [
            {
                "count": 3,
                "requests": {"cpu": "4"},
                "claims": [
                    {
                        "devices": {
                            "requests": [
                                {"name": "g", "exactly": {"deviceClassName": "gpu.dra-driver.dev"}}
                            ]
                        }
                    }
                ],
            }
        ]
    }
    objects = [
        d
        for path, text in render_text({"controller": {"workloadProfile": profile}}).items()
        if not path.endswith("NOTES.txt")
        for d in yaml.safe_load_all(text)
        if isinstance(d, dict)
    ]
    container = _container(tuple(objects), "Deployment")
    env = _env(container)
    assert "DRA_WORKLOAD_CONFIGMAP" not in env
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "workload-profile"]
    path = env["DRA_WORKLOAD_PROFILE"]
    assert path.startswith(mount["mountPath"] + "/")
    configmaps = [
        o for o in find(tuple(objects), "ConfigMap") if "workload" in o["metadata"]["name"]
    ]
    (configmap,) = configmaps
    text = configmap["data"][path.rsplit("/", 1)[1]]
    (entry,) = profile_text(text, "chart")
    assert entry.weight == 3 and entry.requests["cpu"] == 4000


def test_bad_queue_settings_name_the_field() -> None:
    with pytest.raises(helm.HelmValuesError, match="/controller/queues/reclaimHold"):
        render_text({"controller": {"queues": {"reclaimHold": "1m"}}})
    with pytest.raises(helm.HelmValuesError, match="/controller/queues/defaultQueue"):
        render_text({"controller": {"queues": {"defaultQueue": "Team A"}}})


def test_plugin_only_install_has_no_controller_objects() -> None:
    objects = render("plugin-only")
    assert find(objects, "Deployment") == []
    assert find(objects, "ValidatingAdmissionPolicy") == []
    assert [sa["metadata"]["name"] for sa in find(objects, "ServiceAccount")] == [
        "dra-gpu-dra-driver-kubelet-plugin"
    ]
    assert "ports" not in _container(objects, "DaemonSet")


@pytest.mark.parametrize(
    ("kind", "flags"), [("DaemonSet", PLUGIN_FLAGS), ("Deployment", CONTROLLER_FLAGS)]
)
def test_every_environment_variable_the_chart_sets_is_read_by_the_daemon(
    kind: str, flags: tuple[Flag, ...]
) -> None:
    known = environment_variables(flags) | {"LD_LIBRARY_PATH"}  # the dynamic loader reads that one
    for value_set in VALUE_SETS:
        objects = render(value_set)
        if not find(objects, kind):
            continue
        unknown = set(_env(_container(objects, kind))) - known
        assert not unknown, f"{value_set}: {kind} sets {unknown}, which the daemon never reads"


def test_admission_policy_is_bound_to_the_plugin_service_account() -> None:
    objects = render("defaults")
    policy = one(objects, "ValidatingAdmissionPolicy")
    binding = one(objects, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    (condition,) = policy["spec"]["matchConditions"]
    assert (
        '"system:serviceaccount:dra-system:dra-gpu-dra-driver-kubelet-plugin"'
        in condition["expression"]
    )
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert "authentication.kubernetes.io/node-name" in variables["nodeName"]
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules[0]["resources"] == ["resourceslices"]
    assert set(rules[0]["operations"]) == {"CREATE", "UPDATE", "DELETE"}


GPUQUEUE_CRD = CHART / "crds" / "gpuqueues.gpu.dra-driver.dev.yaml"


def _gpuqueue_crd() -> dict[str, Any]:
    (crd,) = [d for d in yaml.safe_load_all(GPUQUEUE_CRD.read_text()) if d]
    assert isinstance(crd, dict)
    return crd


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_the_gpuqueue_crd_validates_strictly(kube_version: str) -> None:
    kubernetes_validate.validate(_gpuqueue_crd(), kube_version, strict=True)


def test_the_gpuqueue_crd_is_structural_and_its_rules_compile() -> None:
    from localcluster.crds import validate_crd

    crd = _gpuqueue_crd()
    assert validate_crd(crd, frozenset()) == []
    spec = crd["spec"]
    assert (spec["group"], spec["scope"], spec["names"]["shortNames"]) == (
        "gpu.dra-driver.dev",
        "Cluster",
        ["gq"],
    )
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Parent",
        "Guaranteed GPU",
        "Limit GPU",
        "Used GPU",
        "Borrowed GPU",
        "Pending",
        "Age",
    ]


def test_the_gpuqueue_crd_takes_the_lending_values_the_plugin_reads() -> None:
    """The schema refuses what `parse_queue` would refuse, and defaults to what it assumes."""
    from dra_driver.queues import LENDING_ALLOWED, LENDING_NEVER

    (version,) = _gpuqueue_crd()["spec"]["versions"]
    lending = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["lending"]
    assert lending["enum"] == [LENDING_ALLOWED, LENDING_NEVER]
    assert lending["default"] == LENDING_ALLOWED


def test_the_local_cluster_installs_the_charts_crd_file() -> None:
    from localcluster.crds import bundled_definitions

    assert bundled_definitions() == [_gpuqueue_crd()]
