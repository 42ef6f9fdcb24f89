"""`health.json` and the request files: parsed as the untrusted input they
are (every field checked, an error names the file and the field, nothing
else escapes), written back exactly; and what the exporters make of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ray_accel.core.errors import InputError
from ray_accel.core.health import DeviceHealth, Health, HealthEvent, HealthReport
from ray_accel.core.health_state import (
    MAX_EVENTS,
    HealthFileError,
    HealthSettings,
    HostHealth,
    OnUnhealthy,
    PartitionHealth,
    PartState,
    count_events,
    dumps,
    event_key,
    parse_health,
    read_health,
)
from ray_accel.health.decider import fold, unknown_report, write_health
from ray_accel.health.requests import Pending, ask_clear, parse_request, pending_requests
from ray_accel.metrics.export import health_values, partition_health
from tests.badinput import badinput

IDS = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12)
TIMES = st.floats(0, 1e10, allow_nan=False)
NAMES = st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True)


@st.composite
def events(draw: st.DrawFn, device: str | None = None) -> HealthEvent:
    return HealthEvent(
        device or draw(IDS), draw(NAMES), draw(st.none() | IDS), draw(IDS), draw(TIMES), draw(st.booleans())
    )


@st.composite
def host_healths(draw: st.DrawFn) -> HostHealth:
    ids = draw(st.lists(IDS, unique=True, max_size=6))
    devices = tuple(
        DeviceHealth(
            d, draw(st.sampled_from(list(Health))), draw(TIMES), draw(st.none() | events(d)), draw(st.just("") | IDS)
        )
        for d in ids
    )
    names = draw(st.lists(NAMES, unique=True, max_size=4))
    parts = tuple(
        PartitionHealth(
            partition=n,
            state=draw(st.sampled_from(list(PartState))),
            since=draw(TIMES),
            devices=tuple(draw(st.lists(IDS, max_size=3))),
            out=tuple(draw(st.lists(IDS, max_size=3))),
            node_id=draw(st.none() | st.from_regex(r"[0-9a-f]{8}", fullmatch=True)),
            detail=draw(st.just("") | IDS),
            deadline=draw(st.none() | TIMES),
            target=draw(st.none() | st.tuples(IDS)),
            head=draw(st.booleans()),
        )
        for n in names
    )
    evs = tuple(draw(st.lists(events(), max_size=5)))
    settings = HealthSettings(
        action=draw(st.sampled_from(list(OnUnhealthy))),
        interval_s=draw(st.floats(0.1, 3600)),
        drain_deadline_s=draw(st.floats(0, 1e5)),
    )
    return HostHealth(
        at=draw(TIMES),
        settings=settings,
        devices=devices,
        partitions=parts,
        events=evs,
        counters=count_events({}, evs),
        polls=draw(st.integers(0, 1 << 40)),
        errors=(),
    )


@given(host_healths())
def test_health_file_round_trips(h: HostHealth) -> None:
    assert parse_health(dumps(h), "health.json") == h


@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_any_bytes_parse_or_fail_naming_the_file(raw: bytes) -> None:
    try:
        parse_health(raw, "/x/health.json")
    except HealthFileError as e:
        assert "/x/health.json" in str(e)


BAD_VALUES = st.one_of(
    st.none(), st.booleans(), st.text(max_size=5), st.lists(st.integers(), min_size=1, max_size=2), st.just(-1.0)
)


@given(
    host_healths(), st.sampled_from(["version", "action", "interval_s", "devices", "partitions", "polls"]), BAD_VALUES
)
def test_a_field_that_does_not_fit_is_named(h: HostHealth, key: str, value: object) -> None:
    if key == "action" and value in [a.value for a in OnUnhealthy]:
        return
    data = json.loads(dumps(h))
    data[key] = value
    with pytest.raises(HealthFileError) as e:
        parse_health(json.dumps(data), "health.json")
    assert key in str(e.value), str(e.value)


@badinput("traceback")
@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda d: d.update(extra=1), "unknown key 'extra'"),
        (lambda d: d.update(version=2), "version"),
        (lambda d: d["partitions"][0].update(state="melting"), "partitions[0].state"),
        (lambda d: d["partitions"][0].update(partition="bad name"), "partitions[0].partition"),
        (lambda d: d["devices"][0].update(state="sick"), "devices[0].state"),
        (lambda d: d.update(devices=[d["devices"][0], d["devices"][0]]), "appears twice"),
        (lambda d: d["counters"].update({"neuron:0": {"xid:13": -1}}), "counters.neuron:0.xid:13"),
        (lambda d: d.update(interval_s=float("inf")), "not valid JSON"),
    ],
)
def test_a_bad_health_file_is_refused_naming_the_field(change: object, needle: str) -> None:
    good = HostHealth(
        at=1.0,
        settings=HealthSettings(),
        devices=(DeviceHealth("neuron:0", Health.HEALTHY, 1.0, None, ""),),
        partitions=(
            PartitionHealth(
                partition="p0",
                state=PartState.SERVING,
                since=1.0,
                devices=("neuron:0",),
                out=(),
                node_id=None,
                detail="",
            ),
        ),
    )
    data = json.loads(dumps(good))
    change(data)  # type: ignore[operator]
    with pytest.raises(HealthFileError, match="health file h.json") as e:
        parse_health(json.dumps(data), "h.json")
    assert needle in str(e.value)


def test_the_file_keeps_the_last_events_and_counts_every_one(tmp_path: Path) -> None:
    start = HostHealth(at=0.0, settings=HealthSettings(), devices=(), partitions=())
    devices = (DeviceHealth("gpu-a", Health.HEALTHY, 0.0, None, ""),)
    h = start
    for i in range(MAX_EVENTS + 20):
        ev = HealthEvent("gpu-a", "xid", "13", "XID 13", float(i), False)
        h = fold(h, HealthReport(float(i), devices, (ev,), ()), [])
    write_health(tmp_path, h)
    back = read_health(tmp_path)
    assert back is not None and back.polls == MAX_EVENTS + 20
    assert len(back.events) == MAX_EVENTS and back.events[-1].at == MAX_EVENTS + 19
    assert back.counters == {"gpu-a": {"xid:13": MAX_EVENTS + 20}}
    assert (tmp_path / "health.json").stat().st_mode & 0o777 == 0o600
    assert read_health(tmp_path / "nothing") is None


def test_no_health_source_reads_every_device_unknown() -> None:
    from ray_accel_mock.spec import load_spec

    report = unknown_report(load_spec("trn1.2xlarge").devices, "no monitor", 3.0)
    assert [d.state for d in report.devices] == [Health.UNKNOWN] and report.errors == ("no monitor",)


def test_event_keys_and_the_exported_values() -> None:
    ev = HealthEvent("gpu-a", "xid", "13", "XID 13", 1.0, False)
    assert event_key(ev) == "xid:13" and event_key(HealthEvent("gpu-a", "lost", None, "lost", 1.0, True)) == "lost"
    h = HostHealth(
        at=1.0,
        settings=HealthSettings(action=OnUnhealthy.SHRINK),
        devices=(
            DeviceHealth("gpu-a", Health.HEALTHY, 1.0, ev, ""),
            DeviceHealth("gpu-b", Health.UNHEALTHY, 1.0, None, "x"),
        ),
        partitions=(
            PartitionHealth(
                partition="p1",
                state=PartState.SHRUNK,
                since=1.0,
                devices=("gpu-a",),
                out=("gpu-b",),
                node_id="ab",
                detail="without gpu-b",
            ),
        ),
        events=(ev,),
        counters={"gpu-a": {"xid:13": 2}},
    )
    values = health_values(h, "host_10.0.0.1")
    states = {(t["partition"], t["state"]): v for k, v, t in values if k == "p_state"}
    assert states[("p1", "shrunk")] == 1.0 and sum(states.values()) == 1.0 and len(states) == len(PartState)
    dev = {(t["device_id"], t["state"]): v for k, v, t in values if k == "d_state"}
    assert dev[("gpu-b", "unhealthy")] == 1.0 and dev[("gpu-a", "healthy")] == 1.0 and sum(dev.values()) == 2.0
    assert all(t["partition"] == "p1" for k, _, t in values if k in ("d_state", "events"))
    assert [(v, t) for k, v, t in values if k == "events"] == [
        (2.0, {"host": "host_10.0.0.1", "partition": "p1", "device_id": "gpu-a", "kind": "xid", "code": "13"})
    ]
    snap = partition_health(h, "p1")
    assert (
        snap is not None and snap["state"] == "shrunk" and snap["devices"] == {"gpu-a": "healthy", "gpu-b": "unhealthy"}
    )
    assert partition_health(h, "p9") is None and partition_health(None, "p1") is None


def test_clear_requests_stay_until_what_they_asked_is_kept(tmp_path: Path) -> None:
    ask_clear(tmp_path, "neuron:3")
    ask_clear(tmp_path, "GPU-1234")
    (tmp_path / "health-requests" / "clear-0-bad.json").write_text("{nope")
    asked = pending_requests(tmp_path)
    assert sorted(r.device_id for r in asked.requests) == ["GPU-1234", "neuron:3"]
    assert len(asked.errors) == 1 and "clear-0-bad.json" in asked.errors[0]
    # A decider killed before it kept them finds them again; the unreadable one is gone.
    again = pending_requests(tmp_path)
    assert sorted(r.device_id for r in again.requests) == ["GPU-1234", "neuron:3"] and not again.errors
    again.done()
    assert pending_requests(tmp_path) == Pending((), (), ()), "once kept, each request is acted on once"
    assert (tmp_path / "health-requests").stat().st_mode & 0o777 == 0o700


@given(st.binary(max_size=200))
def test_a_request_file_parses_or_fails_naming_itself(raw: bytes) -> None:
    try:
        request = parse_request(raw, "/r/clear-1.json")
    except InputError as e:
        assert "/r/clear-1.json" in str(e)
    else:
        assert request.device_id


@given(st.text(min_size=1, max_size=50).filter(lambda t: all(ord(c) >= 32 for c in t)), TIMES)
def test_a_request_round_trips(device: str, at: float) -> None:
    raw = json.dumps({"clear": device, "at": at}).encode()
    assert parse_request(raw, "r").device_id == device
