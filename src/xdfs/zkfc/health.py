"""The health monitor's rules (HDFS's HealthMonitor), pure: the driver calls the local
NameNode's ``monitor_health`` every ``ha.health_check_interval_s`` with a deadline of
``ha.health_check_timeout_s`` and feeds each outcome here.

* An answer saying healthy: HEALTHY, and the failure count starts again.
* An answer saying unhealthy: UNHEALTHY at once (the NameNode knows best, e.g. its disks
  are full or it lost its journal quorum).
* No answer in time (refused, reset, timed out: dead or paused): after
  ``failures_max`` consecutive ones, NOT_RESPONDING; one failure alone may be a blip.
"""

from __future__ import annotations

from enum import Enum

from xdfs.protocol.ha import HealthReport


class Health(Enum):
    INITIALIZING = "initializing"  # no verdict yet
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"  # it answered that it is not healthy
    NOT_RESPONDING = "not_responding"  # failures_max checks in a row got no answer


class HealthMonitor:
    def __init__(self, failures_max: int) -> None:
        assert failures_max >= 1
        self.failures_max = failures_max
        self.state = Health.INITIALIZING
        self.failures = 0  # consecutive checks without an answer
        self.reason = ""  # why the state is not HEALTHY

    def answered(self, report: HealthReport) -> Health | None:
        """The NameNode answered; the new state when it changed, else None."""
        self.failures = 0
        if report.healthy:
            self.reason = ""
            return self._become(Health.HEALTHY)
        self.reason = f"{report.reason}: {report.detail}" if report.detail else report.reason
        return self._become(Health.UNHEALTHY)

    def failed(self, error: str) -> Health | None:
        """A check got no answer in time; the new state when it changed, else None."""
        self.failures += 1
        if self.failures < self.failures_max:
            return None
        self.reason = f"{self.failures} health checks in a row failed, the last: {error}"
        return self._become(Health.NOT_RESPONDING)

    def _become(self, state: Health) -> Health | None:
        if state is self.state:
            return None
        self.state = state
        return state
