"""Edges the other tests leave: the mock's fault file where it is no file or
for a family it has no kinds for, a mask inherited from the environment that
names a core the host lacks, and Ray's `ray` command and node kill run
through the rayapi seam."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from ray_accel_mock import MockPlugin, load_spec
from ray_accel_mock.faults import FaultFileError, load_faults, parse_faults

from ray_accel.core.errors import InputError
from ray_accel.core.visibility import parse_visible_ids
from ray_accel.partition.inherited import inherited_mask
from ray_accel.rayapi import node

IDS = ["neuron:0"]


def test_a_fault_file_for_a_family_without_kinds_is_refused_naming_it() -> None:
    with pytest.raises(FaultFileError, match="^fault file: no fault kinds for family 'tpu'$"):
        parse_faults("{}", IDS, "tpu")


def test_a_fault_file_that_is_a_directory_is_refused_naming_its_path(tmp_path: Path) -> None:
    with pytest.raises(FaultFileError, match=f"fault file {tmp_path}"):
        load_faults(str(tmp_path), IDS, "neuron")


class LooseReader(MockPlugin):
    """A backend that reads its visibility variable without checking the ids against its devices."""

    def parse_visible(self, value: str | None) -> list[int] | None:
        return parse_visible_ids(value)


def test_an_inherited_mask_naming_a_core_the_host_lacks_is_refused_naming_it() -> None:
    plugin = LooseReader(load_spec("trn1.32xlarge"))
    env = plugin.visible_ids_env
    assert inherited_mask(plugin, {env: "0-3"}) is not None
    with pytest.raises(InputError, match=f"^{env}='30-33' set in the environment names 32, which this host does not"):
        inherited_mask(plugin, {env: "30-33"})


def test_rays_own_command_runs_here_and_its_usage_errors_reach_the_caller(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(click.UsageError, match="No such command 'no-such-command'"):
        node.run_ray_cli(["no-such-command"])
    node.run_ray_cli(["--help"])
    assert capsys.readouterr().out.startswith("Usage: ray ")


def test_a_node_is_killed_at_once_without_waiting_for_its_processes() -> None:
    calls: list[dict[str, bool]] = []

    class Node:
        def kill_all_processes(self, **kw: bool) -> None:
            calls.append(kw)

    node.kill_node(Node())
    assert calls == [{"check_alive": False, "allow_graceful": False}]
