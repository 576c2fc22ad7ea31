"""The checkpoint format: round trips, compatibility rules and what counts as damage."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.device_type import DeviceType
from dra_driver.checkpoint import (
    CURRENT_VERSION,
    UPGRADERS,
    Checkpoint,
    ClaimRecord,
    ClaimState,
    CorruptCheckpointError,
    DeviceRecord,
    EncodeCache,
    MigInstanceRecord,
    MpsDaemonRecord,
    NewerCheckpointError,
    decode_checkpoint,
    encode_checkpoint,
)
from dra_driver.checkpoint.codec import canonical_json, checkpoint_to_data, checksum

SOURCE = "/var/lib/plugin/checkpoint.json"

_text = st.text(max_size=12)
_optional_int = st.none() | st.integers(min_value=0, max_value=2**40)
_kinds = st.sampled_from(
    [(None, False), *((kind, False) for kind in DeviceType), (DeviceType.MIG, True)]
)
_devices = st.builds(
    lambda kind, **fields: DeviceRecord(device_type=kind[0], pre_created=kind[1], **fields),
    kind=_kinds,
    request_names=st.tuples(_text) | st.tuples(_text, _text),
    pool_name=_text,
    device_name=_text,
    cdi_device_ids=st.lists(_text, max_size=3).map(tuple),
    share_id=st.none() | _text,
    minor=_optional_int,
    timeslice_interval=st.none() | st.sampled_from(["Default", "Short", "Medium", "Long"]),
    mps_thread_percentage=_optional_int,
    mps_pinned_memory_bytes=_optional_int,
    mps_uuid=st.none() | _text,
    lends=st.booleans(),
)
_mig = st.builds(
    MigInstanceRecord,
    minor=st.integers(0, 15),
    profile=_text,
    gi_id=st.integers(0, 14),
    ci_id=st.none() | st.integers(0, 7),
    uuid=st.none() | _text,
    placement_start=st.integers(0, 7),
    placement_size=st.integers(1, 8),
)


@st.composite
def _checkpoints(draw: st.DrawFn) -> Checkpoint:
    checkpoint = Checkpoint(boot_id=draw(_text))
    for uid in draw(st.lists(_text, max_size=4, unique=True)):
        checkpoint = checkpoint.with_claim(
            ClaimRecord(
                uid=uid,
                namespace=draw(_text),
                name=draw(_text),
                state=draw(st.sampled_from(ClaimState)),
                devices=tuple(draw(st.lists(_devices, max_size=3))),
                mig_instances=tuple(draw(st.lists(_mig, max_size=2))),
                cdi_spec=draw(st.none() | _text),
            )
        )
    for uuid in draw(st.lists(_text, max_size=2, unique=True)):
        checkpoint = checkpoint.with_mps_daemon(
            MpsDaemonRecord(
                uuid=uuid,
                minor=draw(st.integers(0, 15)),
                pid=draw(st.integers(1, 1 << 22)),
                pipe_dir=draw(_text),
                log_dir=draw(_text),
            )
        )
    return checkpoint


@settings(max_examples=60, deadline=None)
@given(_checkpoints())
def test_round_trip(checkpoint: Checkpoint) -> None:
    text = encode_checkpoint(checkpoint)
    assert decode_checkpoint(text, SOURCE) == checkpoint
    # The file is the canonical form, with the checksum over exactly its data.
    document = json.loads(text)
    assert document["checksum"] == checksum(canonical_json(document["data"]))


def _claim(uid: str, name: str = "claim") -> ClaimRecord:
    return ClaimRecord(uid=uid, namespace="ns", name=name, state=ClaimState.PREPARE_STARTED)


def test_cached_encoding_matches_plain_encoding_as_claims_change() -> None:
    cache = EncodeCache()
    checkpoint = Checkpoint(boot_id="boot")
    for uid in ("b", "a", "c"):
        checkpoint = checkpoint.with_claim(_claim(uid))
        assert encode_checkpoint(checkpoint, cache) == encode_checkpoint(checkpoint)
    # A replaced record with the same UID is re-encoded, not served from the cache.
    checkpoint = checkpoint.with_claim(_claim("a", name="renamed"))
    assert '"renamed"' in encode_checkpoint(checkpoint, cache)
    checkpoint = checkpoint.without_claim("b")
    assert encode_checkpoint(checkpoint, cache) == encode_checkpoint(checkpoint)
    assert canonical_json(checkpoint_to_data(checkpoint)) in encode_checkpoint(checkpoint, cache)


def test_with_and_without_claim_do_not_mutate() -> None:
    empty = Checkpoint(boot_id="boot")
    one = empty.with_claim(_claim("a"))
    assert empty.claims == {}
    assert set(one.claims) == {"a"}
    assert one.without_claim("a").claims == {}
    assert set(one.claims) == {"a"}
    assert one.without_claim("missing") is one


def test_every_version_up_to_the_current_one_has_an_upgrader() -> None:
    assert set(UPGRADERS) == set(range(1, CURRENT_VERSION + 1))


def _document(data: dict[str, Any], version: int = CURRENT_VERSION) -> str:
    return json.dumps(
        {"version": version, "checksum": checksum(canonical_json(data)), "data": data}
    )


def test_optional_fields_default_and_unknown_keys_are_ignored() -> None:
    data = {
        "bootId": "boot",
        "futureTopLevel": {"x": 1},
        "claims": {
            "u": {
                "uid": "u",
                "namespace": "ns",
                "name": "n",
                "state": "PrepareCompleted",
                "futureClaimField": [1, 2],
                "devices": [
                    {
                        "requestNames": ["r"],
                        "poolName": "p",
                        "deviceName": "gpu-0",
                        "cdiDeviceIds": [],
                        "futureDeviceField": True,
                    }
                ],
                "migInstances": [
                    {
                        "minor": 0,
                        "profile": "1g.10gb",
                        "giId": 1,
                        "placementStart": 0,
                        "placementSize": 1,
                    }
                ],
            }
        },
    }
    decoded = decode_checkpoint(_document(data), SOURCE)
    record = decoded.claims["u"]
    assert record.devices == (DeviceRecord(("r",), "p", "gpu-0", ()),)
    assert record.devices[0].device_type is None
    # Written before owners could refuse to lend: the device lends.
    assert record.devices[0].lends is True
    assert record.mig_instances == (MigInstanceRecord(0, "1g.10gb", 1, None, None, 0, 1),)
    assert record.cdi_spec is None


def test_newer_version_is_refused_not_reset() -> None:
    text = _document({"bootId": "b", "claims": {}}, version=CURRENT_VERSION + 1)
    with pytest.raises(
        NewerCheckpointError, match=f"{SOURCE}: format version 2 is newer"
    ) as caught:
        decode_checkpoint(text, SOURCE)
    assert caught.value.version == CURRENT_VERSION + 1
    assert not isinstance(caught.value, CorruptCheckpointError)


_GOOD: dict[str, Any] = {
    "bootId": "b",
    "claims": {"u": {"uid": "u", "namespace": "n", "name": "c", "state": "PrepareStarted"}},
}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "not valid JSON"),
        ('{"version": 1, "checksum": "ab", "data": {', "not valid JSON"),
        (b"\xff\xfe{}", "not valid JSON"),
        ("[1, 2]", "top level is not a JSON object"),
        ('{"checksum": "x", "data": {}}', "'version' is missing or not an integer"),
        ('{"version": "1", "checksum": "x", "data": {}}', "'version' is missing or not an integer"),
        ('{"version": true, "checksum": "x", "data": {}}', "'version' is missing"),
        ('{"version": 0, "checksum": "x", "data": {}}', "format version 0 was never written"),
        ('{"version": 1, "checksum": "x", "data": []}', "'data' is missing or not an object"),
        (json.dumps({"version": 1, "data": _GOOD}), "'checksum' is missing"),
        (
            json.dumps({"version": 1, "checksum": "0" * 64, "data": _GOOD}),
            "checksum mismatch",
        ),
        (_document({"claims": {}}), "data.bootId: is required"),
        (_document({"bootId": 5, "claims": {}}), "data.bootId: expected a string, found int"),
        (_document({"bootId": "b", "claims": []}), "data.claims: expected an object, found list"),
        (
            _document({"bootId": "b", "claims": {"u": {**_GOOD["claims"]["u"], "state": "Done"}}}),
            "data.claims['u'].state: unknown state 'Done'",
        ),
        (
            _document({"bootId": "b", "claims": {"v": _GOOD["claims"]["u"]}}),
            "data.claims['v'].uid: 'u' differs from its key",
        ),
        (
            _document(
                {"bootId": "b", "claims": {"u": {**_GOOD["claims"]["u"], "devices": [{"x": 1}]}}}
            ),
            "data.claims['u'].devices[0].requestNames: is required",
        ),
        (
            _document(
                {
                    "bootId": "b",
                    "claims": {
                        "u": {
                            **_GOOD["claims"]["u"],
                            "devices": [
                                {
                                    "requestNames": ["r"],
                                    "poolName": "p",
                                    "deviceName": "d",
                                    "cdiDeviceIds": [],
                                    "minor": True,
                                }
                            ],
                        }
                    },
                }
            ),
            "data.claims['u'].devices[0].minor: expected a non-negative integer, found bool",
        ),
        (
            _document(
                {
                    "bootId": "b",
                    "claims": {
                        "u": {
                            **_GOOD["claims"]["u"],
                            "devices": [
                                {
                                    "requestNames": ["r"],
                                    "poolName": "p",
                                    "deviceName": "d",
                                    "cdiDeviceIds": [],
                                    "shape": "vgpu",
                                }
                            ],
                        }
                    },
                }
            ),
            "data.claims['u'].devices[0].shape: unknown device kind 'vgpu' (known: gpu, mig, "
            "timeslice, shared, gpu-opportunistic, static-mig)",
        ),
        (
            _document(
                {
                    "bootId": "b",
                    "claims": {
                        "u": {
                            **_GOOD["claims"]["u"],
                            "migInstances": [
                                {
                                    "minor": -1,
                                    "profile": "p",
                                    "giId": 1,
                                    "placementStart": 0,
                                    "placementSize": 1,
                                }
                            ],
                        }
                    },
                }
            ),
            "data.claims['u'].migInstances[0].minor: expected a non-negative integer",
        ),
    ],
)
def test_damage_is_reported_as_corruption_naming_file_and_field(
    text: str | bytes, fragment: str
) -> None:
    with pytest.raises(CorruptCheckpointError) as caught:
        decode_checkpoint(text, SOURCE)
    assert str(caught.value).startswith(f"checkpoint {SOURCE}: ")
    assert fragment in str(caught.value)


def test_only_a_mig_device_is_pre_created() -> None:
    with pytest.raises(ValueError, match="only a MIG device is pre-created"):
        DeviceRecord(("r",), "p", "gpu-0", (), device_type=DeviceType.GPU, pre_created=True)
    made = DeviceRecord(("r",), "p", "gpu-0-mig-1g.10gb-0", (), device_type=DeviceType.MIG)
    handed_out = replace(made, device_name="gpu-0-mig-3-0", pre_created=True)
    assert made.on_demand_mig
    assert not handed_out.on_demand_mig
    claim = ClaimRecord("u", "n", "c", ClaimState.PREPARE_STARTED, devices=(made, handed_out))
    data = checkpoint_to_data(Checkpoint(boot_id="b").with_claim(claim))
    assert [d["shape"] for d in data["claims"]["u"]["devices"]] == ["mig", "static-mig"]


def test_an_owner_refusing_to_lend_survives_a_round_trip_in_its_own_words() -> None:
    refusing = DeviceRecord(("r",), "p", "gpu-0", (), device_type=DeviceType.GPU, lends=False)
    lending = replace(refusing, device_name="gpu-1", lends=True)
    claim = ClaimRecord("u", "n", "c", ClaimState.PREPARE_COMPLETED, devices=(refusing, lending))
    checkpoint = Checkpoint(boot_id="b").with_claim(claim)
    data = checkpoint_to_data(checkpoint)
    # Only a refusal is written, so a device that lends encodes exactly as before.
    assert [d.get("lending") for d in data["claims"]["u"]["devices"]] == ["Never", None]
    assert decode_checkpoint(encode_checkpoint(checkpoint), SOURCE) == checkpoint
    allowed = _full(device_lending="Allowed")
    assert decode_checkpoint(_document(allowed), SOURCE).claims["u"].devices[0].lends is True


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (False, "expected a string, found bool"),
        (0, "expected a string, found int"),
        ("never", "unknown lending choice 'never' (known: Allowed, Never)"),
    ],
)
def test_a_lending_choice_of_the_wrong_shape_is_corruption(value: object, problem: str) -> None:
    with pytest.raises(CorruptCheckpointError) as caught:
        decode_checkpoint(_document(_full(device_lending=value)), SOURCE)
    assert str(caught.value) == (
        f"checkpoint {SOURCE}: data.claims['u'].devices[0].lending: {problem}"
    )


def test_valid_documents_used_above_do_decode() -> None:
    assert set(decode_checkpoint(_document(_GOOD), SOURCE).claims) == {"u"}


def test_mps_daemons_are_added_and_removed_without_changing_the_original() -> None:
    daemon = MpsDaemonRecord(uuid="GPU-a", minor=0, pid=42, pipe_dir="/p", log_dir="/l")
    empty = Checkpoint(boot_id="boot")
    one = empty.with_mps_daemon(daemon)
    assert empty.mps_daemons == {}
    assert one.mps_daemons == {"GPU-a": daemon}
    assert one.without_mps_daemon("GPU-a").mps_daemons == {}
    assert one.mps_daemons == {"GPU-a": daemon}
    assert one.without_mps_daemon("GPU-b") is one


def test_plain_encoding_of_daemons_matches_the_file() -> None:
    daemon = MpsDaemonRecord(uuid="GPU-a", minor=3, pid=42, pipe_dir="/p", log_dir="/l")
    checkpoint = Checkpoint(boot_id="boot").with_claim(_claim("a")).with_mps_daemon(daemon)
    data = checkpoint_to_data(checkpoint)
    assert data["mpsDaemons"] == {
        "GPU-a": {"uuid": "GPU-a", "minor": 3, "pid": 42, "pipeDir": "/p", "logDir": "/l"}
    }
    assert json.loads(encode_checkpoint(checkpoint))["data"] == data


def test_newer_version_error_says_what_to_do() -> None:
    error = NewerCheckpointError(SOURCE, 3, 1)
    assert (error.version, error.supported) == (3, 1)
    assert str(error) == (
        f"checkpoint {SOURCE}: format version 3 is newer than the newest this plugin reads (1); "
        "it was written by a newer plugin. Upgrade the plugin again, or move the file aside to "
        "start empty (MIG instances made by prepared claims will then be treated as unowned)"
    )


def _full(**overrides: Any) -> dict[str, Any]:
    """A document's data with every kind of record; `overrides` replace fields of the device
    (`device_*`), the MIG instance (`mig_*`) or the daemon (`daemon_*`)."""
    device: dict[str, Any] = {
        "requestNames": ["r"],
        "poolName": "p",
        "deviceName": "gpu-0-shared",
        "cdiDeviceIds": [],
        "minor": 0,
        "mpsThreadPercentage": 0,
        "mpsPinnedMemoryBytes": 0,
    }
    mig: dict[str, Any] = {
        "minor": 0,
        "profile": "1g.10gb",
        "giId": 0,
        "ciId": 0,
        "placementStart": 0,
        "placementSize": 0,
    }
    daemon: dict[str, Any] = {
        "uuid": "GPU-a",
        "minor": 0,
        "pid": 0,
        "pipeDir": "/p",
        "logDir": "/l",
    }
    for key, value in overrides.items():
        kind, _, field = key.partition("_")
        {"device": device, "mig": mig, "daemon": daemon}[kind][field] = value
    claim = {**_GOOD["claims"]["u"], "devices": [device], "migInstances": [mig]}
    return {"bootId": "b", "claims": {"u": claim}, "mpsDaemons": {"GPU-a": daemon}}


def test_zero_is_a_valid_value_of_every_integer_field() -> None:
    decoded = decode_checkpoint(_document(_full()), SOURCE)
    (device,) = decoded.claims["u"].devices
    assert (device.mps_thread_percentage, device.mps_pinned_memory_bytes) == (0, 0)
    assert decoded.claims["u"].mig_instances == (MigInstanceRecord(0, "1g.10gb", 0, 0, None, 0, 0),)
    assert decoded.mps_daemons["GPU-a"] == MpsDaemonRecord("GPU-a", 0, 0, "/p", "/l")


@pytest.mark.parametrize(
    ("field", "path"),
    [
        ("device_mpsThreadPercentage", "data.claims['u'].devices[0].mpsThreadPercentage"),
        ("device_mpsPinnedMemoryBytes", "data.claims['u'].devices[0].mpsPinnedMemoryBytes"),
        ("mig_giId", "data.claims['u'].migInstances[0].giId"),
        ("mig_ciId", "data.claims['u'].migInstances[0].ciId"),
        ("mig_placementStart", "data.claims['u'].migInstances[0].placementStart"),
        ("mig_placementSize", "data.claims['u'].migInstances[0].placementSize"),
        ("daemon_minor", "data.mpsDaemons['GPU-a'].minor"),
        ("daemon_pid", "data.mpsDaemons['GPU-a'].pid"),
    ],
)
def test_a_negative_number_is_corruption(field: str, path: str) -> None:
    with pytest.raises(CorruptCheckpointError, match=re.escape(path)) as caught:
        decode_checkpoint(_document(_full(**{field: -1})), SOURCE)
    assert "expected a non-negative integer" in str(caught.value)


def test_a_daemon_under_another_key_is_corruption() -> None:
    data = _full()
    data["mpsDaemons"] = {"GPU-b": data["mpsDaemons"]["GPU-a"]}
    with pytest.raises(CorruptCheckpointError) as caught:
        decode_checkpoint(_document(data), SOURCE)
    assert str(caught.value) == (
        f"checkpoint {SOURCE}: data.mpsDaemons['GPU-b'].uuid: 'GPU-a' differs from its key"
    )


def test_a_checkpoint_without_claims_or_daemons_is_empty() -> None:
    assert decode_checkpoint(_document({"bootId": "b"}), SOURCE) == Checkpoint(boot_id="b")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1]", "the top level is not a JSON object"),
        ('{"version": 1, "checksum": "x"}', "'data' is missing or not an object"),
        (json.dumps({"version": 1, "data": _GOOD}), "'checksum' is missing or not a string"),
        (
            json.dumps({"version": 1, "checksum": "0123456789abcdef" * 4, "data": _GOOD}),
            "checksum mismatch (recorded 0123456789abcdef..., content "
            f"{checksum(canonical_json(_GOOD))[:16]}...)",
        ),
    ],
)
def test_damage_messages_name_the_file_and_say_no_more_than_needed(text: str, message: str) -> None:
    with pytest.raises(CorruptCheckpointError) as caught:
        decode_checkpoint(text, SOURCE)
    assert str(caught.value) == f"checkpoint {SOURCE}: {message}"


def test_a_newer_version_says_which_one_this_plugin_reads() -> None:
    text = _document({"bootId": "b"}, version=CURRENT_VERSION + 5)
    with pytest.raises(NewerCheckpointError) as caught:
        decode_checkpoint(text, SOURCE)
    assert caught.value.supported == CURRENT_VERSION
    assert f"the newest this plugin reads ({CURRENT_VERSION})" in str(caught.value)
