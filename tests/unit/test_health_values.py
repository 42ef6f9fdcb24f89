"""The health values (`ray_accel.core.health`): JSON both ways, and every
JSON that does not fit refused naming its field."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_accel.core.health import DeviceHealth, Health, HealthDataError, HealthEvent, HealthReport
from ray_accel.core.reader import ReadError, dump, load
from tests.badinput import badinput

ONE_LINE = st.text(st.characters(exclude_characters="\r\n\x00", codec="utf-8"), min_size=1, max_size=60)
TIMES = st.floats(min_value=0, max_value=4e9, allow_nan=False, allow_infinity=False)
KINDS = st.sampled_from(["xid", "ecc", "lost", "components", "unreachable", "returned", "cleared", "marked"])
DEVICE_IDS = st.sampled_from(["neuron:0", "neuron:3", "GPU-8eaaebb8-bb64-8489-fda2-62256e821983", "gpu:x"])


@st.composite
def events(draw: st.DrawFn, device_id: str | None = None) -> HealthEvent:
    return HealthEvent(
        device_id=device_id or draw(DEVICE_IDS),
        kind=draw(KINDS),
        code=draw(st.none() | ONE_LINE),
        reason=draw(ONE_LINE),
        at=draw(TIMES),
        fatal=draw(st.booleans()),
    )


@st.composite
def device_healths(draw: st.DrawFn, device_id: str | None = None) -> DeviceHealth:
    d = device_id or draw(DEVICE_IDS)
    return DeviceHealth(
        device_id=d,
        state=draw(st.sampled_from(list(Health))),
        since=draw(TIMES),
        last_event=draw(st.none() | events(d)),
        healthy_again=draw(st.just("") | ONE_LINE),
        source=draw(st.none() | st.sampled_from(["recovery-action", "xid"])),
    )


@st.composite
def reports(draw: st.DrawFn) -> HealthReport:
    ids = draw(st.lists(DEVICE_IDS, unique=True, max_size=4))
    return HealthReport(
        at=draw(TIMES),
        devices=tuple(draw(device_healths(d)) for d in ids),
        events=tuple(draw(st.lists(events(), max_size=4))),
        errors=tuple(draw(st.lists(ONE_LINE, max_size=3))),
    )


@settings(max_examples=200, deadline=None)
@given(reports())
def test_a_report_survives_json_both_ways(report: HealthReport) -> None:
    text = json.dumps(dump(report))
    back = load(HealthReport, json.loads(text))
    assert back == report
    assert dump(back) == dump(report)


@settings(max_examples=100, deadline=None)
@given(device_healths())
def test_a_verdict_survives_json_both_ways(d: DeviceHealth) -> None:
    assert load(DeviceHealth, json.loads(json.dumps(dump(d)))) == d


def _paths(data: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Every (dotted path, value) inside an object of the report's JSON."""
    out = []
    if isinstance(data, dict):
        for k, v in data.items():
            path = f"{prefix}.{k}" if prefix else k
            out.append((path, v))
            out += _paths(v, path)
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += _paths(v, f"{prefix}[{i}]")
    return out


def _set(data: Any, path: str, value: Any) -> None:
    parts = path.replace("[", ".[").split(".")
    cur = data
    for p in parts[:-1]:
        cur = cur[int(p[1:-1])] if p.startswith("[") else cur[p]
    last = parts[-1]
    if last.startswith("["):
        cur[int(last[1:-1])] = value
    else:
        cur[last] = value


def _delete(data: Any, path: str) -> None:
    parts = path.replace("[", ".[").split(".")
    cur = data
    for p in parts[:-1]:
        cur = cur[int(p[1:-1])] if p.startswith("[") else cur[p]
    del cur[parts[-1]]


# A value that fits no field of the report's JSON.
WRONG = [object(), {"a": 1}, -1.0, math.nan, "\n", "x" * 5000]


@badinput("traceback")
@settings(max_examples=300, deadline=None)
@given(reports(), st.data())
def test_a_report_with_any_field_broken_is_refused_naming_it(report: HealthReport, data: st.DataObject) -> None:
    raw = dump(report)
    fields = [(p, v) for p, v in _paths(raw) if not p.endswith("]") and not isinstance(v, (dict, list))]
    if not fields:
        return
    path, _ = data.draw(st.sampled_from(fields))
    # `source` may be absent: a file written before devices named their source.
    how = data.draw(st.sampled_from(["drop", "wrong", "extra"][path.endswith(".source") :]))
    if how == "drop":
        _delete(raw, path)
    elif how == "extra":
        parent, _, _ = path.rpartition(".")
        path = f"{parent}.surprise" if parent else "surprise"
        _set(raw, path, 1)
    else:
        _set(raw, path, data.draw(st.sampled_from(WRONG)))
    with pytest.raises(HealthDataError) as e:
        load(HealthReport, raw)
    assert path in str(e.value), f"{e.value} does not name {path}"


BAD = [
    ("not an object", [], "", "list is not an object"),
    ("unknown state", {"state": "sick"}, "devices[0].state", "'sick' is not one of healthy, unhealthy, unknown"),
    ("fatal as text", {"fatal": "yes"}, "events[0].fatal", "'yes' is not true or false"),
    ("negative time", {"at": -1}, "at", "-1 is not a time"),
    ("infinite time", {"at": math.inf}, "at", "inf is not a time"),
    ("time as text", {"since": "now"}, "devices[0].since", "'now' is not a number"),
    ("boolean time", {"since": True}, "devices[0].since", "True is not a number"),
    ("two lines", {"reason": "a\nb"}, "events[0].reason", "is not one line"),
    ("bad kind", {"kind": "XID 79"}, "events[0].kind", "'XID 79' is not a kind"),
    ("empty device", {"device_id": ""}, "devices[0].device_id", "empty"),
    ("errors not a list", {"errors": "boom"}, "errors", "str is not a list"),
]


def _sample() -> dict[str, Any]:
    e = HealthEvent("neuron:3", "xid", "79", "XID 79 (GPU has fallen off the bus)", 10.0, True)
    d = DeviceHealth("neuron:3", Health.UNHEALTHY, 10.0, e, "cleared by hand")
    return json.loads(json.dumps(dump(HealthReport(10.0, (d,), (e,), ()))))


@badinput("traceback")
@pytest.mark.parametrize(("case", "change", "field", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_fields_are_named(case: str, change: Any, field: str, message: str) -> None:
    raw: Any = _sample()
    if not isinstance(change, dict):
        raw = change
    else:
        for key, value in change.items():
            target = {
                "state": raw["devices"][0],
                "since": raw["devices"][0],
                "device_id": raw["devices"][0],
                "fatal": raw["events"][0],
                "reason": raw["events"][0],
                "kind": raw["events"][0],
            }.get(key, raw)
            target[key] = value
    with pytest.raises(HealthDataError) as e:
        load(HealthReport, raw)
    assert field in str(e.value) and message in str(e.value)


@badinput("traceback")
def test_a_device_listed_twice_or_an_event_of_another_device_is_refused() -> None:
    raw = _sample()
    raw["devices"].append(dict(raw["devices"][0]))
    with pytest.raises(HealthDataError, match=r"devices\[1\].device_id: 'neuron:3' is listed twice"):
        load(HealthReport, raw)
    raw = _sample()
    raw["devices"][0]["device_id"] = "neuron:4"
    with pytest.raises(HealthDataError, match=r"last_event.device_id: 'neuron:3' is not the device 'neuron:4'"):
        load(HealthReport, raw)


@badinput("unnamed")
def test_a_value_that_could_not_be_read_back_is_never_made() -> None:
    with pytest.raises(HealthDataError, match="reason: 'two\\\\nlines' is not one line"):
        HealthEvent("neuron:1", "ecc", None, "two\nlines", 1.0, True)
    with pytest.raises(HealthDataError, match="at: -5 is not a time"):
        HealthReport(-5, (), (), ())


def test_a_verdicts_source_must_be_a_lower_case_word() -> None:
    assert DeviceHealth("d:0", Health.HEALTHY, 1.0, None, "", source="recovery-action").source == "recovery-action"
    with pytest.raises(ReadError, match="is not a source"):
        DeviceHealth("d:0", Health.HEALTHY, 1.0, None, "", source="Recovery Action")
