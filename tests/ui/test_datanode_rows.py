"""The DataNodes page shows each node's admin state (with its progress) and rack, escaped."""

from __future__ import annotations

from xdfs.namenode.webui import _datanode_row
from xdfs.protocol.namenode import DataNodeInfo


def info(**fields: object) -> DataNodeInfo:
    base: dict[str, object] = dict(
        node_id="n1", address="127.0.0.1:1", state="live", capacity_bytes=100,
        used_bytes=10, free_bytes=90, blocks=3, last_contact_s=0.5,
        transfers_in_progress=0, registered_ms=0)
    return DataNodeInfo(**{**base, **fields})  # type: ignore[arg-type]


def test_admin_state_progress_and_rack_are_shown() -> None:
    row = _datanode_row(info(admin_state="decommissioning", decommission_blocks_left=7,
                             rack="/r<1>"))
    assert row[2] == "decommissioning (7 blocks left)"
    assert row[3] == "/r&lt;1&gt;"
    assert _datanode_row(info())[2] == "normal"
    maintenance = _datanode_row(info(admin_state="in_maintenance",
                                     maintenance_expiry_ms=1_700_000_000_000))
    assert maintenance[2].startswith("in_maintenance until 2023-11-14")
    assert _datanode_row(info(admin_state="decommissioned", state="dead"))[2] == "decommissioned"
