"""Accounting of one call fanned out to several nodes (pure: answers in, a verdict out).

A :class:`QuorumCall` needs ``needed`` successes out of its nodes. It is *succeeded* as soon
as that many nodes answered ok, *hopeless* as soon as so many failed that the rest cannot
make it up, and *settled* when either holds or every node answered. The driver stops
waiting at the first of succeeded or hopeless (or its timeout); answers that arrive later
are still recorded, so a node that acknowledged late is not taken for failed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


def majority(count: int) -> int:
    """Smallest number of nodes that is more than half of ``count``."""
    assert count >= 1, count
    return count // 2 + 1


@dataclass
class QuorumCall(Generic[T]):
    nodes: tuple[str, ...]
    needed: int
    successes: dict[str, T] = field(default_factory=dict)
    failures: dict[str, BaseException] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert len(set(self.nodes)) == len(self.nodes), f"duplicate node in {self.nodes}"
        assert self.needed >= 0, self.needed

    @classmethod
    def of(cls, nodes: Iterable[str], needed: int) -> QuorumCall[T]:
        return cls(tuple(nodes), needed)

    def succeed(self, node: str, value: T) -> None:
        self._check_new(node)
        self.successes[node] = value

    def fail(self, node: str, error: BaseException) -> None:
        self._check_new(node)
        self.failures[node] = error

    def _check_new(self, node: str) -> None:
        assert node in self.nodes, f"{node} is not part of this call"
        assert node not in self.successes and node not in self.failures, f"{node} answered twice"

    @property
    def succeeded(self) -> bool:
        return len(self.successes) >= self.needed

    @property
    def hopeless(self) -> bool:
        return len(self.nodes) - len(self.failures) < self.needed

    @property
    def settled(self) -> bool:
        return self.succeeded or self.hopeless or self.pending == ()

    @property
    def pending(self) -> tuple[str, ...]:
        return tuple(n for n in self.nodes if n not in self.successes and n not in self.failures)

    def describe_failures(self) -> str:
        """One line naming every node that failed and why (for error messages)."""
        if not self.failures:
            return "no node failed"
        return "; ".join(f"{node}: {error}" for node, error in sorted(self.failures.items()))
