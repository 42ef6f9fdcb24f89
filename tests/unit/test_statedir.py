"""The state directory's table of files (`statedir.FILES`) names every file
the code writes there, each with the module that owns it."""

from __future__ import annotations

import importlib
import inspect
import os
from pathlib import Path

import pytest

from ray_accel.cluster import statedir
from ray_accel.cluster.launcher import Launch
from ray_accel.cluster.raylet import leader_path
from tests.records import valid_record

# Every constant the code names a state-directory file by: (module, name).
CONSTANTS = [
    ("ray_accel.cluster.statedir", "STATE_FILE"),
    ("ray_accel.cluster.statedir", "LEGACY_FILE"),
    ("ray_accel.cluster.statedir", "LOCK_FILE"),
    ("ray_accel.cluster.auth", "STATE_TOKEN_FILE"),
    ("ray_accel.core.health_kept", "KEPT_FILE"),
    ("ray_accel.core.health_state", "HEALTH_FILE"),
    ("ray_accel.plugins.host_readings", "READINGS_FILE"),
    ("ray_accel.health.requests", "REQUESTS_DIR"),
    ("ray_accel.health.launch", "LOG_FILE"),
    ("ray_accel.hostops.repartition", "LOG_FILE"),
    ("ray_accel.hostops.repartition", "RESULT_FILE"),
    ("ray_accel.cluster.launch_server", "LOG_FILE"),
]


@pytest.mark.parametrize("module, constant", CONSTANTS)
def test_every_named_file_is_in_the_table_with_its_owner(module: str, constant: str) -> None:
    name = getattr(importlib.import_module(module), constant)
    assert name in statedir.FILES, f"{module}.{constant} = {name!r} is not in statedir.FILES"
    assert statedir.FILES[name].owner == module


def test_every_entry_names_its_owner_and_format() -> None:
    owned = {(m, getattr(importlib.import_module(m), c)) for m, c in CONSTANTS}
    for name, entry in statedir.FILES.items():
        assert entry.name == name and entry.format
        source = inspect.getsource(importlib.import_module(entry.owner))
        if name.startswith(statedir.PARTITION):
            # One per partition: the owner writes the name from its suffix.
            assert name.removeprefix(statedir.PARTITION) in source, (name, entry.owner)
        else:
            assert (entry.owner, name) in owned, f"{name}: no constant of {entry.owner} names it"


def test_the_per_partition_files_are_where_the_launch_puts_them(tmp_path: Path) -> None:
    launch = Launch(name="p0", args=[], env={}, log_dir=tmp_path, timeout_s=1.0)
    made = {launch.log_path.name, launch.result_path.name, Path(leader_path(str(launch.result_path))).name}
    table = {name.replace(statedir.PARTITION, "p0") for name in statedir.FILES}
    assert made <= table


def test_a_saved_and_locked_directory_holds_only_files_of_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(statedir.STATE_ENV, str(tmp_path))
    record = statedir.save(valid_record())
    with statedir.host_lock("test", statedir.place_of(record)):
        names = set(os.listdir(tmp_path))
    assert names == {statedir.STATE_FILE, statedir.LOCK_FILE}
    assert names <= set(statedir.FILES)
