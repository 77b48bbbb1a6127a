"""``ha``: where a NameNode-capable server stands (served by NameNodes and BackupNodes).

``ha_status`` may be called without credentials (like ``ping``): a NameNode asks its
configured peers before it starts serving (``namenode.peers``), when it holds no
credentials of theirs. It tells nothing a client could not see in ``server_info`` and
``admin -report`` except the epoch and the txid.
"""

from __future__ import annotations

import msgspec

from xdfs.rpc.messages import Empty
from xdfs.rpc.service import Method, Service

ROLE_ACTIVE = "active"
ROLE_BACKUP = "backup"
ROLE_STANDBY = "standby"  # an HA NameNode tailing the quorum journal


class HaStatus(msgspec.Struct):
    role: str  # "active" (serves clients), "backup" or "standby" (follows one)
    epoch: int  # the namespace's active epoch (raised by every promotion)
    last_txid: int  # the last txid durable on this server
    cluster_id: str
    namespace_id: int
    pid: int  # process id (for operators and fencing scripts)


HA_STATUS = Method(
    "ha_status", Empty, HaStatus, idempotent=True,
    doc="Role, active epoch and last durable txid (no credentials needed).",
)
HA_SERVICE = Service("ha", (HA_STATUS,))


# --- ha.service: HDFS's HAServiceProtocol, served by NameNodes, called by xdfs zkfc and
# xdfs admin. A separate service from ``ha`` so a server adds it once it implements it.

#: NameNode service states (HDFS's HAServiceState).
STATE_INITIALIZING = "initializing"  # loading, not yet serving as either
STATE_STANDBY = "standby"  # tails the journal, answers NotActive to clients
STATE_ACTIVE = "active"  # writes the journal, serves clients
STATE_STOPPING = "stopping"  # shutting down
SERVICE_STATES = (STATE_INITIALIZING, STATE_STANDBY, STATE_ACTIVE, STATE_STOPPING)

#: Why a NameNode reports itself unhealthy (``HealthReport.reason``).
UNHEALTHY_RESOURCES = "resources_low"  # a name dir below namenode.resource_free_bytes_min
UNHEALTHY_JOURNAL = "journal_unavailable"  # no majority of JournalNodes reachable
UNHEALTHY_STARTING = "starting"  # still loading its namespace
UNHEALTHY_STOPPING = "stopping"  # shutting down
UNHEALTHY_FAILED = "failed"  # a fatal error stopped its services (detail says which)
UNHEALTHY_REASONS = (UNHEALTHY_RESOURCES, UNHEALTHY_JOURNAL, UNHEALTHY_STARTING,
                     UNHEALTHY_STOPPING, UNHEALTHY_FAILED)

#: Who asks for a transition (HDFS's RequestSource). A NameNode with
#: ``ha.automatic_failover`` set refuses SOURCE_USER with AccessDenied.
SOURCE_ZKFC = "zkfc"  # a failover controller
SOURCE_USER = "user"  # xdfs admin -transitionToActive/-transitionToStandby/-failover
SOURCE_USER_FORCED = "user_forced"  # the same with --forcemanual
TRANSITION_SOURCES = (SOURCE_ZKFC, SOURCE_USER, SOURCE_USER_FORCED)


class ServiceStatus(msgspec.Struct):
    state: str  # one of SERVICE_STATES
    epoch: int = 0  # the writer epoch this NameNode knows (taken when it became active)
    last_txid: int = 0  # the last txid applied to its namespace
    ready_to_become_active: bool = True  # False: transition_to_active would fail now
    not_ready_reason: str = ""  # why not, for operators


class HealthReport(msgspec.Struct):
    healthy: bool
    reason: str = ""  # one of UNHEALTHY_REASONS when not healthy
    detail: str = ""  # for the log


class TransitionRequest(msgspec.Struct, forbid_unknown_fields=True):
    source: str = SOURCE_USER  # one of TRANSITION_SOURCES


GET_SERVICE_STATE = Method(
    "get_service_state", Empty, ServiceStatus, idempotent=True,
    doc="State (initializing/standby/active/stopping), epoch, last txid, readiness.",
)
MONITOR_HEALTH = Method(
    "monitor_health", Empty, HealthReport, idempotent=True,
    doc="Healthy, or why not (a typed reason); answered at once, without I/O.",
)
TRANSITION_TO_ACTIVE = Method(
    "transition_to_active", TransitionRequest, ServiceStatus, idempotent=True,
    doc="Take a new journal epoch (fencing any older writer), catch up, serve; no-op when "
        "already active.",
)
TRANSITION_TO_STANDBY = Method(
    "transition_to_standby", TransitionRequest, ServiceStatus, idempotent=True,
    doc="Stop writing and serving mutations, tail the journal; no-op when already standby.",
)
HA_SERVICE_PROTOCOL = Service(
    "ha.service",
    (GET_SERVICE_STATE, MONITOR_HEALTH, TRANSITION_TO_ACTIVE, TRANSITION_TO_STANDBY),
)
