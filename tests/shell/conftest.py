"""Fixtures of the shell and quota tests: the in-process NameNode with fake DataNodes of
the integration tests (``nn``), and the module-wide real cluster of the data-path tests
(``live_cluster``: a NameNode and three real DataNodes), reused rather than copied."""

from __future__ import annotations

from tests.datapath.conftest import live_cluster
from tests.integration.conftest import nn

__all__ = ["live_cluster", "nn"]
