"""``xdfs namenode -format --shard N [--datanode-secret-file F]``: the namespace's id
counters start at shard N's first ids, and its DataNode secret is another shard's when
given (one secret file logs a DataNode in to every shard)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from xdfs.config import NameNodeConfig
from xdfs.namenode.image.format import initial_namespace
from xdfs.namenode.namespace.inodes import FIRST_INODE_ID
from xdfs.namenode.namespace.tree_base import FIRST_BLOCK_ID
from xdfs.namenode.security.passwords import DATANODE_SECRET_BYTES
from xdfs.sharding.ids import first_id, shard_of_id


def test_a_shard_namespace_allocates_its_shards_ids_with_the_given_secret() -> None:
    secret = bytes(range(DATANODE_SECRET_BYTES))
    ns = initial_namespace(NameNodeConfig(), "root", "pw", 0, shard=3, datanode_secret=secret)
    assert ns.datanode_secret == secret
    assert shard_of_id(ns.allocate_block_id()) == 3
    assert shard_of_id(ns.resolve("/user").inodes[-1].id) == 3
    plain = initial_namespace(NameNodeConfig(), "root", "pw", 0)
    assert plain.next_block_id == first_id(0, FIRST_BLOCK_ID) == FIRST_BLOCK_ID
    assert plain.next_inode_id > FIRST_INODE_ID and len(plain.datanode_secret) == 32


def test_a_bad_secret_file_is_refused_and_nothing_is_formatted(tmp_path: Path) -> None:
    bad = tmp_path / "secret"
    bad.write_text("abcd\n")
    name_dir = tmp_path / "nn"
    done = subprocess.run(
        [sys.executable, "-m", "xdfs", "namenode", "--name-dir", str(name_dir), "-format",
         "--shard", "1", "--datanode-secret-file", str(bad)],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "XDFS_USER": "root", "XDFS_PASSWORD": "pw"},
    )
    assert done.returncode == 2, done.stderr
    assert "holds 2 bytes, not a DataNode secret's 32" in done.stderr
    assert not name_dir.exists()
