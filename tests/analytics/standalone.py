"""A Spark standalone cluster from pip's pyspark (it has no sbin/start-master.sh): a master
and one worker, each a JVM started by pyspark's own ``bin/spark-class``, as the user guide
documents. The worker's working directory is its own temporary directory; both JVMs are
stopped by pid (each leads a process group of its own)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

#: How long the JVMs may take to start and the worker to register.
START_TIMEOUT_S = 180.0


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class Standalone:
    master_url: str
    worker_dir: Path  # the worker's --work-dir: one app-* directory per application


def _start(args: list[str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_NO_DAEMONIZE": "1"}
    with open(log, "wb") as out:
        return subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=cwd, env=env, start_new_session=True)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)  # spark-class execs java: the group is the JVM's
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


@contextmanager
def standalone_cluster(tmp: Path) -> Iterator[Standalone]:
    master_dir, worker_dir = tmp / "master", tmp / "worker"
    master_dir.mkdir()
    worker_dir.mkdir()
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    processes = []
    try:
        processes.append(_start(
            ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
             str(port), "--webui-port", str(free_port())], master_dir / "master.log", master_dir))
        processes.append(_start(
            ["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores",
             "2", "--memory", "2g", "--work-dir", str(worker_dir), "--webui-port",
             str(free_port())], worker_dir / "worker.log", worker_dir))
        deadline = time.monotonic() + START_TIMEOUT_S
        log = worker_dir / "worker.log"
        while "Successfully registered with master" not in log.read_text(errors="replace"):
            dead = [p for p in processes if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(f.read_text(errors="replace")[-3000:] for f in (
                    master_dir / "master.log", log))
                raise RuntimeError(f"the standalone cluster did not start:\n{logs}")
            time.sleep(0.5)
        yield Standalone(url, worker_dir)
    finally:
        for process in reversed(processes):
            _stop(process)
