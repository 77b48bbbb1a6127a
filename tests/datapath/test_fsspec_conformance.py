"""fsspec's own conformance suites (``fsspec.tests.abstract``) against a real xdfs cluster."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fsspec.tests.abstract import AbstractFixtures
from fsspec.tests.abstract.copy import AbstractCopyTests
from fsspec.tests.abstract.get import AbstractGetTests
from fsspec.tests.abstract.open import AbstractOpenTests
from fsspec.tests.abstract.pipe import AbstractPipeTests
from fsspec.tests.abstract.put import AbstractPutTests

from xdfs.client.fsspec_impl import XdfsFileSystem


class XdfsFixtures(AbstractFixtures):  # type: ignore[misc]
    @pytest.fixture
    def fs(self, xdfs: XdfsFileSystem, no_ambient_xdfs_env: None) -> XdfsFileSystem:
        return xdfs

    @pytest.fixture
    def fs_join(self) -> Callable[..., str]:
        return lambda *parts: "/".join(parts)

    @pytest.fixture
    def fs_path(self, xdfs_dir: str) -> str:
        return xdfs_dir


class TestXdfsCopy(AbstractCopyTests, XdfsFixtures):  # type: ignore[misc]
    pass


class TestXdfsGet(AbstractGetTests, XdfsFixtures):  # type: ignore[misc]
    pass


class TestXdfsPut(AbstractPutTests, XdfsFixtures):  # type: ignore[misc]
    pass


class TestXdfsOpen(AbstractOpenTests, XdfsFixtures):  # type: ignore[misc]
    pass


class TestXdfsPipe(AbstractPipeTests, XdfsFixtures):  # type: ignore[misc]
    pass
