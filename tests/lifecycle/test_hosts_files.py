"""Reading the hosts files and running the topology script (xdfs.namenode.hosts)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from xdfs.config import NameNodeConfig
from xdfs.errors import HostsFileError
from xdfs.namenode.hosts import load, load_host_lists, load_topology


def script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "topology.sh"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def test_the_topology_script_is_asked_once_per_address(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    config = replace(NameNodeConfig(), topology_script=script(
        tmp_path, f'echo "$@" >> {calls}; echo /dc9/rack-$(echo "$1" | cut -d: -f2)'))
    topology = load_topology(config)
    assert topology.rack_of("10.0.0.1:7") == "/dc9/rack-7"
    assert topology.rack_of("10.0.0.1:7") == "/dc9/rack-7"
    assert calls.read_text().split() == ["10.0.0.1:7"]


@pytest.mark.parametrize("body", ["exit 3", "echo", "echo /a /b", "sleep 5"])
def test_a_failing_topology_script_is_a_hosts_file_error(tmp_path: Path, body: str) -> None:
    config = replace(NameNodeConfig(), topology_script=script(tmp_path, body),
                     topology_script_timeout_s=0.5)
    with pytest.raises(HostsFileError, match="topology script"):
        load_topology(config).rack_of("h:1")


def test_files_are_read_and_a_missing_one_is_refused(tmp_path: Path) -> None:
    (tmp_path / "in").write_text("a b:1\n")
    (tmp_path / "ex").write_text("b:1 # going away\n")
    (tmp_path / "mt").write_text("a 1e12\n")
    config = replace(NameNodeConfig(), hosts_include_file=str(tmp_path / "in"),
                     hosts_exclude_file=str(tmp_path / "ex"),
                     hosts_maintenance_file=str(tmp_path / "mt"))
    lists = load_host_lists(config)
    assert (lists.include, lists.exclude, dict(lists.maintenance)) == (
        frozenset({"a", "b:1"}), frozenset({"b:1"}), {"a": 1e12})
    assert load(replace(NameNodeConfig()))[1].allowed("any:1")  # no files: all allowed
    with pytest.raises(HostsFileError, match="exclude file"):
        load_host_lists(replace(config, hosts_exclude_file=str(tmp_path / "nope")))
