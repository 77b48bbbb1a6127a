"""The slot map in ZooKeeper: shards register, one of them is the controller, and only the
controller writes the map, in a transaction that checks its own epoch (a thin blocking
driver over :mod:`xdfs.common.coordination`; kazoo's threads call back).

The tree under ``sharding.zookeeper_root`` (every znode with the digest ACL of
:func:`~xdfs.common.coordination.xdfs_acl`)::

    members/<k>        persistent: shard k's address (kept while it is down)
    shards/<k>         ephemeral: shard k's address, while its session lives
    controller         ephemeral: the controller's shard number (the election's lock)
    controller_epoch   persistent: a counter every new controller raises
    slotmap            persistent: the map (SlotMap.encode(), JSON)

The election is an ephemeral lock znode, the pattern of the failover controllers'
elector (:mod:`xdfs.zkfc.elector`), whose state machine is about fencing and activating a
NameNode and so is not reused as such. A shard that creates ``controller`` raises
``controller_epoch`` (a versioned set) and remembers the znode version that set made; every
write of ``slotmap`` is a ZooKeeper transaction of ``check(controller_epoch, that
version)`` and the set, so a controller deposed while paused (its session expired, another
shard won and raised the epoch) writes nothing when it resumes: the transaction fails
whole (Kafka's ``controller_epoch``).

The controller writes the initial map (:func:`~xdfs.sharding.slotmap.initial_map`, shards in
number order) once ``shards_expected`` shards have registered and no map exists.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError
from kazoo.protocol.states import WatchedEvent

from xdfs.common.coordination import secure_tree
from xdfs.errors import NotController, ShardingError
from xdfs.sharding.slotmap import SlotMap, initial_map

log = logging.getLogger(__name__)

SECRET_KEY = "sharding.zookeeper_secret_file"


class ShardPaths:
    def __init__(self, root: str) -> None:
        self.root = root
        self.members = f"{root}/members"
        self.shards = f"{root}/shards"
        self.controller = f"{root}/controller"
        self.controller_epoch = f"{root}/controller_epoch"
        self.slotmap = f"{root}/slotmap"


def read_map(zk: KazooClient, root: str) -> tuple[SlotMap | None, int]:
    """The map in ZooKeeper and its znode version; (None, -1) when none is written."""
    try:
        data, stat = zk.get(ShardPaths(root).slotmap)
    except NoNodeError:
        return None, -1
    return SlotMap.decode(data), stat.version


def read_members(zk: KazooClient, root: str) -> dict[str, str]:
    """Shard id -> the address it registered (every shard ever registered)."""
    paths = ShardPaths(root)
    out: dict[str, str] = {}
    try:
        children = zk.get_children(paths.members)
    except NoNodeError:
        return out
    for child in children:
        try:
            data, _ = zk.get(f"{paths.members}/{child}")
        except NoNodeError:
            continue
        out[child] = data.decode()
    return out


def live_shards(zk: KazooClient, root: str) -> set[str]:
    try:
        return set(zk.get_children(ShardPaths(root).shards))
    except NoNodeError:
        return set()


class ShardCoordinator:
    """One shard's part: its registration, its candidacy, and (while controller) the map's
    writes. ``on_map(map, version)`` is called (in a kazoo thread) with every map seen;
    ``on_members(addresses)`` with the registered addresses."""

    def __init__(
        self, zk: KazooClient, root: str, shard: int, address: str, *,
        shards_expected: int = 0,
        on_map: Callable[[SlotMap, int], None] = lambda m, v: None,
        on_members: Callable[[dict[str, str]], None] = lambda a: None,
    ) -> None:
        self.zk = zk
        self.paths = ShardPaths(root)
        self.shard = str(shard)
        self.address = address
        self.shards_expected = shards_expected
        self.on_map = on_map
        self.on_members = on_members
        #: The controller_epoch znode version our raise made; None: not the controller.
        self.epoch_version: int | None = None
        self.controller_epoch = 0
        self._lock = threading.Lock()  # one election attempt at a time
        self._stopped = False

    @property
    def is_controller(self) -> bool:
        return self.epoch_version is not None

    # -- start and session events ---------------------------------------------------------

    def start(self) -> None:
        """Blocking: secure the tree, register, stand for controller, watch the map."""
        secure_tree(self.zk, self.paths.root, SECRET_KEY)
        for path in (self.paths.members, self.paths.shards):
            self.zk.ensure_path(path)
        with contextlib.suppress(NodeExistsError):
            self.zk.create(self.paths.controller_epoch, b"0")
        self.register()
        self.zk.add_listener(self._on_state)
        self.zk.DataWatch(self.paths.slotmap, self._on_map_data)
        self.zk.ChildrenWatch(self.paths.members, self._on_members_change)
        self.stand()

    def stop(self) -> None:
        self._stopped = True
        self.epoch_version = None

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            # the session is gone, and with it the lock: no longer the controller
            if self.epoch_version is not None:
                log.warning("shard %s: ZooKeeper session lost: no longer the controller",
                            self.shard)
            self.epoch_version = None
        elif state == KazooState.CONNECTED and not self._stopped:
            self._spawn(self._rejoin)

    def _spawn(self, work: Callable[[], None]) -> None:
        """Run ``work`` off kazoo's event thread (a watch callback must not block); a failure
        (the session going away meanwhile) is logged: the next session event tries again."""
        def run() -> None:
            try:
                work()
            except Exception as exc:
                if not self._stopped and self.zk.connected:
                    log.warning("shard %s: ZooKeeper: %s failed: %s", self.shard,
                                getattr(work, "__name__", "work"), exc)

        self.zk.handler.spawn(run)

    def _rejoin(self) -> None:
        """After a reconnect (maybe with a new session): our ephemerals back, stand again."""
        self.register()
        self.stand()

    def register(self) -> None:
        member = f"{self.paths.members}/{self.shard}"
        value = self.address.encode()
        try:
            self.zk.create(member, value)
        except NodeExistsError:
            self.zk.set(member, value)
        live = f"{self.paths.shards}/{self.shard}"
        try:
            self.zk.create(live, value, ephemeral=True)
        except NodeExistsError:
            owner = self.zk.exists(live)
            if owner is not None and owner.ephemeralOwner != self.zk.client_id[0]:
                # our previous session's, not yet expired (a restart): replace it
                self.zk.delete(live)
                self.zk.create(live, value, ephemeral=True)

    # -- the election -----------------------------------------------------------------------

    def stand(self) -> None:
        """Try to become the controller; watch the lock when another holds it."""
        if self._stopped:
            return
        with self._lock:
            if self.is_controller:
                return
            try:
                self.zk.create(self.paths.controller, self.shard.encode(), ephemeral=True)
            except NodeExistsError:
                if self.zk.exists(self.paths.controller, watch=self._on_lock_event) is None:
                    self._spawn(self.stand)  # released meanwhile: try again
                return
            self._raise_epoch()
        log.info("shard %s is the controller (controller epoch %d)", self.shard,
                 self.controller_epoch)
        self.maybe_write_initial_map()

    def _raise_epoch(self) -> None:
        while True:
            data, stat = self.zk.get(self.paths.controller_epoch)
            epoch = int(data or b"0") + 1
            try:
                new = self.zk.set(self.paths.controller_epoch, str(epoch).encode(),
                                  version=stat.version)
            except BadVersionError:
                continue  # (only a deposed controller races us here)
            self.controller_epoch = epoch
            self.epoch_version = new.version
            return

    def _on_lock_event(self, event: WatchedEvent) -> None:
        self._spawn(self.stand)

    # -- the map ------------------------------------------------------------------------------

    def maybe_write_initial_map(self) -> None:
        """As the controller: the initial map once the expected shards have registered."""
        if not self.is_controller or self.shards_expected <= 0:
            return
        members = read_members(self.zk, self.paths.root)
        if len(members) < self.shards_expected or self.zk.exists(self.paths.slotmap):
            return
        ids = sorted(members, key=int)[: self.shards_expected]
        try:
            self.write_map(initial_map(ids), -1)
        except (NotController, ShardingError) as exc:
            log.warning("shard %s: the initial slot map was not written: %s", self.shard, exc)
            return
        log.info("shard %s wrote the initial slot map over shards %s", self.shard, ids)

    def write_map(self, new_map: SlotMap, expected_version: int) -> int:
        """Write ``new_map`` over the map at znode version ``expected_version`` (-1: none
        yet), only while this shard is the controller; its new znode version. NotController
        when the controller epoch moved on (nothing is written), ShardingError when the map
        changed meanwhile."""
        epoch_version = self.epoch_version
        if epoch_version is None:
            raise NotController(f"shard {self.shard} is not the controller")
        tx = self.zk.transaction()
        tx.check(self.paths.controller_epoch, epoch_version)
        if expected_version < 0:
            tx.create(self.paths.slotmap, new_map.encode())
        else:
            tx.set_data(self.paths.slotmap, new_map.encode(), version=expected_version)
        results: list[Any] = tx.commit()
        if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
            self.epoch_version = None
            log.warning("shard %s: deposed as controller (controller epoch moved on): the "
                        "slot map was not written", self.shard)
            raise NotController(
                f"shard {self.shard} is no longer the controller (controller epoch "
                f"{self.controller_epoch} was superseded): nothing written")
        if isinstance(results[1], Exception):
            raise ShardingError(f"the slot map changed meanwhile ({type(results[1]).__name__})"
                                "; nothing written")
        return 0 if expected_version < 0 else expected_version + 1

    def _on_map_data(self, data: bytes | None, stat: Any) -> None:
        if data is None or stat is None:
            return
        try:
            slot_map = SlotMap.decode(data)
        except ShardingError as exc:  # refused whole: the map we hold stays
            log.error("the slot map in ZooKeeper is refused: %s", exc)
            return
        self.on_map(slot_map, stat.version)

    def _on_members_change(self, children: list[str]) -> None:
        self._spawn(self._members_changed)

    def _members_changed(self) -> None:
        self.on_members(read_members(self.zk, self.paths.root))
        self.maybe_write_initial_map()
