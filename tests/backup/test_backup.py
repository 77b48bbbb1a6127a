"""The BackupNode against a real in-process NameNode (MiniCluster): following under load,
the replicator's sources, checkpoints, re-bootstrap after purged edits, and takeover."""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import replace
from pathlib import Path

import pytest

from xdfs.backupnode.server import BackupNode
from xdfs.common.images import parse_image_name
from xdfs.config import XdfsConfig
from xdfs.errors import (
    AccessDenied,
    AuthenticationFailed,
    EditsPurged,
    Fenced,
    InvalidArgument,
    TakeoverRefused,
    Unavailable,
)
from xdfs.protocol.backup import BACKUP_STATUS, FETCH_EDITS, TRANSITION_TO_ACTIVE, FetchEditsRequest
from xdfs.rpc.messages import Empty
from xdfs.testing.minicluster import MiniCluster
from xdfs.testing.poll import eventually

from .conftest import ROOT, backup_config, canonical_dump, caught_up, connect


async def _worker(client, root: str, seed: int, stop: asyncio.Event, acked: list[str]) -> None:
    """Mixed mutations in a subtree of its own, one call at a time, until ``stop``."""
    rng = random.Random(seed)
    await client.mkdirs(root)
    step = 0
    while not stop.is_set():
        step += 1
        name = f"{root}/s{seed}n{step}"
        kind = rng.choice(["mkdir", "file", "file", "rename", "delete", "chmod", "times"])
        entries = [e.path for e in await client.list_dir(root)]
        if kind == "mkdir" or not entries:
            await client.mkdirs(f"{name}/sub")
        elif kind == "file":
            await client.create(name)
            await client.complete(name, [])
        elif kind == "rename":
            await client.rename(rng.choice(entries), f"{name}-moved")
        elif kind == "delete":
            await client.delete(rng.choice(entries), recursive=True, skip_trash=True)
        elif kind == "chmod":
            await client.set_permission(rng.choice(entries), rng.choice([0o700, 0o755, 0o750]))
        else:
            await client.set_times(rng.choice(entries), mtime_ms=step * 1000, atime_ms=step)
        acked.append(f"{kind} {name}")


async def test_backup_equals_namenode_at_every_quiescent_point(minicluster: MiniCluster) -> None:
    config = backup_config()
    nn = await minicluster.start_namenode(config=config)
    backup = await minicluster.start_backupnode(config=config)
    clients = [connect(nn.address) for _ in range(3)]
    acked: list[str] = []
    try:
        for phase in range(3):
            stop = asyncio.Event()
            workers = [
                asyncio.ensure_future(_worker(c, f"/w{i}", phase * 10 + i, stop, acked))
                for i, c in enumerate(clients)
            ]
            await asyncio.sleep(0.8)
            if phase == 1:
                await clients[0].save_namespace()  # a roll and a purge under load
            stop.set()
            await asyncio.gather(*workers)
            await caught_up(nn, backup)
            assert nn.fs is not None and backup.local.namespace is not None
            dump = canonical_dump(backup.local.namespace)
            assert dump == canonical_dump(nn.fs.ns), f"phase {phase}"
        assert len(acked) > 100
        status = await clients[0].status()
        [info] = status.backups
        assert info.address == backup.address
        assert info.synced_txid == status.synced_txid and info.lag_txns == 0
    finally:
        for c in clients:
            await c.close()


async def test_replicator_serves_segment_then_buffer_then_cache(
    minicluster: MiniCluster,
) -> None:
    config = backup_config()
    nn = await minicluster.start_namenode(config=config)
    async with connect(nn.address) as client:
        for i in range(50):
            await client.mkdirs(f"/a/{i}")
        await client.roll_edits()  # txids 1..51 now in a finalized segment
        for i in range(20):
            await client.mkdirs(f"/b/{i}")
        assert nn.edits is not None and nn.replicator is not None
        synced = nn.edits.synced_txid

        async def fetch(after: int, count: int) -> tuple[int, int, str]:
            answer = await client.rpc.call(FETCH_EDITS, FetchEditsRequest(after, count))
            return answer.first_txid, answer.count, answer.source

        assert await fetch(0, 10) == (1, 10, "segment")  # from disk, then cached
        assert await fetch(10, 10) == (11, 10, "cache")
        first, count, source = await fetch(51, 1000)  # past the finalized segment
        assert (first, count, source) == (52, synced - 51, "buffer")
        assert await fetch(52, 5) == (53, 5, "cache")
        assert await fetch(synced, 10) == (synced + 1, 0, "buffer")  # caught up
        assert nn.replicator.served["segment"] == 10


async def test_fetch_with_a_txid_from_the_future_or_bad_limits_is_refused(
    minicluster: MiniCluster,
) -> None:
    nn = await minicluster.start_namenode(config=backup_config())
    async with connect(nn.address) as client:
        await client.mkdirs("/x")
        assert nn.edits is not None
        synced = nn.edits.synced_txid
        for request in (FetchEditsRequest(synced + 1, 10), FetchEditsRequest(10**12, 10),
                        FetchEditsRequest(-5, 10), FetchEditsRequest(0, 0),
                        FetchEditsRequest(0, 10, wait_s=-1.0)):
            with pytest.raises(InvalidArgument):
                await client.rpc.call(FETCH_EDITS, request)
        assert nn.edits.synced_txid == synced  # nothing changed
        answer = await client.rpc.call(FETCH_EDITS, FetchEditsRequest(0, 10))
        assert answer.count == synced


async def test_fetch_edits_needs_the_superuser(minicluster: MiniCluster) -> None:
    nn = await minicluster.start_namenode(config=backup_config())
    async with connect(nn.address) as root:
        await root.add_user("eve", "eve-pw")
    async with connect(nn.address, user="eve", password="eve-pw") as eve:
        with pytest.raises(AccessDenied):
            await eve.rpc.call(FETCH_EDITS, FetchEditsRequest(0, 10))


async def test_caught_up_fetch_is_a_long_poll_answered_by_the_next_sync(
    minicluster: MiniCluster,
) -> None:
    nn = await minicluster.start_namenode(config=backup_config())
    async with connect(nn.address) as client, connect(nn.address) as writer:
        assert nn.edits is not None
        synced = nn.edits.synced_txid
        poll = asyncio.ensure_future(
            client.rpc.call(FETCH_EDITS, FetchEditsRequest(synced, 100, wait_s=20.0))
        )
        await asyncio.sleep(0.2)
        assert not poll.done()  # waiting, not spinning and not answering empty
        await writer.mkdirs("/wake")
        answer = await asyncio.wait_for(poll, 10)
        assert answer.first_txid == synced + 1 and answer.count >= 1


async def test_checkpoint_is_uploaded_installed_and_old_images_purged(
    minicluster: MiniCluster,
) -> None:
    config = backup_config(checkpoint_txns=40)
    nn = await minicluster.start_namenode(config=config)
    backup = await minicluster.start_backupnode(config=config)
    async with connect(nn.address) as client:
        for round_ in range(3):
            installed = nn.image_txid
            for i in range(50):
                await client.mkdirs(f"/r{round_}/{i}")
            await caught_up(nn, backup)
            # 50 txns pass checkpoint_txns (40) once: during the round or at its end,
            # whenever the checkpointer looks
            await eventually(lambda: nn.image_txid > installed,  # noqa: B023
                             what="a checkpoint of this round installed on the NameNode")
    # (the NameNode installs an upload before its answer reaches the BackupNode's count)
    await eventually(lambda: backup.local.checkpoints_uploaded >= 3,
                     what="the BackupNode counting its third upload")

    def purged(directory: Path) -> bool:
        names = sorted(p.name for p in directory.iterdir())
        kinds = [parse_image_name(n) for n in names]
        images = [k[1] for k in kinds if k and k[0] == "image"]
        leftovers = [n for n in names if n.startswith("fsimage.ckpt") or n.endswith(".tmp")]
        return len(images) <= 2 and not leftovers

    for directory in (nn.dirs[0].current, backup.local.dir.current):  # once a checkpoint is done
        await eventually(lambda: purged(directory), what=f"old images purged in {directory}")  # noqa: B023
    assert nn.image_txid in nn.dirs[0].images()
    # The NameNode restarts from the uploaded image.
    await minicluster.stop_backupnode(backup)
    await minicluster.stop_namenode(nn)
    again = await minicluster.start_namenode(config=config, format_dirs=False)
    async with connect(again.address) as client:
        assert len(await client.list_dir("/r2")) == 50


async def test_backup_restarts_from_its_own_state(minicluster: MiniCluster) -> None:
    config = backup_config()
    nn = await minicluster.start_namenode(config=config)
    backup = await minicluster.start_backupnode(config=config)
    async with connect(nn.address) as client:
        for i in range(30):
            await client.mkdirs(f"/before/{i}")
        await caught_up(nn, backup)
        await minicluster.stop_backupnode(backup)
        for i in range(30):
            await client.mkdirs(f"/while-down/{i}")
        again = await minicluster.start_backupnode(config=config)
        assert again.local.bootstraps == 0  # its own image and edits, then the missing edits
        await caught_up(nn, again)
        assert nn.fs is not None and again.local.namespace is not None
        assert canonical_dump(again.local.namespace) == canonical_dump(nn.fs.ns)


async def test_backup_behind_purged_edits_bootstraps_from_the_image(
    minicluster: MiniCluster,
) -> None:
    base = backup_config()
    # One image kept, and no recent edits kept in memory: purged edits are gone for good.
    config = replace(base, namenode=replace(base.namenode, images_retained=1,
                                            edits_cache_bytes=0))
    nn = await minicluster.start_namenode(config=config)
    backup = await minicluster.start_backupnode(config=config)
    async with connect(nn.address) as client:
        await client.mkdirs("/first")
        await caught_up(nn, backup)
        await minicluster.stop_backupnode(backup)
        for round_ in range(2):
            for i in range(20):
                await client.mkdirs(f"/gone/{round_}/{i}")
            await client.save_namespace()  # keeps one image: older edits are purged
        await client.mkdirs("/after-purge")
        assert nn.replicator is not None
        assert nn.replicator.oldest_txid() > backup.local.synced_txid + 1
        with pytest.raises(EditsPurged):
            await client.rpc.call(FETCH_EDITS, FetchEditsRequest(backup.local.synced_txid, 10))
        again = await minicluster.start_backupnode(config=config)
        await caught_up(nn, again)
        assert again.local.bootstraps == 1
        assert nn.fs is not None and again.local.namespace is not None
        assert canonical_dump(again.local.namespace) == canonical_dump(nn.fs.ns)
        assert again.local.dir.images() == [max(nn.dirs[0].images())]  # stale local state gone


async def test_takeover_refused_while_the_namenode_answers(minicluster: MiniCluster) -> None:
    config = backup_config()
    nn = await minicluster.start_namenode(config=config)
    backup = await minicluster.start_backupnode(config=config)
    async with connect(backup.address) as admin:
        with pytest.raises(TakeoverRefused):
            await admin.rpc.call(TRANSITION_TO_ACTIVE, Empty())
        status = await admin.rpc.call(BACKUP_STATUS, Empty())
        assert status.state == "following" and status.namenode == [nn.address]
        with pytest.raises(Unavailable, match="this is a BackupNode"):  # NotActive: no failover
            await admin.rpc.call(FETCH_EDITS, FetchEditsRequest(0, 1))
    async with connect(backup.address, password="wrong") as intruder:
        with pytest.raises(AuthenticationFailed):
            await intruder.rpc.call(TRANSITION_TO_ACTIVE, Empty())
    assert backup.local.state == "following"


async def test_takeover_keeps_pulled_edits_tokens_and_clients_with_both_addresses(
    minicluster: MiniCluster,
) -> None:
    config = backup_config()
    nn = await minicluster.start_namenode(config=config)
    # kill(DIR) finds the stopped NameNode's lock free: fenced without killing anyone
    config = backup_config(fencing_methods=(f"kill({nn.dirs[0].root})",))
    backup = await minicluster.start_backupnode(config=config)
    both = connect(nn.address, backup.address, config=config)
    try:
        login = await both.login(ROOT, "rootpw")
        for i in range(40):
            await both.mkdirs(f"/kept/{i}")
        await caught_up(nn, backup)
        pulled = backup.local.synced_txid
        await minicluster.stop_namenode(nn)
        with pytest.raises(Unavailable):  # the backup answers NotActive until promoted
            await both.mkdirs("/refused")
        async with connect(backup.address, config=config) as admin:
            answer = await admin.rpc.call(TRANSITION_TO_ACTIVE, Empty())
        # the promotion's first op raises the epoch (a fresh namespace is at epoch 1)
        assert answer.address == backup.address and answer.last_txid == pulled + 1
        assert (answer.epoch, answer.fenced_by) == (2, f"kill({nn.dirs[0].root})")
        assert backup.local.state == "active"
        assert backup.local.namespace is not None and backup.local.namespace.epoch == 2
        assert len(await both.list_dir("/kept")) == 40  # failed over to the second address
        await both.mkdirs("/after-takeover")
        async with connect(backup.address, config=config, user="", password="",
                           token=login.token) as by_token:  # a token of the old NameNode
            assert (await by_token.stat("/after-takeover")).is_dir
    finally:
        await both.close()


@pytest.mark.parametrize("methods", [(), ("shell(false)", "shell(exit 3)")])
async def test_takeover_refused_without_a_fencing_method_that_succeeds(
    minicluster: MiniCluster, methods: tuple[str, ...]
) -> None:
    config = backup_config(fencing_methods=methods)
    backup = await followed_then_stopped(minicluster, config, config)
    async with connect(backup.address, config=config) as admin:
        with pytest.raises(TakeoverRefused) as refused:
            await admin.rpc.call(TRANSITION_TO_ACTIVE, Empty())
        status = await admin.rpc.call(BACKUP_STATUS, Empty())
    message = refused.value.message
    if methods:  # each failure named, in order
        assert "shell(false): exit status 1" in message
        assert message.index("shell(false)") < message.index("shell(exit 3): exit status 3")
    else:
        assert "no fencing method configured" in message
    assert "\n" not in message
    assert status.state == "following" and backup.namenode is None  # still a backup


async def followed_then_stopped(
    minicluster: MiniCluster, config: XdfsConfig, backup: XdfsConfig
) -> BackupNode:
    """A NameNode with a caught-up backup, then the NameNode stopped: the backup."""
    nn = await minicluster.start_namenode(config=config)
    follower = await minicluster.start_backupnode(config=backup)
    async with connect(nn.address) as client:
        await client.mkdirs("/before")
        await caught_up(nn, follower)
    await minicluster.stop_namenode(nn)
    return follower


def _with_peers(config: XdfsConfig, *peers: str, required: bool = False) -> XdfsConfig:
    namenode = replace(config.namenode, peers=peers, peer_check_timeout_s=1.0,
                       peer_check_required=required)
    return replace(config, namenode=namenode)


async def test_namenode_refuses_to_start_behind_a_promoted_peer(
    minicluster: MiniCluster, caplog: pytest.LogCaptureFixture
) -> None:
    config = backup_config()
    fence = f"kill({minicluster.base_dir / 'nn-dir0'})"
    backup = await followed_then_stopped(minicluster, config,
                                         backup_config(fencing_methods=(fence,)))
    # level with its following backup (same epoch and txid): it may start
    level = await minicluster.start_namenode(config=_with_peers(config, backup.address),
                                             format_dirs=False)
    await minicluster.stop_namenode(level)
    async with connect(backup.address, config=config) as admin:
        await admin.rpc.call(TRANSITION_TO_ACTIVE, Empty())
        await admin.mkdirs("/after")
    with pytest.raises(Fenced, match=rf"peer {backup.address} \(active\) is ahead: epoch 2"):
        await minicluster.start_namenode(config=_with_peers(config, backup.address),
                                         format_dirs=False)
    # a peer that cannot be asked: started with a warning, or refused when required
    silent = "127.0.0.1:1"
    with pytest.raises(Fenced, match=r"did not answer.*peer_check_required"):
        await minicluster.start_namenode(config=_with_peers(config, silent, required=True),
                                         format_dirs=False)
    with caplog.at_level(logging.WARNING, logger="xdfs.namenode.ha"):
        stale = await minicluster.start_namenode(config=_with_peers(config, silent),
                                                 format_dirs=False)
    assert f"peer {silent} did not answer: starting without comparing" in caplog.text
    assert stale.fs is not None and stale.fs.ns.epoch == 1
