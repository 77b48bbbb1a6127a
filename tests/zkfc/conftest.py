"""Real processes for the failover tests: a ZooKeeper ensemble (one per module), fake
NameNodes (tests/zkfc/fake_namenode.py) and ``xdfs zkfc`` controllers, each test in its own
nameservice so tests sharing an ensemble never see each other's znodes."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from xdfs.common.process import ProcessGroup, ServerProcess
from xdfs.common.secrets import new_secret_file
from xdfs.common.zookeeper import ZooKeeperEnsemble
from xdfs.testing.net import free_port

ROOT = Path(__file__).resolve().parents[2]
#: ZooKeeper tick for the tests: sessions of 4 s are within its [2, 20] ticks.
TICK_S = 0.5
SESSION_TIMEOUT_S = 4.0
#: Deadline of anything a test waits for (generous: a loaded 2-core machine).
WAIT_S = 60.0
EVENT_RE = re.compile(
    r"fake-namenode EVENT (?P<method>\w+) source=(?P<source>\w+) "
    r"state=(?P<old>\w+)->(?P<new>\w+) epoch=(?P<epoch>\d+) at=(?P<at>[\d.]+)"
)
_nameservices = itertools.count(1)


@pytest.fixture(scope="module")
def ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    with ZooKeeperEnsemble(tmp_path_factory.mktemp("zk"), 3, tick_s=TICK_S) as zk:
        zk.start(WAIT_S)
        yield zk


@dataclass(frozen=True)
class Transition:
    method: str
    source: str
    old: str
    new: str
    epoch: int
    at: float  # time.time() in the fake NameNode


@dataclass
class HaPair:
    """Two fake NameNodes (nn1, nn2) and, with ``start_controllers``, their controllers."""

    group: ProcessGroup
    base: Path
    quorum: str
    automatic: bool = True
    settings: dict[str, object] = field(default_factory=dict)
    namenodes: dict[str, ServerProcess] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)
    controllers: dict[str, ServerProcess] = field(default_factory=dict)
    #: Where each NameNode's controller serves (ha.controllers), chosen once.
    controller_addresses: dict[str, str] = field(default_factory=dict)
    conf: Path = Path()

    def start_namenodes(self, *ids: str) -> None:
        for nn_id in ids:
            args = [sys.executable, "-m", "tests.zkfc.fake_namenode"]
            if self.automatic:
                args.append("--automatic-failover")
            args += ["--unhealthy-file", str(self.unhealthy_file(nn_id))]
            proc = ServerProcess(args, log_path=self.base / f"{nn_id}.log", cwd=ROOT,
                                 ready_pattern=r"fake-namenode serving on (\S+) pid")
            self.group.start(proc, WAIT_S)
            assert proc.match is not None
            self.namenodes[nn_id] = proc
            self.addresses[nn_id] = proc.match.group(1)
        self.write_conf()

    def unhealthy_file(self, nn_id: str) -> Path:
        return self.base / f"{nn_id}.unhealthy"

    @property
    def zookeeper_secret_file(self) -> Path:
        return self.base / "zookeeper.secret"

    def write_conf(self) -> None:
        secret = self.base / "zkfc.secret"
        for path in (secret, self.zookeeper_secret_file):
            if not path.exists():
                new_secret_file(path)
        for nn_id in self.addresses:
            self.controller_addresses.setdefault(nn_id, f"127.0.0.1:{free_port()}")
        nameservice = f"ns{next(_nameservices)}-{os.getpid()}"
        ha = {
            "nameservice": nameservice,
            # one ZooKeeper secret per parent: each test's pair has its own of both
            "zookeeper_parent": f"/xdfs-ha-{nameservice}",
            "zookeeper_secret_file": str(self.zookeeper_secret_file),
            "controllers": self.controller_addresses,
            "namenodes": self.addresses,
            "automatic_failover": self.automatic,
            "zookeeper_quorum": self.quorum,
            "zookeeper_session_timeout_s": SESSION_TIMEOUT_S,
            "health_check_interval_s": 0.5,
            "health_check_timeout_s": 1.0,
            "health_failures_max": 3,
            "graceful_fence_timeout_s": 1.0,
            "retry_after_failure_s": 0.5,
            "failover_timeout_s": 20.0,
            "zkfc_rpc_address": "127.0.0.1:0",
            "zkfc_secret_file": str(secret),
            **self.settings,
        }
        import tomli_w

        self.conf = self.base / "xdfs.toml"
        self.conf.write_text(tomli_w.dumps({"ha": ha}))

    def start_controller(self, nn_id: str) -> ServerProcess:
        proc = self.group.start_xdfs(
            f"zkfc-{nn_id}-{len(self.controllers)}", "--conf", str(self.conf), "zkfc",
            "--id", nn_id, ready_pattern=r"zkfc serving on (\S+)", deadline_s=WAIT_S,
        )
        self.controllers[nn_id] = proc
        return proc

    def transitions(self, nn_id: str) -> list[Transition]:
        text = self.namenodes[nn_id].log_text()
        return [Transition(m["method"], m["source"], m["old"], m["new"], int(m["epoch"]),
                           float(m["at"])) for m in EVENT_RE.finditer(text)]

    def state(self, nn_id: str) -> str:
        """The fake's state as its transitions say (standby before any)."""
        moves = self.transitions(nn_id)
        return moves[-1].new if moves else "standby"

    def wait(self, predicate: object, what: str, deadline_s: float = WAIT_S) -> None:
        assert callable(predicate)
        end = time.monotonic() + deadline_s
        while not predicate():
            if time.monotonic() > end:
                raise AssertionError(f"not within {deadline_s} s: {what}\n{self.logs()}")
            time.sleep(0.05)

    def wait_one_active(self) -> str:
        """Exactly one NameNode active and the other standby; its id."""
        def settled() -> bool:
            states = sorted(self.state(nn_id) for nn_id in self.namenodes)
            return states == ["active", "standby"]

        self.wait(settled, "one NameNode active, the other standby")
        return next(nn_id for nn_id in self.namenodes if self.state(nn_id) == "active")

    def admin(self, *args: str, overrides: tuple[str, ...] = ()
              ) -> subprocess.CompletedProcess[str]:
        options = [item for key in overrides for item in ("-D", key)]
        return subprocess.run(
            [sys.executable, "-m", "xdfs", "--conf", str(self.conf), *options, "admin", *args],
            capture_output=True, text=True, timeout=120,
        )

    def logs(self) -> str:
        parts = []
        for name, proc in [*self.namenodes.items(), *(
                (f"zkfc-{key}", value) for key, value in self.controllers.items())]:
            parts.append(f"--- {name} ---\n{proc.log_text()[-4000:]}")
        return "\n".join(parts)

    def pause(self, proc: ServerProcess) -> None:
        os.kill(proc.pid, signal.SIGSTOP)

    def resume(self, proc: ServerProcess) -> None:
        os.kill(proc.pid, signal.SIGCONT)


@pytest.fixture
def pair_factory(tmp_path: Path) -> Iterator[object]:
    groups: list[ProcessGroup] = []

    def make(quorum: str, *, automatic: bool = True, **settings: object) -> HaPair:
        group = ProcessGroup(tmp_path)
        groups.append(group)
        return HaPair(group, tmp_path, quorum, automatic, dict(settings))

    yield make
    for group in groups:
        for proc in group.processes:
            if proc.alive():
                os.kill(proc.pid, signal.SIGCONT)  # a paused one dies by SIGKILL anyway
        group.kill_all()


def conf_json(value: object) -> str:
    return json.dumps(value)
