"""The append tests use the data-path tests' in-process cluster (a NameNode and three
DataNodes with fast heartbeats)."""

from tests.datapath.conftest import cluster

__all__ = ["cluster"]
