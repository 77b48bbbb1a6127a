"""What a failover controller does on each event (HDFS's ActiveStandbyElector and the
ZKFC's reactions to it), as a pure state machine: :meth:`Elector.on` takes an event and
returns the actions to carry out, in order. The driver (:mod:`xdfs.zkfc.server`) feeds it
ZooKeeper, health and RPC outcomes and executes the actions one at a time, in order.

The election: an ephemeral lock znode holding the winner's identity, and a persistent
breadcrumb naming the last NameNode made active.

* A controller is *in* the election only while its NameNode is healthy, its ZooKeeper
  session is up, it has not ceded (graceful failover) and it is not backing off after a
  failed activation. Otherwise it leaves (deletes its lock if it holds it).
* Winning the lock: when the breadcrumb names another NameNode, that one may still act as
  active, so it is fenced first (asked to go standby; the configured fencing methods when
  it does not). Then the breadcrumb is rewritten (only while the lock is still ours) and
  the local NameNode told ``transition_to_active``. A failed fence or activation gives the
  lock up (the breadcrumb, naming us after an activation attempt, makes the next winner
  fence us) and stays out for ``retry_after_failure_s``.
* Losing: the lock held by another -> local NameNode to standby. Our NameNode unhealthy
  while active -> leave, keeping the breadcrumb (the next winner fences it), and ask it
  to step down. Session lost -> the lock is gone: standby. Connection suspended: nothing
  at first (the session may survive, HDFS's "neutral mode"), but after a whole session
  timeout without reconnecting the session is as good as expired on the servers, another
  controller may have won: standby. This bounds how long a cut-off active keeps acting by
  itself; the journal epoch is still the fence that always holds.
* Ceding (the old active's side of a graceful failover): standby, leave the election, and
  delete the breadcrumb when the NameNode did step down (so the target does not fence
  it); rejoin after the cede duration.
* The NameNode's own state is checked too: reported active while we do not hold the lock
  -> standby; reported not active while we are active (it restarted, or was fenced by the
  journal) -> leave and back off.

Results of actions come back as events carrying the attempt number they belong to; a
result of an attempt given up meanwhile is ignored (a lock won by a stale attempt while
idle is released). ``tag`` counts the transitions asked of the local NameNode: the driver
stamps each service-state probe with it, so a probe answered before a transition is not
mistaken for a NameNode that changed its mind.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from xdfs.protocol.ha import STATE_ACTIVE
from xdfs.protocol.zkfc import ControllerIdentity
from xdfs.zkfc.health import Health


class Role(Enum):
    IDLE = "idle"  # not in the election
    JOINING = "joining"  # asking ZooKeeper for the lock
    STANDBY = "standby"  # in the election, another holds the lock
    BECOMING_ACTIVE = "becoming_active"  # holds the lock: fencing, then activating
    ACTIVE = "active"  # holds the lock, the local NameNode is active


class Zk(Enum):
    DISCONNECTED = "disconnected"  # no session (not yet, or lost)
    CONNECTED = "connected"
    SUSPENDED = "suspended"  # connection lost, the session may live on


HOLDING = (Role.BECOMING_ACTIVE, Role.ACTIVE)


# --- events ------------------------------------------------------------------------------


@dataclass(frozen=True)
class HealthChanged:
    health: Health


@dataclass(frozen=True)
class ServiceStateSeen:
    state: str  # the local NameNode's get_service_state
    tag: int  # Elector.tag when the probe was sent


@dataclass(frozen=True)
class ZkConnected:
    new_session: bool


@dataclass(frozen=True)
class ZkSuspended:
    pass


@dataclass(frozen=True)
class SuspendTimedOut:
    generation: int


@dataclass(frozen=True)
class ZkSessionLost:
    pass


@dataclass(frozen=True)
class LockWon:
    attempt: int
    breadcrumb: ControllerIdentity | None  # the last active, as the breadcrumb says


@dataclass(frozen=True)
class LockHeld:
    attempt: int
    holder: ControllerIdentity | None  # None: the lock's data is not an identity


@dataclass(frozen=True)
class JoinFailed:
    attempt: int
    error: str


@dataclass(frozen=True)
class LockChanged:
    """The watch on the lock fired (deleted, or rewritten)."""


@dataclass(frozen=True)
class FenceDone:
    attempt: int
    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class ActivationDone:
    attempt: int
    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class CedeRequested:
    duration_s: float  # <= 0: end a cede now


@dataclass(frozen=True)
class CedeEnded:
    generation: int


@dataclass(frozen=True)
class RetryDue:
    generation: int


Event = (HealthChanged | ServiceStateSeen | ZkConnected | ZkSuspended | SuspendTimedOut
         | ZkSessionLost | LockWon | LockHeld | JoinFailed | LockChanged | FenceDone
         | ActivationDone | CedeRequested | CedeEnded | RetryDue)


# --- actions -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Join:
    """Create the lock (or find who holds it, watching it); answer LockWon (with the
    breadcrumb), LockHeld or JoinFailed for ``attempt``."""

    attempt: int


@dataclass(frozen=True)
class Quit:
    """Delete the lock if this session holds it (and the breadcrumb, when asked and it
    names us)."""

    delete_breadcrumb: bool = False


@dataclass(frozen=True)
class Fence:
    """Make ``target`` stop acting as active; answer FenceDone."""

    attempt: int
    target: ControllerIdentity


@dataclass(frozen=True)
class Activate:
    """Write the breadcrumb (only while holding the lock), then transition_to_active on
    the local NameNode; answer ActivationDone."""

    attempt: int


@dataclass(frozen=True)
class Standby:
    """transition_to_standby on the local NameNode (best effort, bounded)."""


@dataclass(frozen=True)
class Cede:
    """Standby, then Quit deleting the breadcrumb only if the NameNode did step down."""


@dataclass(frozen=True)
class Register:
    """(Re)write this controller's registration znode (a new session lost the old)."""


@dataclass(frozen=True)
class Schedule:
    """Feed ``event`` back after ``delay_s``."""

    event: Event
    delay_s: float


Action = Join | Quit | Fence | Activate | Standby | Cede | Register | Schedule


class Elector:
    def __init__(self, identity: ControllerIdentity, *, session_timeout_s: float,
                 retry_after_failure_s: float) -> None:
        self.identity = identity
        self.session_timeout_s = session_timeout_s
        self.retry_after_failure_s = retry_after_failure_s
        self.role = Role.IDLE
        self.health = Health.INITIALIZING
        self.zk = Zk.DISCONNECTED
        self.ceding = False
        self.backing_off = False
        self.active: ControllerIdentity | None = None  # the lock holder as last seen
        self.attempt = 0  # the current join/activation attempt; older results are stale
        self.tag = 0  # transitions asked of the local NameNode (see the module doc)
        self.last_error = ""
        self._suspensions = 0
        self._cedes = 0
        self._retries = 0

    @property
    def eligible(self) -> bool:
        """May be in the election now."""
        return (self.health is Health.HEALTHY and self.zk is Zk.CONNECTED
                and not self.ceding and not self.backing_off)

    def on(self, event: Event) -> list[Action]:
        handler = getattr(self, f"_on_{type(event).__name__}")
        actions: list[Action] = handler(event)
        return actions + self._reconcile()

    # --- the generic rule: join when eligible, leave when not ---------------------------

    def _reconcile(self) -> list[Action]:
        if self.role is Role.IDLE:
            if not self.eligible:
                return []
            return [self._join()]
        wants_out = self.health is not Health.HEALTHY or self.ceding or self.backing_off
        if not wants_out:
            return []
        if self.role in HOLDING:
            # only an unhealthy NameNode gets here (ceding and backing off leave directly)
            self.last_error = f"local NameNode is {self.health.value}"
            return [*self._drop(), Quit(delete_breadcrumb=False), self._standby()]
        self._drop()
        return [Quit(delete_breadcrumb=False)]

    def _join(self) -> Join:
        self.attempt += 1
        self.role = Role.JOINING
        return Join(self.attempt)

    def _drop(self) -> list[Action]:
        """Leave whatever role: IDLE, and results of the current attempt become stale."""
        self.attempt += 1
        self.role = Role.IDLE
        return []

    def _standby(self) -> Standby:
        self.tag += 1
        return Standby()

    def _back_off(self, error: str) -> list[Action]:
        self.last_error = error
        self._drop()
        self.backing_off = True
        self._retries += 1
        return [Schedule(RetryDue(self._retries), self.retry_after_failure_s)]

    # --- health and the NameNode's own state ---------------------------------------------

    def _on_HealthChanged(self, event: HealthChanged) -> list[Action]:
        self.health = event.health
        return []

    def _on_ServiceStateSeen(self, event: ServiceStateSeen) -> list[Action]:
        if event.tag != self.tag:
            return []  # sent before the last transition we asked for
        if event.state == STATE_ACTIVE and self.role not in HOLDING:
            return [self._standby()]
        if event.state != STATE_ACTIVE and self.role is Role.ACTIVE:
            return [Quit(delete_breadcrumb=False),
                    *self._back_off(f"local NameNode left the active state ({event.state})")]
        return []

    # --- ZooKeeper session ---------------------------------------------------------------

    def _on_ZkConnected(self, event: ZkConnected) -> list[Action]:
        self.zk = Zk.CONNECTED
        actions: list[Action] = [Register()] if event.new_session else []
        if self.role is Role.STANDBY:
            # the same session came back: look at the lock again (and watch it anew)
            actions.append(self._join())
        return actions

    def _on_ZkSuspended(self, event: ZkSuspended) -> list[Action]:
        self.zk = Zk.SUSPENDED
        self._suspensions += 1
        return [Schedule(SuspendTimedOut(self._suspensions), self.session_timeout_s)]

    def _on_SuspendTimedOut(self, event: SuspendTimedOut) -> list[Action]:
        if event.generation != self._suspensions or self.zk is not Zk.SUSPENDED:
            return []
        if self.role in HOLDING:
            self.last_error = "cut off from ZooKeeper for a whole session timeout"
            self._drop()
            return [self._standby(), Quit(delete_breadcrumb=False)]
        self._drop()
        return []

    def _on_ZkSessionLost(self, event: ZkSessionLost) -> list[Action]:
        self.zk = Zk.DISCONNECTED
        holding = self.role in HOLDING
        self._drop()
        if holding:
            self.last_error = "ZooKeeper session lost while active"
            return [self._standby()]
        return []

    # --- the lock ------------------------------------------------------------------------

    def _current(self, attempt: int, role: Role) -> bool:
        return attempt == self.attempt and self.role is role

    def _on_LockWon(self, event: LockWon) -> list[Action]:
        if not self._current(event.attempt, Role.JOINING):
            # A stale win: while idle nobody will use it, so release it. Otherwise a newer
            # join is under way (it will find the lock ours) or already holds it.
            return [Quit(delete_breadcrumb=False)] if self.role is Role.IDLE else []
        self.role = Role.BECOMING_ACTIVE
        self.active = self.identity
        old = event.breadcrumb
        if old is not None and old.id != self.identity.id:
            return [Fence(self.attempt, old)]
        self.tag += 1
        return [Activate(self.attempt)]

    def _on_LockHeld(self, event: LockHeld) -> list[Action]:
        if not self._current(event.attempt, Role.JOINING):
            return []
        self.role = Role.STANDBY
        self.active = event.holder
        return [self._standby()]

    def _on_JoinFailed(self, event: JoinFailed) -> list[Action]:
        if not self._current(event.attempt, Role.JOINING):
            return []
        return self._back_off(f"joining the election failed: {event.error}")

    def _on_LockChanged(self, event: LockChanged) -> list[Action]:
        if self.role is Role.STANDBY:
            return [self._join()]
        return []

    # --- becoming active -----------------------------------------------------------------

    def _on_FenceDone(self, event: FenceDone) -> list[Action]:
        if not self._current(event.attempt, Role.BECOMING_ACTIVE):
            return []
        if not event.ok:
            return [Quit(delete_breadcrumb=False),
                    *self._back_off(f"could not fence the old active: {event.detail}")]
        self.tag += 1
        return [Activate(self.attempt)]

    def _on_ActivationDone(self, event: ActivationDone) -> list[Action]:
        if not self._current(event.attempt, Role.BECOMING_ACTIVE):
            return []
        if event.ok:
            self.role = Role.ACTIVE
            self.last_error = ""
            return []
        actions = self._back_off(f"could not make the local NameNode active: {event.detail}")
        return [Quit(delete_breadcrumb=False), self._standby(), *actions]

    # --- ceding (graceful failover) and backing off ---------------------------------------

    def _on_CedeRequested(self, event: CedeRequested) -> list[Action]:
        self._cedes += 1
        if event.duration_s <= 0:
            self.ceding = False
            return []
        self.ceding = True
        actions: list[Action] = [Schedule(CedeEnded(self._cedes), event.duration_s)]
        if self.role in HOLDING:
            self.tag += 1
            self._drop()
            return [Cede(), *actions]
        if self.role is not Role.IDLE:
            self._drop()
            return [Quit(delete_breadcrumb=False), *actions]
        return actions

    def _on_CedeEnded(self, event: CedeEnded) -> list[Action]:
        if event.generation == self._cedes:
            self.ceding = False
        return []

    def _on_RetryDue(self, event: RetryDue) -> list[Action]:
        if event.generation == self._retries:
            self.backing_off = False
        return []
