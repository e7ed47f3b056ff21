"""`python -m recsys COMMAND`: each command from any Python with recsys installed."""

import subprocess
import sys

import pytest
from conftest import ROOT

from recsys.commands.dispatch import COMMANDS


def _module(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "recsys", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_command_runs_under_its_own_name(command: str) -> None:
    ran = _module(command, "--help")  # --help imports no torch
    assert ran.returncode == 0 and ran.stdout.startswith(f"usage: python -m recsys {command} "), ran.stderr


def test_without_a_known_command_it_lists_them() -> None:
    listed = _module("--help")
    assert listed.returncode == 0 and all(f"  {command} " in listed.stdout for command in COMMANDS)
    bare = _module()
    assert bare.returncode == 2 and bare.stdout == "" and "usage: python -m recsys {train," in bare.stderr
    unknown = _module("fit")
    assert unknown.returncode == 2 and "error: unknown command 'fit'; choose one of: train" in unknown.stderr


def test_a_mistake_in_a_commands_flags_names_the_command() -> None:
    ran = _module("train", "--epochs", "x")
    assert ran.returncode == 2 and "(python -m recsys train --help lists the flags)" in ran.stderr
