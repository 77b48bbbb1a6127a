"""A retry after the NameNode died between making a call durable and answering it (real
processes, kill -9): the restarted NameNode rebuilds its retry cache from the edits and
answers the retry with the first outcome, without applying the call twice.

Each round starts a NameNode whose fault hook SIGKILLs it right after the sync of the
next keyed (at-most-once) call, before the answer is sent
(``namenode.keyed_call_durable``); the client's connection breaks; the next NameNode
answers the retry of that call (same client id, same call number) from its edits, and a
new call number shows what a second execution would have answered."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from xdfs.common.process import ProcessGroup, ServerProcess
from xdfs.config import RpcConfig
from xdfs.errors import AlreadyExists, ConnectionLost, NotFound, XdfsError
from xdfs.namenode.retry_cache import KEYED_DURABLE
from xdfs.protocol import namenode as p
from xdfs.rpc.client import RpcClient
from xdfs.rpc.messages import PROTOCOL_VERSION, Hello
from xdfs.rpc.service import Method

from ..integration.test_nn_crash import ARMED_MAIN

USER, PASSWORD = "root", "pw"
ENV = {"XDFS_USER": USER, "XDFS_PASSWORD": PASSWORD}
READY = r"namenode serving on (\S+)"
TIMEOUT_S = 30.0

#: (call number, method, request, what a second execution raises), in order: each one is
#: the call the NameNode dies answering.
CALLS: list[tuple[int, Method[Any, Any], Any, type[XdfsError]]] = [
    (11, p.RENAME, p.RenameRequest("/tmp/src", "/tmp/dst"), AlreadyExists),
    (12, p.CREATE, p.CreateRequest("/tmp/new", "w", overwrite=False), AlreadyExists),
    (13, p.DELETE, p.DeleteRequest("/tmp/dst", skip_trash=True), NotFound),
    (14, p.MKDIRS, p.MkdirsRequest("/tmp/m", parents=False), AlreadyExists),
]


class NameNodes:
    def __init__(self, processes: ProcessGroup, base: Path) -> None:
        self.processes = processes
        self.base = base
        self.name_dir = base / "name"
        self.starts = 0

    def format(self) -> None:
        result = subprocess.run(
            [sys.executable, "-m", "xdfs", "namenode", "--name-dir", str(self.name_dir),
             "-format"],
            env={**os.environ, **ENV}, capture_output=True, text=True, timeout=120,
        )
        assert result.returncode == 0, result.stderr

    def start(self, *, armed: bool) -> tuple[ServerProcess, str]:
        self.starts += 1
        args = ["namenode", "--name-dir", str(self.name_dir), "--rpc-address", "127.0.0.1:0"]
        env = {**ENV, "XDFS_FAULTS": f"{KEYED_DURABLE}=kill"} if armed else ENV
        proc = ServerProcess(
            [sys.executable, "-c", ARMED_MAIN, *args],
            log_path=self.base / f"nn-{self.starts:02d}.log", ready_pattern=READY, env=env,
        )
        self.processes.start(proc, 60.0)
        assert proc.match is not None
        return proc, proc.match.group(1)


async def call_once(
    client: RpcClient, address: str, method: Method[Any, Any], request: Any, number: int
) -> Any:
    """One try of logical call ``number`` (what RpcClient sends on each retry of it)."""
    conn = await client.connection(address)
    return await conn.call(method, request, TIMEOUT_S, number)


async def test_a_retry_after_kill_9_between_sync_and_answer_gets_the_first_outcome(
    processes: ProcessGroup, tmp_path: Path
) -> None:
    nodes = NameNodes(processes, tmp_path)
    await asyncio.to_thread(nodes.format)
    hello = Hello(PROTOCOL_VERSION, client_name="crash-retry", user=USER, password=PASSWORD,
                  client_id=os.urandom(16))
    config = RpcConfig()
    nn, address = await asyncio.to_thread(nodes.start, armed=True)
    client = RpcClient(address, config, hello=hello)
    try:
        # setup: calls without a number are not keyed, so the fault hook lets them be
        await call_once(client, address, p.CREATE, p.CreateRequest("/tmp/src", "w"), 0)
        previous: tuple[int, Method[Any, Any], Any, type[XdfsError]] | None = None
        first_answers: list[Any] = []
        for number, method, request, second_error in CALLS:
            if previous is not None:
                prev_number, prev_method, prev_request, prev_error = previous
                answer = await call_once(client, address, prev_method, prev_request,
                                         prev_number)
                first_answers.append(answer)
                with pytest.raises(prev_error):  # a second execution fails
                    await call_once(client, address, prev_method, prev_request, 0)
            with pytest.raises(ConnectionLost):
                await call_once(client, address, method, request, number)
            assert await asyncio.to_thread(nn.proc.wait, 60) == -9  # type: ignore[union-attr]
            await client.close()
            last = number == CALLS[-1][0]
            nn, address = await asyncio.to_thread(nodes.start, armed=not last)
            client = RpcClient(address, config, hello=hello)  # same client id
            previous = (number, method, request, second_error)
        assert previous is not None
        number, method, request, second_error = previous
        first_answers.append(await call_once(client, address, method, request, number))
        with pytest.raises(second_error):
            await call_once(client, address, method, request, 0)
    finally:
        await client.close()
    rename, create, delete, mkdirs = first_answers
    assert rename == p.RenameResponse("/tmp/dst")
    assert (create.path, create.is_dir, create.under_construction) == ("/tmp/new", False, True)
    assert delete == p.DeleteResponse(True, "")
    assert (mkdirs.path, mkdirs.is_dir) == ("/tmp/m", True)
    assert "Traceback" not in nn.log_text()
