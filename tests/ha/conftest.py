"""Fixtures of the HA process tests: a 3-server ZooKeeper per module, and an HA cluster on
it with automatic failover (nn1 and nn2 with their controllers, a DataNode)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from xdfs.common.zookeeper import ZooKeeperEnsemble

from .cluster import WAIT_S, HaCluster, formatted_pair


@pytest.fixture(scope="module")
def ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    with ZooKeeperEnsemble(tmp_path_factory.mktemp("zk"), 3, tick_s=0.5) as zk:
        zk.start(WAIT_S)
        yield zk


@pytest.fixture
def auto_ha(tmp_path: Path, ensemble: ZooKeeperEnsemble) -> Iterator[HaCluster]:
    """Elected and taking writes when the test starts; every process killed after it."""
    with formatted_pair(tmp_path) as cluster:
        cluster.automatic(ensemble.hosts)
        for nn_id in ("nn1", "nn2"):
            cluster.start(nn_id)
            cluster.start_controller(nn_id)
        cluster.start_datanode(0)
        cluster.wait(cluster.active, "one NameNode elected active")
        cluster.wait(cluster.writable, "the active takes writes")
        yield cluster
