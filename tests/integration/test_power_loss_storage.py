"""New storage survives a power cut: the directories a server creates the first time it runs
are fsynced into their parents (xdfs.common.files.make_dirs), and small state files are
synced before they are renamed into place. Each test fails without its fsync."""

from __future__ import annotations

from pathlib import Path

import pytest

from xdfs.common.files import make_dirs
from xdfs.config import XdfsConfig, read_toml, write_toml
from xdfs.datanode.storage import DataStorage
from xdfs.namenode.image.format import format_namenode
from xdfs.namenode.image.storage import StorageDirectory
from xdfs.testing.lazyfs import LazyFS

pytestmark = pytest.mark.powerloss


def test_make_dirs_survive_a_power_cut(lazyfs: LazyFS) -> None:
    make_dirs(lazyfs.path / "a" / "b" / "c")
    make_dirs(lazyfs.path / "a" / "b" / "c")  # existing: nothing to do
    (lazyfs.path / "a" / "b" / "file").write_bytes(b"x")
    with pytest.raises(Exception, match="a file is there"):
        make_dirs(lazyfs.path / "a" / "b" / "file" / "d")
    lazyfs.power_cut()
    assert (lazyfs.path / "a" / "b" / "c").is_dir()


def test_a_formatted_name_dir_survives_a_power_cut(lazyfs: LazyFS) -> None:
    name_dir = lazyfs.path / "nn" / "name"
    format_namenode([name_dir], XdfsConfig().namenode, superuser="root", password="pw")
    lazyfs.power_cut()
    with StorageDirectory(name_dir) as sd:
        assert sd.read_version().namespace_id > 0
        assert sd.images() == [0]


def test_a_new_data_dir_survives_a_power_cut(lazyfs: LazyFS) -> None:
    root = lazyfs.path / "dn" / "data"
    storage = DataStorage(root, checksum_chunk_bytes=512)
    storage.open(now_ms=1)
    node_id = storage.node_id
    storage.close()
    lazyfs.power_cut()
    current = root / "current"
    assert (current / "finalized").is_dir() and (current / "rbw").is_dir()
    again = DataStorage(root, checksum_chunk_bytes=512)
    again.open(now_ms=2)
    assert again.node_id == node_id
    again.close()


def test_a_toml_file_survives_a_power_cut(lazyfs: LazyFS, tmp_path: Path) -> None:
    path = lazyfs.path / "client.toml"
    write_toml(path, {"client": {"user": "root", "password": "first"}})
    write_toml(path, {"client": {"user": "root", "password": "second"}})
    lazyfs.power_cut()
    assert read_toml(path) == {"client": {"user": "root", "password": "second"}}
