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


class HaStatus(msgspec.Struct):
    role: str  # "active" (serves clients) or "backup" (follows one)
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
