"""WrongShard carries slot, owner and epoch across the wire in its message."""

from __future__ import annotations

from xdfs.errors import ShardingError, WrongShard, error_from_code


def test_wrong_shard_round_trips() -> None:
    sent = WrongShard.of(42, "s2", 7)
    got = error_from_code(sent.code, sent.message)
    assert isinstance(got, WrongShard) and isinstance(got, ShardingError)
    assert (got.slot, got.owner, got.epoch) == (42, "s2", 7)
    assert got.retriable


def test_wrong_shard_without_the_fields() -> None:
    odd = WrongShard("msg")
    assert (odd.slot, odd.owner, odd.epoch) == (None, None, None)
