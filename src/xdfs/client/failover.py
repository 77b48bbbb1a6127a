"""The NameNode client's failover probe: how it asks a NameNode for its HA state
(``get_service_state`` of ``ha.service``, answered from memory by an active or a standby).
See :mod:`xdfs.rpc.failover_probe` for what the RPC client does with the answers."""

from __future__ import annotations

from xdfs.config import ClientConfig
from xdfs.protocol.ha import GET_SERVICE_STATE
from xdfs.rpc.client_connection import ClientConnection
from xdfs.rpc.failover_probe import FailoverProbe, ServiceState
from xdfs.rpc.messages import Empty


async def ask_service_state(conn: ClientConnection, timeout_s: float) -> ServiceState:
    status = await conn.call(GET_SERVICE_STATE, Empty(), timeout_s)
    return ServiceState(status.state, status.epoch)


def namenode_probe(config: ClientConfig) -> FailoverProbe | None:
    """The probe of a client of an HA pair (None when client.failover_probe_after_s is 0)."""
    if not config.failover_probe_after_s:
        return None
    return FailoverProbe(config.failover_probe_after_s, ask_service_state)
