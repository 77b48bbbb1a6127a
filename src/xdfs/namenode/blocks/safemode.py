"""Safe mode (pure core): while on, the namespace is read-only.

Three causes, any keeps it on:

* an operator (``admin -safemode enter``; ``leave`` ends every cause);
* low disk space (HDFS's NameNodeResourceChecker): a name dir with less free space than
  ``namenode.resource_free_bytes_min``, as the NameNode reads it every
  ``namenode.resource_check_interval_s``; it ends by itself once every dir has the space
  again (an operator's ``leave`` ends it too, until the next reading finds the space low);
* startup with blocks in the namespace: as HDFS, the NameNode waits until the fraction of
  blocks with at least ``min_replication`` reported good replicas reaches
  ``safe_mode_threshold`` and ``safe_mode_min_datanodes`` DataNodes are live, then stays
  ``safe_mode_extension_s`` more (so the rest of the reports arrive before the replication
  monitor starts copying blocks that are merely unreported), then leaves by itself. Falling
  below the threshold during the extension starts the wait again.

Writes fail with :class:`~xdfs.errors.SafeModeError` naming the reason. Pure: the block
manager passes the counts and the time in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from xdfs.config import NameNodeConfig
from xdfs.errors import SafeModeError

MANUAL_REASON = "safe mode was turned on by an administrator; `admin -safemode leave` ends it"


class SafeMode:
    def __init__(
        self,
        *,
        threshold: float = 0.0,
        extension_s: float = 0.0,
        min_datanodes: int = 0,
        min_replication: int = 1,
    ) -> None:
        self.threshold = threshold
        self.extension_s = extension_s
        self.min_datanodes = min_datanodes
        self.min_replication = min_replication
        self.manual = False
        self.startup = False
        self.startup_reason = ""
        self.reached_s: float | None = None  # when the threshold was last reached
        self.resources_reason = ""  # set while a name dir is low on space

    @classmethod
    def from_config(cls, config: NameNodeConfig) -> SafeMode:
        return cls(
            threshold=config.safe_mode_threshold,
            extension_s=config.safe_mode_extension_s,
            min_datanodes=config.safe_mode_min_datanodes,
            min_replication=config.min_replication,
        )

    @property
    def on(self) -> bool:
        return self.manual or self.startup or bool(self.resources_reason)

    @property
    def reason(self) -> str:
        reasons = [
            MANUAL_REASON if self.manual else "", self.resources_reason,
            self.startup_reason if self.startup else "",
        ]
        return "; ".join(reason for reason in reasons if reason)

    def enter(self) -> None:
        self.manual = True

    def leave(self) -> None:
        self.manual = False
        self.startup = False
        self.startup_reason = ""
        self.reached_s = None
        self.resources_reason = ""

    def resources_checked(self, free_bytes: Mapping[str, int], minimum: int) -> str | None:
        """Feed the free space of every name dir (path -> bytes); returns a message when the
        low-space cause starts or ends now."""
        low = low_name_dirs(free_bytes, minimum)
        was_low = bool(self.resources_reason)
        if low:
            self.resources_reason = (
                "low disk space: "
                + ", ".join(f"{path} has {free_bytes[path]} bytes free" for path in low)
                + f", below namenode.resource_free_bytes_min ({minimum}); safe mode ends by "
                "itself once there is space again"
            )
            return None if was_low else f"entering safe mode: {self.resources_reason}"
        self.resources_reason = ""
        if was_low:
            return f"leaving low-space safe mode: every name dir has {minimum} bytes free"
        return None

    def wait_for_blocks(self) -> bool:
        """Startup with blocks: on until enough are reported. False (stays off) when the
        configuration asks for nothing (threshold 0 and no DataNode minimum), as HDFS."""
        self.startup = self.threshold > 0 or self.min_datanodes > 0
        return self.startup

    def update(
        self, safe_blocks: int, total_blocks: int, live_datanodes: int, now_s: float
    ) -> str | None:
        """Feed the current counts; returns a message when startup safe mode ends now."""
        if not self.startup:
            return None
        needed = math.ceil(round(self.threshold * total_blocks, 6))
        counts = (
            f"{safe_blocks} of {total_blocks} blocks have {self.min_replication} replica(s) "
            f"(need {self.threshold * 100:g}%); {live_datanodes} live DataNode(s)"
        )
        if self.min_datanodes:
            counts += f" (need {self.min_datanodes})"
        if safe_blocks < needed or live_datanodes < self.min_datanodes:
            self.reached_s = None
            self.startup_reason = f"waiting for block reports: {counts}"
            return None
        if self.reached_s is None:
            self.reached_s = now_s
        remaining_s = self.reached_s + self.extension_s - now_s
        if remaining_s > 0:
            self.startup_reason = (
                f"block threshold reached: {counts}; leaving safe mode in {remaining_s:.0f} s"
            )
            return None
        self.startup = False
        self.startup_reason = ""
        self.reached_s = None
        return f"leaving startup safe mode: {counts}"

    def check_writable(self, operation: str) -> None:
        if self.on:
            raise SafeModeError(f"cannot {operation}: NameNode is in safe mode ({self.reason})")


def low_name_dirs(free_bytes: Mapping[str, int], minimum: int) -> list[str]:
    """The name dirs (sorted) with less than ``minimum`` bytes free: the resource checker's
    whole decision, a function of the readings."""
    return sorted(path for path, free in free_bytes.items() if free < minimum)
