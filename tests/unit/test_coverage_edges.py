"""Edges the other tests leave: the mock's fault file where it is no file or
for a family it has no kinds for, and Ray's `ray` command and node kill run
through the rayapi seam."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from ray_accel_mock.faults import FaultFileError, load_faults, parse_faults

from ray_accel.rayapi import node

IDS = ["neuron:0"]


def test_a_fault_file_for_a_family_without_kinds_is_refused_naming_it() -> None:
    with pytest.raises(FaultFileError, match="^fault file: no fault kinds for family 'tpu'$"):
        parse_faults("{}", IDS, "tpu")


def test_a_fault_file_that_is_a_directory_is_refused_naming_its_path(tmp_path: Path) -> None:
    with pytest.raises(FaultFileError, match=f"fault file {tmp_path}"):
        load_faults(str(tmp_path), IDS, "neuron")


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
