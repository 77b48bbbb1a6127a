"""``xdfs dev``: a local cluster of real processes, for trying and testing xdfs.

``xdfs dev --base-dir DIR --port P --datanodes N`` formats ``DIR/namenode`` when it is
empty (the superuser is $XDFS_USER or ``xdfs``, its password $XDFS_PASSWORD or generated),
starts a NameNode process on 127.0.0.1:P and N DataNode processes (``DIR/datanode<i>``, on
free ports, logged in with the DataNode secret the NameNode writes to
``DIR/namenode/datanode.secret``), writes ``DIR/cluster.json`` (each process's role,
pid, address, and ``http`` host:port where it serves HTTP: the NameNode's WebHDFS gateway
on ``dev.http_port``, the DataNodes' data part on free ports) and ``DIR/client.toml`` (the
URI, the superuser's credentials and ``webhdfs``, the gateway; point ``XDFS_CONF`` at it),
waits until the cluster accepts writes (out of safe mode, every
DataNode live), prints ``xdfs dev cluster ready: xdfs://127.0.0.1:P`` and supervises.
With ``--backup`` a BackupNode (``DIR/backupnode``) follows the NameNode, and the DataNodes
and ``client.toml`` list both addresses (NameNode first), so killing the NameNode and
running ``xdfs admin -transitionToActive --backup ADDR`` shows a takeover (the backup
fences the old NameNode with ``kill(DIR/<its name dir>)``). Which name dir is active is
kept in ``DIR/dev-state.json`` (:mod:`xdfs.cli.dev_state`): running it again on the same
DIR restarts the same cluster with its data, from the active name dir. SIGTERM or
Ctrl-C stops every process gracefully; the cluster stops when no NameNode (nor backup) is
left; if ``xdfs dev`` itself is killed (even by SIGKILL), its children get SIGTERM. A process
that does not start (a directory locked by another ``xdfs dev``, a busy port) is reported in
one line with its log. With ``--logservice`` it also starts ZooKeeper, three storage nodes
and a log service instance (:mod:`xdfs.cli.dev_log`), listed in ``cluster.json`` (roles
``zookeeper``, ``journalnode``, ``logservice``) and written into ``client.toml``; with
``--logservice-only`` it starts those alone (no file system; the cluster stops when the
log service instance is gone).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import click

from xdfs.cli.dev_ha import CONF_FILE, DevHa, dev_ha, namenode_processes, start_zookeeper
from xdfs.cli.dev_journal import (
    DevJournal,
    dev_journal,
    initialize_if_new,
    journalnode_processes,
)
from xdfs.cli.dev_log import DevLog, dev_log, start_dev_log
from xdfs.cli.dev_state import DEV_STATE_DEFAULT, DevState, PromotionWatch, arrange
from xdfs.cli.main import CliState
from xdfs.common.files import atomic_write

if TYPE_CHECKING:
    from xdfs.common.process import ServerProcess
    from xdfs.config import XdfsConfig

DEFAULT_SUPERUSER = "xdfs"
#: How often the wait for a writable cluster asks, and says what it is waiting for.
WAIT_POLL_S = 0.2
WAIT_REPORT_S = 5.0


@click.command()
@click.option("--base-dir", default=None, help="Where the cluster keeps its data.")
@click.option("--port", type=int, default=None, help="NameNode client port (0: any free).")
@click.option("--datanodes", type=int, default=None, help="DataNodes to start (default 3).")
@click.option("--backup", is_flag=True, default=None, help="Also start a BackupNode.")
@click.option("--journal", "journalnodes", type=int, default=None, metavar="N",
              help="Write the edits through N JournalNodes (the quorum journal; 3 or 5).")
@click.option("--ha", is_flag=True, default=None,
              help="Two NameNodes with automatic failover: ZooKeeper, a controller per "
                   "NameNode, and the quorum journal (3 JournalNodes unless --journal).")
@click.option("--logservice", "with_log", is_flag=True, default=None,
              help="Also start ZooKeeper, 3 storage nodes and a log service instance.")
@click.option("--logservice-only", "log_only", is_flag=True, default=None,
              help="Only the log service (ZooKeeper, 3 storage nodes, an instance): no "
                   "file system.")
@click.option("--shards", type=int, default=None, metavar="N",
              help="One namespace over N NameNode shards (ZooKeeper holds the slot map; "
                   "the DataNodes store every shard's blocks). 1: one NameNode, as without it.")
@click.pass_obj
def dev(
    state: CliState, base_dir: str | None, port: int | None, datanodes: int | None,
    backup: bool | None, journalnodes: int | None, ha: bool | None, with_log: bool | None,
    log_only: bool | None, shards: int | None,
) -> None:
    """Start a local cluster (a NameNode and DataNodes) as child processes."""
    config = state.config
    base = Path(base_dir or config.dev.base_dir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    if config.dev.logservice_only if log_only is None else log_only:
        sys.exit(_log_only(state, base))
    shard_count = config.dev.shards if shards is None else shards
    if shard_count < 1:
        raise click.UsageError("--shards must be at least 1")
    if shard_count > 1:
        if ha or backup or journalnodes or with_log:
            raise click.UsageError("--shards does not go with --ha, --backup, --journal or "
                                   "--logservice yet: each shard is one NameNode")
        count = config.dev.datanodes if datanodes is None else datanodes
        sys.exit(_sharded(state, base, shard_count, count))
    credentials = _credentials(base)
    pair = dev_ha(base) if (config.dev.ha if ha is None else ha) else None
    roles = arrange(base)
    launch = Launch(state, base, roles, pair, credentials)
    if roles == DEV_STATE_DEFAULT and not any(launch.name_dir.glob("*")):
        _run_format(launch.name_dir, launch.env)
    journal_count = config.dev.journalnodes if journalnodes is None else journalnodes
    if pair is not None and journal_count <= 0:
        journal_count = 3
    with_backup = config.dev.backup if backup is None else backup
    journal, journalnode_procs = _journal(base, journal_count, with_backup, launch.conf)
    launch.journalnodes = journalnode_procs
    launch.children += [("journalnode", proc) for proc in journalnode_procs]
    watch: PromotionWatch | None = None
    devlog = dev_log(base, launch.conf) if (
        config.dev.logservice if with_log is None else with_log) \
        else None
    try:
        if devlog is not None:
            _start_log(devlog, launch.children, config.dev.ready_timeout_s)
        address = launch.namenodes(journal, config.dev.port if port is None else port)
        if with_backup:
            address, watch = launch.backup(address)
        count = config.dev.datanodes if datanodes is None else datanodes
        launch.datanodes(address, count)
        _wait_writable(state, f"xdfs://{address}", credentials, count)
    except BaseException:
        launch.stop()
        raise
    uri = f"xdfs://{address}"
    known = {"zookeeper": pair.zookeeper_address} if pair else {}
    _write_cluster_files(base, uri, launch.children, credentials, known, devlog)
    click.echo(f"xdfs dev cluster ready: {uri}")
    click.echo(f"  export XDFS_CONF={base / 'client.toml'}   # then: xdfs dfs -ls /")
    for role, child in launch.children:
        if role == "namenode" and _http(child, role):
            click.echo(f"  web UI: http://{_http(child, role)}/ui/   (log in as "
                       f"{credentials['user']}; the password is in client.toml)")
    sys.stdout.flush()
    sys.exit(_supervise(launch.children, watch.poll if watch else None))


@dataclass
class Launch:
    """The processes of one ``xdfs dev`` run, started in order; stopped on a failure."""

    state: CliState
    base: Path
    roles: DevState
    pair: DevHa | None
    credentials: dict[str, str]
    children: list[tuple[str, ServerProcess]] = field(default_factory=list)
    conf: list[str] = field(init=False)  # --conf for every process
    journalnodes: list[ServerProcess] = field(default_factory=list)  # the NameNode's journal

    def __post_init__(self) -> None:
        if self.pair is not None:
            self.conf = self.pair.write_conf(self.state.conf_path)
        else:
            self.conf = ["--conf", self.state.conf_path] if self.state.conf_path else []

    @property
    def env(self) -> dict[str, str]:
        return {"XDFS_USER": self.credentials["user"],
                "XDFS_PASSWORD": self.credentials["password"]}

    @property
    def name_dir(self) -> Path:
        return self.pair.name_dir("nn1") if self.pair else self.base / self.roles.active

    @property
    def ready_timeout_s(self) -> float:
        return float(self.state.config.dev.ready_timeout_s)

    def namenodes(self, journal: DevJournal | None, port: int) -> str:
        """Start ZooKeeper (HA), the JournalNodes, the NameNode(s) and controllers; the
        NameNode addresses, comma-separated."""
        from xdfs.common.process import ServerProcess

        conf = self.conf
        dev = self.state.config.dev
        extension = f"namenode.safe_mode_extension_s={dev.safe_mode_extension_s}"
        # an HA pair's NameNodes serve HTTP each on a port of its own (DIR/ha.json)
        http = [] if self.pair is not None else _http_conf(self.state.config)
        nn_conf = [*conf, *(journal.conf() if journal else []), *http, "-D", extension]
        if self.pair is not None:
            self.children.insert(0, ("zookeeper",
                                     start_zookeeper(self.pair, self.ready_timeout_s)))
        for proc in self.journalnodes:
            _start(proc, self.ready_timeout_s)
        if journal is not None:
            initialize_if_new(journal, self.name_dir, conf, self.env)
        if self.pair is not None:
            self.pair.prepare_standby_dir()
            self.children += namenode_processes(self.pair, nn_conf, self.env)
        else:
            self.children.append(("namenode", ServerProcess.xdfs(
                *nn_conf, "namenode", "--name-dir", str(self.name_dir),
                "--rpc-address", f"127.0.0.1:{port}",
                log_path=self.base / "logs" / "namenode.log",
                ready_pattern=r"namenode serving on (\S+)", env=self.env,
                die_with_parent=True)))
        started = [(role, _start(proc, self.ready_timeout_s))
                   for role, proc in self.children if role in ("namenode", "zkfc")]
        return ",".join(address for role, address in started if role == "namenode")

    def backup(self, address: str) -> tuple[str, PromotionWatch]:
        from xdfs.common.process import ServerProcess

        config = self.state.config
        fencing = [] if config.backupnode.fencing_methods else [
            "-D", "backupnode.fencing_methods=" + json.dumps([f"kill({self.name_dir})"])]
        backupnode = ServerProcess.xdfs(
            *self.conf, *fencing, *_http_conf(config), "backupnode",
            "--name-dir", str(self.base / self.roles.standby),
            "--namenode", address, "--rpc-address", "127.0.0.1:0",
            log_path=self.base / "logs" / "backupnode.log",
            ready_pattern=r"backupnode serving on (\S+)", env=self.env, die_with_parent=True,
        )
        self.children.append(("backupnode", backupnode))
        address = f"{address},{_start(backupnode, self.ready_timeout_s)}"
        return address, PromotionWatch(self.base, self.roles, backupnode.log_path)

    def datanodes(self, address: str, count: int) -> None:
        from xdfs.common.process import ServerProcess

        for index in range(count):
            datanode = ServerProcess.xdfs(
                *self.conf, *_datanode_login(self.name_dir), *_http_conf(self.state.config),
                "datanode",
                "--data-dir", str(self.base / f"datanode{index}"),
                "--namenode", address, "--rpc-address", "127.0.0.1:0",
                log_path=self.base / "logs" / f"datanode{index}.log",
                ready_pattern=r"datanode serving on (\S+)",
                env={"XDFS_USER": "", "XDFS_PASSWORD": ""}, die_with_parent=True,
            )
            self.children.append(("datanode", datanode))
            _start(datanode, self.ready_timeout_s)

    def stop(self) -> None:
        for _role, child in self.children:
            if child.alive():
                child.terminate()


def _write_cluster_files(base: Path, uri: str, children: list[tuple[str, ServerProcess]],
                         credentials: dict[str, str], known: dict[str, str],
                         devlog: DevLog | None) -> None:
    """DIR/cluster.json (every process: role, pid, address, log) and DIR/client.toml."""
    from xdfs.config import read_toml, write_toml

    logged = devlog.processes() if devlog is not None else []
    processes: list[dict[str, object]] = []
    for role, child in children:
        if (role, child) in logged:
            continue  # listed by the log service's own entries below
        process: dict[str, object] = {
            "role": role, "pid": child.pid,
            "address": _address(child) or known.get(role, ""), "log": str(child.log_path)}
        http = _http(child, role)
        if http:
            process["http"] = http
        processes.append(process)
    if devlog is not None:
        entries = devlog.cluster_entries()
        for entry, (role, child) in zip(entries, devlog.processes(), strict=True):
            http = _http(child, role) if role != "zookeeper" else ""
            if http:
                entry["http"] = http
        processes += entries
    cluster = {"fs": uri, "base_dir": str(base), "processes": processes}
    atomic_write(base / "cluster.json", (json.dumps(cluster, indent=2) + "\n").encode())
    # the first NameNode's gateway (an HA pair's are all in [ha] webhdfs, the standby's
    # answering StandbyException)
    gateway = next((_http(child, role) for role, child in children if role == "namenode"), "")
    client: dict[str, object] = {
        **({"fs": uri} if uri else {}), **credentials, **({"webhdfs": gateway} if gateway else {})}
    if devlog is not None:
        client.update(devlog.client_settings())
    settings: dict[str, object] = {"client": client}
    if (base / CONF_FILE).exists() and any(role == "zkfc" for role, _c in children):
        # xdfs admin -getServiceState/-failover need the pair's ids and ZooKeeper
        settings["ha"] = read_toml(base / CONF_FILE)["ha"]
    write_toml(base / "client.toml", settings)
    os.chmod(base / "client.toml", 0o600)


def _start_log(devlog: DevLog, children: list[tuple[str, ServerProcess]], timeout_s: float
               ) -> None:
    try:
        start_dev_log(devlog, _start, timeout_s)
    finally:  # the ones started are stopped with the rest
        children += devlog.processes()


def _log_only(state: CliState, base: Path) -> int:
    """``--logservice-only``: the log service's processes alone, supervised the same way
    (the cluster stops when the log service instance is gone)."""
    devlog = dev_log(base, ["--conf", state.conf_path] if state.conf_path else [])
    children: list[tuple[str, ServerProcess]] = []
    try:
        _start_log(devlog, children, state.config.dev.ready_timeout_s)
    except BaseException:
        for _role, child in children:
            if child.alive():
                child.terminate()
        raise
    _write_cluster_files(base, "", children, {}, {}, devlog)
    click.echo(f"xdfs dev log service ready: {devlog.service_address}")
    click.echo(f"  export XDFS_CONF={base / 'client.toml'}   # then: xdfs log list")
    sys.stdout.flush()
    return _supervise(children)


def _sharded(state: CliState, base: Path, count: int, datanodes: int) -> int:
    """``--shards N``: ZooKeeper, N NameNode shards and ``datanodes`` DataNodes that store
    every shard's blocks (:mod:`xdfs.cli.dev_shards`), supervised as the other clusters are."""
    from xdfs.cli.dev_shards import (
        datanode_process,
        dev_shards,
        namenode_process,
        wait_for_map,
        zookeeper_process,
    )
    from xdfs.namenode.security.passwords import DATANODE_SECRET_FILE

    config = state.config
    credentials = _credentials(base)
    env = {"XDFS_USER": credentials["user"], "XDFS_PASSWORD": credentials["password"]}
    layout = dev_shards(base, count)
    conf = ["--conf", state.conf_path] if state.conf_path else []
    timeout_s = float(config.dev.ready_timeout_s)
    children: list[tuple[str, ServerProcess]] = []
    try:
        children.append(("zookeeper", zookeeper_process(layout, timeout_s)))
        extension = ["-D", f"namenode.safe_mode_extension_s={config.dev.safe_mode_extension_s}"]
        # every shard takes shard 0's DataNode secret (written once shard 0 runs), so one
        # secret logs a DataNode in to every shard
        secret = ("--datanode-secret-file", str(layout.name_dir(0) / DATANODE_SECRET_FILE))
        for shard in range(count):
            if not any(layout.name_dir(shard).glob("*")):
                _run_format(layout.name_dir(shard), env,
                            ("--shard", str(shard), "--cluster-id", layout.cluster_id,
                             *(secret if shard else ())))
            namenode = namenode_process(layout, shard, [*conf, *_http_conf(config), *extension],
                                        env)
            children.append(("namenode", namenode))
            _start(namenode, timeout_s)
        wait_for_map(config, layout, credentials)
        for index in range(datanodes):
            datanode = datanode_process(
                layout, index, [*conf, *_datanode_login(layout.name_dir(0)),
                                *_http_conf(config)])
            children.append(("datanode", datanode))
            _start(datanode, timeout_s)
        for shard in range(count):
            _wait_writable(state, f"xdfs://{layout.address(shard)}", credentials, datanodes)
    except BaseException:
        for _role, child in children:
            if child.alive():
                child.terminate()
        raise
    uri = f"xdfs://{layout.address(0)}"
    _write_cluster_files(base, uri, children, credentials,
                         {"zookeeper": layout.zookeeper_address}, None)
    click.echo(f"xdfs dev cluster ready: {uri} ({count} shards)")
    click.echo(f"  export XDFS_CONF={base / 'client.toml'}   # then: xdfs admin -shards")
    sys.stdout.flush()
    return _supervise(children)


def _journal(base: Path, count: int, with_backup: bool, conf: list[str]
             ) -> tuple[DevJournal | None, list[ServerProcess]]:
    if count <= 0:
        return None, []
    if with_backup:
        raise click.UsageError("--journal and --backup do not go together: with a quorum "
                               "journal, a standby NameNode takes over (HDFS drops the "
                               "BackupNode there too)")
    if count % 2 == 0:
        raise click.UsageError(f"--journal {count}: use an odd number (3 or 5): a majority "
                               "of an even number tolerates no more failures than one less")
    journal = dev_journal(base, count)
    return journal, journalnode_processes(journal, conf)


def _start(process: ServerProcess, timeout_s: float) -> str:
    from xdfs.common.process import ProcessError

    try:
        process.start(timeout_s)
    except ProcessError as exc:  # one line: why it stopped (its last log line) and where
        raise click.ClickException(
            f"{process.log_path.stem} did not start: {exc.last_line or 'no output'} "
            f"(log: {process.log_path})"
        ) from None
    return _address(process)


def _wait_writable(state: CliState, uri: str, credentials: dict[str, str], datanodes: int
                   ) -> None:
    """Until the NameNode is out of safe mode and every DataNode is live (a write then
    succeeds), saying what it waits for every few seconds; bounded by
    dev.writable_timeout_s."""
    from xdfs.client.client import Client

    timeout_s = state.config.dev.writable_timeout_s
    start = time.monotonic()
    said = start
    with Client(uri, config=state.config, token="", **credentials) as client:
        while True:
            safe_mode = client.safe_mode("get")
            live = sum(node.state == "live" for node in client.datanode_report().nodes)
            if not safe_mode.on and live >= datanodes:
                return
            waiting = (f"safe mode is on ({safe_mode.reason})" if safe_mode.on else
                       f"{live} of {datanodes} DataNodes registered")
            now = time.monotonic()
            if now - start > timeout_s:
                raise click.ClickException(
                    f"the cluster does not accept writes after {timeout_s:.0f} s: {waiting} "
                    "(logs in the base dir's logs/; dev.writable_timeout_s sets the wait)")
            if now - said >= WAIT_REPORT_S:
                click.echo(f"xdfs dev: waiting for the cluster to accept writes: {waiting}",
                           err=True)
                said = now
            time.sleep(WAIT_POLL_S)


def _address(process: ServerProcess) -> str:
    """Where a started process serves, as its ready line said ("" when it says nothing:
    ZooKeeper, whose readiness is polled)."""
    assert process.match is not None, "a started process has matched its ready pattern"
    return process.match.group(1) if process.match.re.groups else ""


def _http(process: ServerProcess, role: str) -> str:
    """The ``host:port`` a process serves HTTP on: it prints ``ROLE http on ADDRESS`` just
    before its ready line (xdfs.cli.serving); "" when it serves none."""
    assert process.match is not None, "a started process has matched its ready pattern"
    before = process.match.string[: process.match.start()]
    found = re.search(rf"{re.escape(role)} http on (\S+)", before)
    return found.group(1) if found else ""


def _http_conf(config: XdfsConfig) -> list[str]:
    """The dev NameNode serves WebHDFS on dev.http_port and its DataNodes the data part on
    free ports, unless the configuration names the addresses itself."""
    args = []
    if not config.namenode.http_address:
        args += ["-D", f"namenode.http_address=127.0.0.1:{config.dev.http_port}"]
    if not config.datanode.http_address:
        args += ["-D", "datanode.http_address=127.0.0.1:0"]
    # status pages and /metrics of the other servers, on free ports
    if not config.journalnode.http_address:
        args += ["-D", "journalnode.http_address=127.0.0.1:0"]
    if not config.backupnode.http_address:
        args += ["-D", "backupnode.http_address=127.0.0.1:0"]
    return args


def _datanode_login(name_dir: Path) -> list[str]:
    """DataNodes log in with the cluster's DataNode secret, which the NameNode (started
    first) writes to its name dir; never with the superuser's password."""
    from xdfs.namenode.security.passwords import DATANODE_SECRET_FILE

    return ["-D", f"datanode.secret_file={name_dir / DATANODE_SECRET_FILE}"]


def _credentials(base: Path) -> dict[str, str]:
    """The superuser of this dev cluster: kept in client.toml across restarts."""
    from xdfs.config import read_toml

    existing = base / "client.toml"
    if existing.exists():
        client = read_toml(existing).get("client", {})
        if client.get("user") and client.get("password"):
            return {"user": client["user"], "password": client["password"]}
    return {
        "user": os.environ.get("XDFS_USER") or DEFAULT_SUPERUSER,
        "password": os.environ.get("XDFS_PASSWORD") or secrets.token_urlsafe(12),
    }


def _run_format(name_dir: Path, env: dict[str, str], options: tuple[str, ...] = ()) -> None:
    """``options``: more of ``xdfs namenode -format``'s (``--shard K``)."""
    import subprocess

    result = subprocess.run(
        [sys.executable, "-m", "xdfs", "namenode", "--name-dir", str(name_dir), "-format",
         *options],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode != 0:
        raise click.ClickException(f"formatting {name_dir} failed:\n{result.stderr[-2000:]}")


def _supervise(
    children: list[tuple[str, ServerProcess]], on_tick: Callable[[], None] | None = None
) -> int:
    """Wait for SIGTERM/SIGINT (stop all gracefully) or the death of every NameNode and
    backup (stop the rest: nothing can serve).

    A DataNode that dies is reported and left dead: killing one is how a developer watches
    re-replication happen, and the cluster goes on without it; so does a NameNode with a
    backup left to promote, and one NameNode of an HA pair (the other serves; a fenced one
    does not exit, it goes back to standby by itself)."""
    procs = [child for _role, child in children]
    namenodes = [child for role, child in children if role in ("namenode", "backupnode")] \
        or [child for role, child in children if role == "logservice"]  # --logservice-only
    # JournalNodes (and ZooKeeper) stop last: a NameNode stopping gracefully finalizes its
    # segment on them
    last = [c for r, c in children if r in ("journalnode", "zookeeper")]
    procs.sort(key=lambda proc: proc in last)
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    status = 0
    reported: set[int] = set()
    while not stopping:
        if on_tick is not None:
            on_tick()  # e.g. notice a takeover
        for role, proc in children:
            if not proc.alive() and proc.pid not in reported:
                reported.add(proc.pid)
                left = sum(other.alive() for other in namenodes)
                still = (f"; {left} of {len(namenodes)} left to serve"
                         if proc in namenodes and left else "")
                click.echo(f"xdfs dev: {role} (pid {proc.pid}) exited{still}; see "
                           f"{proc.log_path}", err=True)
        if not any(proc.alive() for proc in namenodes):
            status = 1
            break
        time.sleep(0.2)
    for proc in procs:
        if proc.alive():
            proc.terminate()
    click.echo("xdfs dev cluster stopped")
    return status
