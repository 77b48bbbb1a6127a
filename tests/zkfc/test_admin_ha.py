"""``xdfs admin`` HA commands without automatic failover (manual transitions against two
fake NameNodes), and ``xdfs zkfc``'s refusals: one clear line each."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.zkfc.conftest import HaPair


def _one_line(result: subprocess.CompletedProcess[str], status: int, *needles: str) -> None:
    assert result.returncode == status, result
    assert result.stderr.count("\n") == 1, result.stderr
    _said(result, *needles)


def _said(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """A server's last line says why it stopped (its log comes before)."""
    assert "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in result.stderr.strip().splitlines()[-1], result.stderr


def test_manual_transitions_and_failover(pair_factory) -> None:
    pair: HaPair = pair_factory("127.0.0.1:1", automatic=False)
    pair.start_namenodes("nn1", "nn2")
    assert pair.admin("-getServiceState", "nn1").stdout == "standby\n"

    up = pair.admin("-transitionToActive", "nn1")
    assert up.returncode == 0 and up.stdout.startswith("NameNode nn1 is active (epoch 1"), up
    assert pair.transitions("nn1")[-1].source == "user"
    _one_line(pair.admin("-transitionToActive", "nn2"), 1, "TakeoverRefused",
              "NameNode nn1 is active")
    assert pair.state("nn2") == "standby"

    moved = pair.admin("-failover", "nn1", "nn2")
    assert moved.returncode == 0, moved
    assert "NameNode nn1: it stepped down when asked" in moved.stdout
    assert "Failover from NameNode nn1 to nn2 successful" in moved.stdout
    assert pair.state("nn1") == "standby" and pair.state("nn2") == "active"
    assert pair.transitions("nn1")[-1].at <= pair.transitions("nn2")[-1].at

    down = pair.admin("-transitionToStandby", "nn2")
    assert down.returncode == 0 and "NameNode nn2 is standby" in down.stdout
    _one_line(pair.admin("-getServiceState", "nn9"), 1, "unknown NameNode id 'nn9'",
              "nn1, nn2")
    usage = pair.admin("-failover", "nn1")
    assert usage.returncode == 2 and "-failover FROM TO" in usage.stderr
    pair.pause(pair.namenodes["nn1"])
    _one_line(pair.admin("-getServiceState", "nn1"), 1, "-getServiceState: RpcTimeout: ",
              "no answer to get_service_state within")
    pair.resume(pair.namenodes["nn1"])


def test_failover_from_a_dead_namenode_relies_on_the_fencing_method(
    pair_factory, tmp_path: Path
) -> None:
    fenced = tmp_path / "fenced"
    pair: HaPair = pair_factory("127.0.0.1:1", automatic=False,
                                fencing_methods=[f"shell(echo $target_port > {fenced})"])
    pair.start_namenodes("nn1", "nn2")
    assert pair.admin("-transitionToActive", "nn1").returncode == 0
    pair.namenodes["nn1"].kill()
    moved = pair.admin("-failover", "nn1", "nn2")
    assert moved.returncode == 0, moved
    assert "it did not step down" in moved.stdout and "fenced by shell(" in moved.stdout
    assert fenced.read_text().strip() == pair.addresses["nn1"].rpartition(":")[2]
    assert pair.state("nn2") == "active"


def test_forcemanual_reaches_the_namenode_which_decides(pair_factory) -> None:
    pair: HaPair = pair_factory("127.0.0.1:1")  # automatic failover on, no controllers
    pair.start_namenodes("nn1", "nn2")
    _one_line(pair.admin("-transitionToStandby", "nn1"), 1, "AccessDenied",
              "automatic failover is enabled")
    forced = pair.admin("-transitionToActive", "nn1", "--forcemanual")
    assert forced.returncode == 0 and "bypassing the failover controllers" in forced.stderr
    assert pair.transitions("nn1")[-1].source == "user_forced"


def test_zkfc_refuses_to_run_without_what_it_needs(pair_factory, tmp_path: Path) -> None:
    pair: HaPair = pair_factory("127.0.0.1:1", automatic=False)
    pair.start_namenodes("nn1", "nn2")

    def zkfc(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "xdfs", "--conf", str(pair.conf), *args,
                               "zkfc", "--id", "nn1", "--rpc-address", "127.0.0.1:0"],
                              capture_output=True, text=True, timeout=120)

    _said(zkfc(), "zkfc cannot start: ConfigError: ha.automatic_failover is off")
    on = ("-D", "ha.automatic_failover=true")
    _said(zkfc(*on, "-D", "ha.zkfc_secret_file="), "ha.zkfc_secret_file is not set")
    _said(zkfc(*on, "-D", "ha.zookeeper_secret_file="), "ha.zookeeper_secret_file is not set")
    _said(zkfc(*on, "-D", "ha.zookeeper_quorum="), "ha.zookeeper_quorum is not set")
    _said(zkfc(*on, "-D", "ha.zookeeper_connect_timeout_s=1"),
          "Unavailable: no ZooKeeper session with 127.0.0.1:1 within 1.0 s")
    _one_line(zkfc(*on, "-D", 'ha.fencing_methods=["poke(x)"]'), 1,
              "ha.fencing_methods: 'poke(x)' is not shell(COMMAND) or kill(NAME_DIR)")
    _one_line(pair.admin("-failover", "nn2", "nn1", overrides=(
        "ha.automatic_failover=true", "ha.zookeeper_connect_timeout_s=1")), 1,
        "-failover: Unavailable: no ZooKeeper session with 127.0.0.1:1")
    unknown = subprocess.run([sys.executable, "-m", "xdfs", "--conf", str(pair.conf), "zkfc",
                              "--id", "nn7"], capture_output=True, text=True, timeout=120)
    assert unknown.returncode == 2 and "NameNode id 'nn7' is not in ha.namenodes" in (
        unknown.stderr)
