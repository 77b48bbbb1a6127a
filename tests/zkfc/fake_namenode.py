"""A fake NameNode serving only ``ha.service`` (and ``system``), run as its own process by
the failover tests (``python -m tests.zkfc.fake_namenode``), so they can SIGKILL and
SIGSTOP it. It follows the semantics a NameNode must implement (docs/protocol.md):
transitions idempotent, user requests refused while automatic failover is on, a new epoch
taken on every transition to active.

Every transition is one log line: ``fake-namenode EVENT <method> source=<s> state=<old>-><new>
epoch=<e> at=<time.time()>`` (the tests measure failover times from these). Health:
unhealthy while the file given by ``--unhealthy-file`` exists.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from pathlib import Path

from xdfs.config import RpcConfig
from xdfs.errors import AccessDenied, InvalidArgument
from xdfs.protocol.ha import (
    HA_SERVICE_PROTOCOL,
    SOURCE_USER,
    STATE_ACTIVE,
    STATE_STANDBY,
    TRANSITION_SOURCES,
    UNHEALTHY_RESOURCES,
    HealthReport,
    ServiceStatus,
    TransitionRequest,
)
from xdfs.protocol.system_handlers import add_system_services
from xdfs.rpc.handling import CallContext
from xdfs.rpc.messages import Empty
from xdfs.rpc.server import RpcServer

EVENT = "fake-namenode EVENT"


class FakeNameNode:
    def __init__(self, automatic_failover: bool, unhealthy_file: Path | None) -> None:
        self.automatic_failover = automatic_failover
        self.unhealthy_file = unhealthy_file
        self.state = STATE_STANDBY
        self.epoch = 0
        self.last_txid = 0

    def _status(self) -> ServiceStatus:
        return ServiceStatus(self.state, self.epoch, self.last_txid)

    def get_service_state(self, ctx: CallContext, request: Empty) -> ServiceStatus:
        return self._status()

    def monitor_health(self, ctx: CallContext, request: Empty) -> HealthReport:
        if self.unhealthy_file is not None and self.unhealthy_file.exists():
            return HealthReport(False, UNHEALTHY_RESOURCES, f"{self.unhealthy_file} exists")
        return HealthReport(True)

    def transition_to_active(self, ctx: CallContext, req: TransitionRequest) -> ServiceStatus:
        self._check(req)
        if self.state != STATE_ACTIVE:
            self.epoch += 1
            self._transition("transition_to_active", req, STATE_ACTIVE)
        return self._status()

    def transition_to_standby(self, ctx: CallContext, req: TransitionRequest) -> ServiceStatus:
        self._check(req)
        self._transition("transition_to_standby", req, STATE_STANDBY)
        return self._status()

    def _check(self, req: TransitionRequest) -> None:
        if req.source not in TRANSITION_SOURCES:
            raise InvalidArgument(f"unknown transition source {req.source!r}")
        if self.automatic_failover and req.source == SOURCE_USER:
            raise AccessDenied("manual HA transitions are refused: automatic failover is on "
                               "(ha.automatic_failover)")

    def _transition(self, method: str, req: TransitionRequest, new: str) -> None:
        old, self.state = self.state, new
        print(f"{EVENT} {method} source={req.source} state={old}->{new} epoch={self.epoch} "
              f"at={time.time():.6f}", flush=True)


async def main(args: argparse.Namespace) -> None:
    fake = FakeNameNode(args.automatic_failover, args.unhealthy_file)
    server = RpcServer("fake-namenode", RpcConfig())
    add_system_services(server, "namenode")
    server.add_service(HA_SERVICE_PROTOCOL, fake)
    address = await server.start("127.0.0.1", args.port)
    print(f"fake-namenode serving on {address} pid {os.getpid()}", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--automatic-failover", action="store_true")
    parser.add_argument("--unhealthy-file", type=Path, default=None)
    asyncio.run(main(parser.parse_args()))
    sys.exit(0)
