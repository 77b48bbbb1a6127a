"""The protocol reference must name every error code and every declared method."""

from __future__ import annotations

from pathlib import Path

from xdfs.errors import known_codes
from xdfs.protocol.backup import BACKUP_SERVICE, NAMENODE_BACKUP_PROTOCOL
from xdfs.protocol.datanode import DATANODE_PROTOCOL, DATANODE_SERVICE
from xdfs.protocol.ha import HA_SERVICE, HA_SERVICE_PROTOCOL
from xdfs.protocol.journal import JOURNAL_SERVICE
from xdfs.protocol.ledger import LEDGER_SERVICE
from xdfs.protocol.log import LOG_SERVICE
from xdfs.protocol.namenode import ADMIN_SERVICE, CLIENT_SERVICE
from xdfs.protocol.sharding import SHARDING_SERVICE
from xdfs.protocol.system import DIAGNOSTICS, SYSTEM
from xdfs.protocol.zkfc import ZKFC_SERVICE

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_protocol_doc_lists_every_error_code() -> None:
    text = (DOCS / "protocol.md").read_text()
    for code, cls in known_codes().items():
        assert f"| {code} | `{cls.__name__}` |" in text, f"{cls.__name__} missing"


def test_protocol_doc_lists_every_method() -> None:
    text = (DOCS / "protocol.md").read_text()
    for service in (SYSTEM, DIAGNOSTICS, CLIENT_SERVICE, ADMIN_SERVICE, DATANODE_PROTOCOL,
                    DATANODE_SERVICE, NAMENODE_BACKUP_PROTOCOL, BACKUP_SERVICE, HA_SERVICE,
                    HA_SERVICE_PROTOCOL, ZKFC_SERVICE, JOURNAL_SERVICE, LEDGER_SERVICE,
                    LOG_SERVICE, SHARDING_SERVICE):
        for method in service:
            assert f"| `{method.name}` |" in text, f"{method.name} missing"
