"""Safe mode: manual, and startup until enough blocks are reported (threshold + extension)."""

from __future__ import annotations

import pytest

from xdfs.errors import SafeModeError
from xdfs.namenode.blocks.safemode import MANUAL_REASON, SafeMode


def on(mode: SafeMode) -> bool:
    return mode.on  # a call, so that type checkers do not narrow it across updates


def startup(**options: float) -> SafeMode:
    mode = SafeMode(
        threshold=float(options.get("threshold", 0.999)),
        extension_s=float(options.get("extension_s", 30.0)),
        min_datanodes=int(options.get("min_datanodes", 0)),
        min_replication=int(options.get("min_replication", 1)),
    )
    assert mode.wait_for_blocks() is True
    return mode


def test_threshold_then_extension_then_off() -> None:
    mode = startup(extension_s=30.0)
    assert mode.update(12, 40, 2, now_s=100.0) is None
    assert on(mode)
    assert mode.reason == (
        "waiting for block reports: 12 of 40 blocks have 1 replica(s) (need 99.9%); "
        "2 live DataNode(s)"
    )
    with pytest.raises(SafeModeError, match="waiting for block reports: 12 of 40"):
        mode.check_writable("create")
    # 40 of 40 reached at t=110: 30 s more
    assert mode.update(40, 40, 3, now_s=110.0) is None
    assert on(mode) and mode.reason.startswith("block threshold reached: 40 of 40 blocks")
    assert mode.reason.endswith("leaving safe mode in 30 s")
    assert mode.update(40, 40, 3, now_s=139.0) is None
    assert on(mode)
    message = mode.update(40, 40, 3, now_s=140.0)
    assert message is not None and message.startswith("leaving startup safe mode: 40 of 40")
    assert not on(mode) and mode.reason == ""
    mode.check_writable("create")
    assert mode.update(0, 40, 0, now_s=200.0) is None  # over for good
    assert not on(mode)


def test_falling_below_the_threshold_restarts_the_wait() -> None:
    mode = startup(threshold=0.5, extension_s=10.0)
    assert mode.update(5, 10, 1, now_s=0.0) is None  # 50% reached
    assert mode.update(4, 10, 1, now_s=5.0) is None  # a node died
    assert mode.reason.startswith("waiting for block reports: 4 of 10")
    assert mode.update(5, 10, 1, now_s=6.0) is None
    assert mode.update(5, 10, 1, now_s=15.0) is None  # 9 s since reached again
    assert on(mode)
    assert mode.update(5, 10, 1, now_s=16.0) is not None
    assert not on(mode)


def test_threshold_is_a_fraction_rounded_up() -> None:
    mode = startup(threshold=0.999, extension_s=0.0)
    assert mode.update(999, 1000, 1, now_s=0.0) is not None  # exactly 99.9%
    mode = startup(threshold=0.999, extension_s=0.0)
    assert mode.update(39, 40, 1, now_s=0.0) is None  # 97.5% is not enough
    assert mode.update(40, 40, 1, now_s=0.0) is not None


def test_min_datanodes() -> None:
    mode = startup(threshold=0.0, extension_s=0.0, min_datanodes=2)
    assert mode.update(0, 0, 1, now_s=0.0) is None
    assert mode.reason.endswith("1 live DataNode(s) (need 2)")
    assert mode.update(0, 0, 2, now_s=0.0) is not None


def test_no_threshold_and_no_datanode_minimum_means_no_startup_safe_mode() -> None:
    mode = SafeMode(threshold=0.0, extension_s=30.0)
    assert mode.wait_for_blocks() is False
    assert not on(mode)
    assert mode.update(0, 10, 0, now_s=0.0) is None


def test_manual_enter_and_leave_ends_both_causes() -> None:
    mode = startup()
    mode.update(0, 10, 0, now_s=0.0)
    mode.enter()
    assert on(mode) and mode.reason.startswith(MANUAL_REASON)
    assert "waiting for block reports" in mode.reason  # every cause is named
    mode.leave()
    assert not on(mode) and not mode.startup
    mode.enter()
    with pytest.raises(SafeModeError, match="administrator"):
        mode.check_writable("mkdirs")
    mode.leave()
    mode.check_writable("mkdirs")


def test_low_disk_space_enters_and_leaves_by_itself() -> None:
    """Issue 17 item 12: the resource checker's decision is a function of the readings."""
    mode = SafeMode()
    minimum = 100
    assert mode.resources_checked({"/nn1": 500, "/nn2": 100}, minimum) is None
    assert not on(mode)
    entered = mode.resources_checked({"/nn1": 500, "/nn2": 99}, minimum)
    assert entered is not None and entered.startswith("entering safe mode: low disk space")
    assert on(mode) and "/nn2 has 99 bytes free" in mode.reason and "/nn1" not in mode.reason
    with pytest.raises(SafeModeError, match="low disk space"):
        mode.check_writable("create")
    assert mode.resources_checked({"/nn1": 10, "/nn2": 99}, minimum) is None  # still low
    assert "/nn1 has 10" in mode.reason
    left = mode.resources_checked({"/nn1": 100, "/nn2": 1000}, minimum)
    assert left is not None and left.startswith("leaving low-space safe mode")
    assert not on(mode)
    mode.check_writable("create")
    # an operator may leave while it is low; the next low reading enters again
    mode.resources_checked({"/nn1": 0}, minimum)
    mode.leave()
    assert not on(mode)
    assert mode.resources_checked({"/nn1": 0}, minimum) is not None and on(mode)
    # with another cause too, space coming back leaves only its own
    mode.enter()
    mode.resources_checked({"/nn1": 100}, minimum)
    assert on(mode) and mode.reason == MANUAL_REASON
