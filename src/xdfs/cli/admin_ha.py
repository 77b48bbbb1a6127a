"""The HA commands of ``xdfs admin`` (HDFS's ``hdfs haadmin``), on NameNode ids of
``ha.namenodes``:

* ``-getServiceState ID``: active, standby, initializing or stopping.
* ``-failover FROM TO``: with ``ha.automatic_failover``, graceful, through the controllers
  (TO's controller asks the active's controller to cede the election, then wins it).
  Without it: FROM is asked to step down (fenced with ``ha.fencing_methods`` when it does
  not), then TO is made active.
* ``-transitionToActive ID`` / ``-transitionToStandby ID``: manual transitions, refused while
  ``ha.automatic_failover`` is on unless ``--forcemanual`` (which may cause a split brain
  the controllers do not know about). ``-transitionToActive`` also refuses while another
  NameNode answers that it is active.

(``-transitionToActive --backup HOST:PORT`` is the BackupNode's takeover, in admin.py.)
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from xdfs.config import XdfsConfig
    from xdfs.protocol.ha import ServiceStatus

FORCE_MANUAL = "--forcemanual"


def ha_command(config: XdfsConfig, name: str, ids: list[str], force: bool) -> int:
    """Run one HA command on NameNode ids (parsed by admin.py): exit status, errors as one
    line."""
    from xdfs.errors import XdfsError
    from xdfs.rpc.loop import run

    try:
        addresses = [_address(config, nn_id) for nn_id in ids]
        return run(_dispatch(config, name, ids, addresses, force))
    except XdfsError as exc:
        click.echo(f"{name}: {type(exc).__name__}: {exc.message}", err=True)
        return 1


def _address(config: XdfsConfig, nn_id: str) -> str:
    from xdfs.errors import ConfigError

    address = config.ha.namenodes.get(nn_id)
    if not address:
        known = ", ".join(sorted(config.ha.namenodes)) or "none configured"
        raise ConfigError(f"unknown NameNode id {nn_id!r} (ha.namenodes: {known})")
    return address


async def _dispatch(config: XdfsConfig, name: str, ids: list[str], addresses: list[str],
                    force: bool) -> int:
    if name == "-getServiceState":
        click.echo((await _state(config, addresses[0])).state)
        return 0
    if name == "-failover":
        if ids[0] == ids[1]:
            from xdfs.errors import InvalidArgument

            raise InvalidArgument(f"-failover from {ids[0]} to itself")
        if config.ha.automatic_failover:
            return await _graceful_failover(config, ids[0], ids[1])
        return await _manual_failover(config, ids, addresses)
    _refuse_manual(config, force)
    if name == "-transitionToActive":
        await _refuse_second_active(config, ids[0])
        status = await _transition(config, addresses[0], active=True, force=force)
    else:
        status = await _transition(config, addresses[0], active=False, force=force)
    click.echo(f"NameNode {ids[0]} is {status.state} (epoch {status.epoch}, txid "
               f"{status.last_txid})")
    return 0


def _refuse_manual(config: XdfsConfig, force: bool) -> None:
    from xdfs.errors import AccessDenied

    if config.ha.automatic_failover and not force:
        raise AccessDenied(
            "automatic failover is enabled (ha.automatic_failover): refusing to change HA "
            "state by hand, the controllers would not know (split brain); use -failover, or "
            f"{FORCE_MANUAL} if you are sure")
    if force:
        click.echo(f"warning: {FORCE_MANUAL}: bypassing the failover controllers", err=True)


async def _state(config: XdfsConfig, address: str) -> ServiceStatus:
    from xdfs.protocol.ha import GET_SERVICE_STATE
    from xdfs.rpc.messages import Empty
    from xdfs.zkfc.namenodes import BoundedClient

    async with BoundedClient(config, address, "xdfs-admin") as client:
        return await client.call(GET_SERVICE_STATE, Empty(), config.ha.health_check_timeout_s)


async def _transition(config: XdfsConfig, address: str, *, active: bool,
                      force: bool) -> ServiceStatus:
    from xdfs.protocol.ha import (
        SOURCE_USER,
        SOURCE_USER_FORCED,
        TRANSITION_TO_ACTIVE,
        TRANSITION_TO_STANDBY,
        TransitionRequest,
    )
    from xdfs.zkfc.namenodes import BoundedClient

    method = TRANSITION_TO_ACTIVE if active else TRANSITION_TO_STANDBY
    source = SOURCE_USER_FORCED if force else SOURCE_USER
    timeout_s = config.ha.transition_timeout_s if active else config.ha.graceful_fence_timeout_s
    async with BoundedClient(config, address, "xdfs-admin") as client:
        return await client.call(method, TransitionRequest(source), timeout_s)


async def _refuse_second_active(config: XdfsConfig, target: str) -> None:
    """TakeoverRefused when another NameNode answers that it is active (one that does not
    answer cannot be asked: HDFS proceeds too)."""
    from xdfs.errors import TakeoverRefused
    from xdfs.zkfc.namenodes import CALL_ERRORS

    others = {nn_id: address for nn_id, address in config.ha.namenodes.items()
              if nn_id != target}
    answers = await asyncio.gather(*(_state(config, address) for address in others.values()),
                                   return_exceptions=True)
    for nn_id, answer in zip(others, answers, strict=True):
        if isinstance(answer, BaseException):
            if isinstance(answer, CALL_ERRORS):
                continue  # cannot be asked
            raise answer
        if answer.state == "active":
            raise TakeoverRefused(f"NameNode {nn_id} is active: make it standby first "
                                  f"(-failover {nn_id} {target})")


async def _graceful_failover(config: XdfsConfig, source: str, target: str) -> int:
    from xdfs.common.secrets import read_secret_file
    from xdfs.protocol.zkfc import GRACEFUL_FAILOVER
    from xdfs.rpc.messages import Empty
    from xdfs.zkfc.namenodes import BoundedClient
    from xdfs.zkfc.server import controller_hello
    from xdfs.zkfc.znodes import Paths, configured_controller, find_controller

    ha = config.ha
    secret = read_secret_file(ha.zkfc_secret_file, "ha.zkfc_secret_file")
    zk_secret = read_secret_file(ha.zookeeper_secret_file, "ha.zookeeper_secret_file")
    paths = Paths.of(ha.zookeeper_parent, ha.nameservice)
    controller = await asyncio.to_thread(find_controller, ha.zookeeper_quorum, zk_secret,
                                         paths, target, ha.zookeeper_connect_timeout_s)
    address = configured_controller(ha, target, controller.zkfc,
                                    paths.controller(target))
    async with BoundedClient(config, address, "xdfs-admin",
                              hello=controller_hello(secret)) as client:
        # the target waits up to failover_timeout_s for the cede and again for the win
        answer = await client.call(GRACEFUL_FAILOVER, Empty(), 2 * ha.failover_timeout_s + 5)
    if answer.old_active == answer.new_active:
        click.echo(f"NameNode {target} is already active")
        return 0
    click.echo(f"Failover to NameNode {target} successful (the active was {answer.old_active}"
               f"{'' if answer.old_active == source else f', not {source}'}; took "
               f"{answer.took_s:.2f} s)")
    return 0


async def _manual_failover(config: XdfsConfig, ids: list[str], addresses: list[str]) -> int:
    """HDFS's FailoverController without ZooKeeper: TO must be ready; FROM steps down or
    is fenced; TO becomes active."""
    from xdfs.common.fencing import parse_methods
    from xdfs.errors import TakeoverRefused
    from xdfs.protocol.ha import SOURCE_USER
    from xdfs.zkfc.namenodes import FENCING_KEY, fence_old_active

    target = await _state(config, addresses[1])
    if not target.ready_to_become_active:
        raise TakeoverRefused(f"NameNode {ids[1]} is not ready to become active: "
                              f"{target.not_ready_reason}")
    methods = parse_methods(config.ha.fencing_methods, FENCING_KEY)
    how = await fence_old_active(config, addresses[0], SOURCE_USER, methods)
    click.echo(f"NameNode {ids[0]}: {how}")
    status = await _transition(config, addresses[1], active=True, force=False)
    click.echo(f"Failover from NameNode {ids[0]} to {ids[1]} successful (epoch "
               f"{status.epoch})")
    return 0
