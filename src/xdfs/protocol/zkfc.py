"""``zkfc``: the failover controller's own service (HDFS's ZKFCProtocol), served by every
``xdfs zkfc`` and called by other controllers and ``xdfs admin -failover``. Callers log in
as ZKFC_USER with the controllers' shared secret (``ha.zkfc_secret_file``).

:class:`ControllerIdentity` is also what a controller writes, as JSON, into its znodes
(the election lock, the breadcrumb naming the last active, its registration).
"""

from __future__ import annotations

import msgspec

from xdfs.rpc.messages import Empty
from xdfs.rpc.service import Method, Service

#: The user callers of a controller log in as (with the shared secret as password).
ZKFC_USER = "zkfc"


class ControllerIdentity(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    nameservice: str
    id: str  # the NameNode id (nn1)
    namenode: str  # host:port of the NameNode's RPC server
    zkfc: str  # host:port of this controller's RPC server


class ZkfcStatus(msgspec.Struct):
    identity: ControllerIdentity
    health: str  # the health monitor's state (initializing, healthy, unhealthy, ...)
    role: str  # the elector's role (idle, joining, standby, becoming_active, active)
    zookeeper: str  # disconnected, connected, suspended
    active: ControllerIdentity | None  # the lock holder as last seen (None: nobody)
    ceded: bool  # out of the election for a while (a graceful failover asked it)
    last_error: str = ""


class CedeRequest(msgspec.Struct, forbid_unknown_fields=True):
    duration_s: float  # stay out of the election this long; <= 0: rejoin now


class FailoverResponse(msgspec.Struct):
    old_active: str  # NameNode id active before ('' if none)
    new_active: str  # NameNode id active now
    took_s: float


ZKFC_STATUS = Method(
    "zkfc_status", Empty, ZkfcStatus, idempotent=True,
    doc="The controller's health, election role, ZooKeeper state and the active it knows.",
)
CEDE_ACTIVE = Method(
    "cede_active", CedeRequest, Empty, idempotent=True,
    doc="Make the local NameNode standby and leave the election for duration_s.",
)
GRACEFUL_FAILOVER = Method(
    "graceful_failover", Empty, FailoverResponse, idempotent=False,
    doc="Make this controller's NameNode active: the current active's controller cedes, "
        "this one wins the election.",
)
ZKFC_SERVICE = Service("zkfc", (ZKFC_STATUS, CEDE_ACTIVE, GRACEFUL_FAILOVER))
