"""Leave a paused active early: ask the other servers who is active while a call waits.

A NameNode paused by SIGSTOP (or a long GC pause) keeps its TCP connections open and answers
nothing; the failover controllers replace it within seconds, yet a client waiting for its
answer would wait for the whole call timeout. So when a call to one address of an HA list
has gone unanswered for ``after_s``, :class:`RpcClient` asks every address for its service
state (one short call each, ``after_s`` deadline), and repeats that every ``after_s`` while
the call still waits. When another server says it is active under a newer epoch than any
this client has seen, the waiting call is abandoned and repeated there (with the same call
number: the retry cache answers an at-most-once call that had run with its first outcome).

This module is the pure decision (:func:`choose_new_active`) plus the small state a client
keeps (:class:`FailoverProbe`); the asyncio side is in :mod:`xdfs.rpc.client`. The RPC
layer does not know the HA protocol: the caller supplies ``ask``, a coroutine that returns
a server's state and epoch over a connection (``xdfs.client.failover.namenode_probe``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xdfs.rpc.client_connection import ClientConnection

#: The state an active server reports (HDFS's HAServiceState.ACTIVE).
ACTIVE = "active"


@dataclass(frozen=True, slots=True)
class ServiceState:
    """What one server answered: its state and the writer epoch it knows."""

    state: str
    epoch: int

    @property
    def active(self) -> bool:
        return self.state == ACTIVE


def choose_new_active(
    stalled: int, answers: Mapping[int, ServiceState], seen_epoch: int
) -> int | None:
    """The index of the address to repeat a call on, or None to keep waiting.

    ``answers``: the servers that answered the probe in time, by address index (a paused
    one is simply absent). ``seen_epoch``: the highest epoch this client has been told
    (:meth:`FailoverProbe.note`). Another server qualifies when it says active under an epoch above
    ``seen_epoch`` and above the stalled server's own claim: a stalled server that still
    answers "active" with the newest epoch is only slow, and an active with an old epoch
    is one that has not learned it was replaced."""
    own = answers.get(stalled)
    floor = max(seen_epoch, own.epoch if own is not None and own.active else 0)
    candidates = [(status.epoch, index) for index, status in answers.items()
                  if index != stalled and status.active and status.epoch > floor]
    return max(candidates)[1] if candidates else None


@dataclass
class FailoverProbe:
    """``after_s``: how long a call waits before the others are asked (and between two
    rounds of asking; also the deadline of one ask). ``ask``: one server's state."""

    after_s: float
    ask: Callable[[ClientConnection, float], Awaitable[ServiceState]]
    #: The highest epoch any server told this client (a probe's answers). A standby's is
    #: the epoch of the active whose edits it tails, and every promotion takes a higher
    #: one: only a NameNode made active since can say "active" above it.
    seen_epoch: int = field(default=0)

    def note(self, answers: Mapping[int, ServiceState]) -> None:
        """Remember the highest epoch among ``answers`` (after deciding on them)."""
        for status in answers.values():
            self.seen_epoch = max(self.seen_epoch, status.epoch)
