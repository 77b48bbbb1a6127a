"""Fixtures of the shell and quota tests: the in-process NameNode with fake DataNodes of
the integration tests (``nn``), and the module-wide real cluster of the data-path tests
(``live_cluster``: a NameNode and three real DataNodes), reused rather than copied; and the
shell tests' ``client`` of that cluster, ``base`` directory and ``dfs`` command lines."""

from __future__ import annotations

from tests.datapath.conftest import live_cluster
from tests.integration.conftest import nn
from tests.shell.test_dfs_parity import base, client, dfs

__all__ = ["base", "client", "dfs", "live_cluster", "nn"]
