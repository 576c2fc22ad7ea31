"""The daemon commands: the controller says plainly it is not part of this version; the plugin
refuses to start without the settings it cannot guess."""

from __future__ import annotations

import pytest

from controller.cli import main as controller_main
from dra_driver.kube_client import api_client
from kubeletplugin.cli import build_parser, config_from_args
from kubeletplugin.cli import main as plugin_main


def test_missing_kubeconfig_is_named(tmp_path):
    missing = tmp_path / "no-such-kubeconfig"
    with pytest.raises(ValueError, match="no-such-kubeconfig"):
        api_client(str(missing))


def test_controller_refuses_inconsistent_lease_timing(capsys):
    with pytest.raises(SystemExit) as done:
        controller_main(["--lease-duration=5s", "--renew-deadline=10s"])
    assert done.value.code == 2
    assert "lease-duration > renew-deadline" in capsys.readouterr().err


def test_controller_refuses_a_bad_workload_profile_naming_the_file_and_field(capsys, tmp_path):
    bad = tmp_path / "profile.yaml"
    bad.write_text("shapes: [{count: 1, requests: {cpu: lots}}]")
    for argv, words in (
        ([f"--workload-profile={bad}"], ["profile.yaml", "shapes[0].requests.cpu"]),
        ([f"--workload-profile={tmp_path / 'none.yaml'}"], ["--workload-profile", "none.yaml"]),
    ):
        with pytest.raises(SystemExit) as done:
            controller_main(argv)
        assert done.value.code == 2
        err = capsys.readouterr().err
        assert all(word in err for word in words), err


def test_controller_names_derive_from_the_driver_name(monkeypatch):
    from controller.cli import build_parser as controller_parser
    from controller.cli import config_from_args as controller_config

    monkeypatch.delenv("DRA_GATE_NAME", raising=False)
    monkeypatch.setenv("POD_NAME", "controller-abc")
    monkeypatch.setenv("POD_NAMESPACE", "gpu-system")
    config = controller_config(controller_parser().parse_args(["--driver-name=gpu.example.com"]))
    assert config.gate_name == "gpu.example.com/allocation"
    assert config.gang_label == "gpu.example.com/gang"
    assert config.leader.lease_name == "gpu-example-com-controller"
    assert config.leader.lease_namespace == "gpu-system"
    assert config.leader.identity == "controller-abc"


@pytest.mark.parametrize(
    ("argv", "word"),
    [
        ([], "--node-name"),
        (["--node-name=n1"], "--fake-gpus"),
        (["--node-name=n1", "--nvml", "--fake-gpus=A30-24GB:1"], "not allowed with"),
        (["--node-name=n1", "--fake-gpus=A30-24GB:1", "--shapes=gpu,bogus"], "bogus"),
        (["--node-name=n1", "--fake-gpus=A30-24GB:1", "--timeslice-shares=-1"], "0 or more"),
    ],
)
def test_plugin_refuses_incomplete_or_bad_flags(argv, word, capsys, monkeypatch):
    for name in ("NODE_NAME", "DRA_FAKE_GPUS", "DRA_NVML"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit) as done:
        plugin_main(argv)
    assert done.value.code == 2
    assert word in capsys.readouterr().err


def test_plugin_flags_default_from_the_environment(monkeypatch):
    monkeypatch.setenv("NODE_NAME", "gpu-node-7")
    monkeypatch.setenv("DRA_FAKE_GPUS", "A30-24GB:2")
    monkeypatch.setenv("DRA_SHAPES", "gpu,mig")
    monkeypatch.setenv("POD_UID", "1234")
    config = config_from_args(build_parser().parse_args(["--driver-name=gpu.example.com"]))
    assert config.node_name == "gpu-node-7"
    assert config.fake_gpus == "A30-24GB:2"
    assert {s.value for s in config.shapes} == {"gpu", "mig"}
    assert config.pod_uid == "1234"
    assert str(config.plugin_dir) == "/var/lib/kubelet/plugins/gpu.example.com"
    assert config.state_dir == config.plugin_dir


@pytest.mark.parametrize("main", [plugin_main, controller_main])
def test_daemon_command_reports_its_version(main, capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert "0.1.0" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("main", "variable", "value", "flag"),
    [
        (controller_main, "DRA_LEASE_DURATION", "soon", "--lease-duration"),
        (controller_main, "DRA_METRICS_PORT", "99999", "--metrics-port"),
        (plugin_main, "DRA_TIMESLICE_SHARES", "many", "--timeslice-shares"),
    ],
)
def test_a_bad_environment_value_is_a_usage_error_naming_the_flag(
    main, variable, value, flag, capsys, monkeypatch
):
    monkeypatch.setenv(variable, value)
    monkeypatch.setenv("NODE_NAME", "n1")
    monkeypatch.setenv("DRA_FAKE_GPUS", "A30-24GB:1")
    with pytest.raises(SystemExit) as done:
        main([])
    assert done.value.code == 2
    assert flag in capsys.readouterr().err
