"""Where ``xdfs analyze`` reads and writes: local paths, or any URL that Spark's Hadoop
client reaches (``webhdfs://`` for xdfs through its gateway, ``hdfs://``, ``s3a://``,
``file://``).

A cluster's executors run on other machines (or in other working directories): they can
read only what sits at a URL every one of them reaches. So with a URL for the output the
driver exports raw inputs (an fsimage, edits segments) in a local staging directory, as
before, and uploads the Parquet the executors read to ``OUT/export``; report tables are
written by Spark straight to ``OUT/tables`` and ``report.html``/``summary.json`` through
Hadoop's FileSystem API. Inputs given as URLs are fetched to the staging directory first:
the exports and the memory measure read them with pyarrow on the driver.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(location: str) -> bool:
    """``scheme://...`` (a Hadoop file system URL), not a local path."""
    return bool(_URL.match(location))


def join(base: str, *names: str) -> str:
    """``base/names...`` for a local path or a URL (pathlib would fold ``//``)."""
    if not is_url(base):
        return str(Path(base, *names))
    return "/".join([base.rstrip("/"), *names])


def webhdfs_authorities(*locations: str | None) -> list[str]:
    """The host:port of each distinct ``webhdfs://`` gateway among ``locations``."""
    found: list[str] = []
    for location in locations:
        match = re.match(r"^webhdfs://([^/]+)", location or "")
        if match and match.group(1) not in found:
            found.append(match.group(1))
    return found


class HadoopFiles:
    """Hadoop's FileSystem API (the one Spark uses, with the session's configuration)
    through the driver's JVM."""

    def __init__(self, spark: Any) -> None:
        self._jvm = spark._jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _resolve(self, location: str) -> tuple[Any, Any]:
        path = self._jvm.org.apache.hadoop.fs.Path(location)
        return path.getFileSystem(self._conf), path

    def _local(self, path: Path) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(str(path.resolve()))

    def exists(self, location: str) -> bool:
        fs, path = self._resolve(location)
        return bool(fs.exists(path))

    def fetch(self, location: str, local: Path) -> Path:
        """Copy a file or directory at ``location`` to ``local`` (which must not exist)."""
        fs, path = self._resolve(location)
        local.parent.mkdir(parents=True, exist_ok=True)
        # raw local file system: no .crc files beside the copies
        fs.copyToLocalFile(False, path, self._local(local), True)
        return local

    def publish(self, local: Path, location: str) -> str:
        """Copy the local file or directory to ``location``, replacing what is there."""
        fs, path = self._resolve(location)
        if fs.exists(path):
            fs.delete(path, True)
        fs.mkdirs(path.getParent())
        fs.copyFromLocalFile(False, True, self._local(local), path)
        return location

    def write_bytes(self, location: str, data: bytes) -> None:
        fs, path = self._resolve(location)
        out = fs.create(path, True)
        try:
            out.write(bytearray(data))
        finally:
            out.close()
