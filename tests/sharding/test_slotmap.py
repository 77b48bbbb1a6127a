"""The slot map: validation, encoding, owners, and the planner's fewest moves."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xdfs.errors import ShardingError, SlotMapInvalid
from xdfs.sharding.slotmap import (
    SlotMap,
    SlotMove,
    SlotRange,
    initial_map,
    plan_rebalance,
)
from xdfs.sharding.slots import SLOT_COUNT


def test_initial_map_is_even_and_contiguous() -> None:
    m = initial_map(["a", "b", "c"])
    assert m.epoch == 1
    assert m.ranges == (SlotRange(0, 5461, "a"), SlotRange(5462, 10922, "b"),
                        SlotRange(10923, 16383, "c"))
    assert m.owner(0) == "a" and m.owner(5462) == "b" and m.owner(16383) == "c"
    assert m.counts() == {"a": 5462, "b": 5461, "c": 5461}


def test_encode_decode_round_trip() -> None:
    m = initial_map(["s1", "s2"]).with_moves([SlotMove(10, 20, "s1", "s2")])
    again = SlotMap.decode(m.encode())
    assert again == m
    assert again.owner(15) == "s2" and again.epoch == 2


@pytest.mark.parametrize("ranges", [
    [],
    [[0, 100, "a"]],  # does not reach the last slot
    [[1, 16383, "a"]],  # does not start at 0
    [[0, 100, "a"], [100, 16383, "b"]],  # overlap
    [[0, 100, "a"], [102, 16383, "b"]],  # gap
    [[0, 16384, "a"]],  # past the end
    [[100, 16383, "b"], [0, 99, "a"]],  # unsorted
    [[0, 16383, ""]],  # no shard
    [[50, 10, "a"]],
])
def test_malformed_maps_are_refused(ranges: list[list[object]]) -> None:
    import msgspec

    data = msgspec.json.encode({"epoch": 3, "ranges": ranges})
    with pytest.raises(SlotMapInvalid):
        SlotMap.decode(data)


@pytest.mark.parametrize("data", [b"", b"{", b'{"epoch": -1, "ranges": [[0, 16383, "a"]]}',
                                  b'{"epoch": "1", "ranges": [[0, 16383, "a"]]}',
                                  b'{"ranges": [[0, 16383, "a"]]}', b'[1, 2]'])
def test_undecodable_maps_are_refused(data: bytes) -> None:
    with pytest.raises(SlotMapInvalid):
        SlotMap.decode(data)


def test_adjacent_ranges_of_one_shard_merge() -> None:
    m = SlotMap(4, [SlotRange(0, 9, "a"), SlotRange(10, SLOT_COUNT - 1, "a")])
    assert m.ranges == (SlotRange(0, SLOT_COUNT - 1, "a"),)


def test_with_moves_checks_the_source() -> None:
    m = initial_map(["a", "b"])
    with pytest.raises(ShardingError, match="owned by b"):
        m.with_moves([SlotMove(SLOT_COUNT - 1, SLOT_COUNT - 1, "a", "c")])
    with pytest.raises(ShardingError):
        m.owner(SLOT_COUNT)


def test_bad_shard_lists() -> None:
    for ids in ([], ["a", "a"], ["a", ""]):
        with pytest.raises(ShardingError):
            initial_map(ids)


def test_plan_for_a_join_moves_only_the_new_share() -> None:
    m = initial_map(["a", "b"])
    moves = plan_rebalance(m, ["a", "b", "c"])
    assert sum(mv.count for mv in moves) == 5461
    after = m.with_moves(moves)
    assert after.counts() == {"a": 5462, "b": 5461, "c": 5461}
    assert after.epoch == 2
    assert plan_rebalance(after, ["a", "b", "c"]) == []


def _min_moves(held: dict[str, int], ids: list[str]) -> int:
    """Brute force: the least surplus over every choice of which shards keep one more."""
    base, extra = divmod(SLOT_COUNT, len(ids))
    best = None
    for richer in itertools.combinations(ids, extra):
        targets = {s: base + (s in richer) for s in ids}
        moved = sum(max(0, c - targets.get(s, 0)) for s, c in held.items())
        best = moved if best is None else min(best, moved)
    assert best is not None
    return best


@st.composite
def maps_and_members(draw: st.DrawFn) -> tuple[SlotMap, list[str]]:
    universe = [f"s{i}" for i in range(7)]
    holders = draw(st.lists(st.sampled_from(universe), min_size=1, max_size=5, unique=True))
    cuts = sorted(draw(st.lists(st.integers(1, SLOT_COUNT - 1), max_size=12, unique=True)))
    bounds = [0, *cuts, SLOT_COUNT]
    owners = [draw(st.sampled_from(holders)) for _ in range(len(bounds) - 1)]
    ranges = [SlotRange(bounds[i], bounds[i + 1] - 1, owners[i]) for i in range(len(owners))]
    members = draw(st.lists(st.sampled_from(universe), min_size=1, max_size=6, unique=True))
    return SlotMap(draw(st.integers(0, 1000)), ranges), members


@settings(max_examples=300, deadline=None)
@given(maps_and_members())
def test_plan_rebalance_properties(case: tuple[SlotMap, list[str]]) -> None:
    m, members = case
    moves = plan_rebalance(m, members)
    after = m.with_moves(moves)
    counts = after.counts()
    even = SLOT_COUNT // len(members)
    assert set(counts) <= set(members)  # every leaving shard ends with none
    for shard in members:
        assert even <= counts.get(shard, 0) <= even + 1
    held = m.counts()
    moved = sum(mv.count for mv in moves)
    assert moved == _min_moves(held, members)
    # no slot moves twice, and each move's slots stay with their source before it
    slots = [s for mv in moves for s in range(mv.first, mv.last + 1)]
    assert len(slots) == len(set(slots))
    assert after.epoch == m.epoch + 1
    assert SlotMap.decode(after.encode()) == after
