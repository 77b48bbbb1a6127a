"""polars, DuckDB and pyarrow on a real cluster, each the way docs/user-guide.md ("Data
tools") shows: polars through fsspec (its CSV reader takes ``xdfs://`` URLs; its Parquet
and NDJSON engines take fsspec files or a pyarrow dataset), DuckDB through
``register_filesystem`` (``xdfs://host:port/...`` and ``xdfs:///...`` URLs, globs, hive
partitions, COPY), pyarrow with ``filesystem=`` from ``fsspec.core.url_to_fs``. A URL
naming another cluster than a registered file system's is refused, not read on it."""

from __future__ import annotations

import duckdb
import fsspec
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from tests.datapath.conftest import LiveCluster
from xdfs.client.fsspec_impl import XdfsFileSystem
from xdfs.errors import InvalidArgument

pytestmark = pytest.mark.usefixtures("no_ambient_xdfs_env")


def frame(rows: int = 3000) -> pd.DataFrame:
    return pd.DataFrame({"id": range(rows), "country": [("de", "fr", "jp")[i % 3]
                                                        for i in range(rows)],
                         "amount": [i * 7 % 1000 for i in range(rows)]})


def test_polars(live_cluster: LiveCluster, xdfs: XdfsFileSystem, xdfs_dir: str) -> None:
    df, url, opts = frame(), f"{live_cluster.url}{xdfs_dir}", live_cluster.storage_options
    df.to_csv(f"{url}/sales.csv", index=False, storage_options=opts)
    assert pl.read_csv(f"{url}/sales.csv", storage_options=opts).to_pandas().equals(df)

    frame_pl = pl.from_pandas(df)
    with fsspec.open(f"{url}/sales.parquet", "wb", **opts) as f:
        frame_pl.write_parquet(f)
    back = pl.read_parquet(f"{url}/sales.parquet", storage_options=opts, use_pyarrow=True)
    assert back.equals(frame_pl)
    with fsspec.open(f"{url}/sales.parquet", "rb", **opts) as f:
        assert pl.read_parquet(f).equals(frame_pl)
    for part in range(3):
        frame_pl.slice(part * 1000, 1000).write_parquet(xdfs.open(f"{xdfs_dir}/p/{part}.parquet",
                                                                  "wb"))
    files = [xdfs.open(path) for path in sorted(xdfs.glob(f"{xdfs_dir}/p/*.parquet"))]
    assert pl.scan_parquet(files).select(pl.len()).collect().item() == 3000
    lazy = pl.scan_pyarrow_dataset(ds.dataset(f"{xdfs_dir}/p", filesystem=xdfs))
    jp = lazy.filter(pl.col("country") == "jp").select(pl.col("amount").sum()).collect()
    assert jp.item() == int(df.loc[df.country == "jp", "amount"].sum())

    df.to_json(f"{url}/sales.ndjson", orient="records", lines=True, storage_options=opts)
    with fsspec.open(f"{url}/sales.ndjson", "rb", **opts) as f:
        assert pl.read_ndjson(f).height == 3000


def test_duckdb(live_cluster: LiveCluster, xdfs: XdfsFileSystem, xdfs_dir: str) -> None:
    df, url = frame(), f"{live_cluster.url}{xdfs_dir}"
    con = duckdb.connect()
    con.register_filesystem(xdfs)
    con.register("sales", df)
    con.execute(f"COPY sales TO '{url}/hive' (FORMAT parquet, PARTITION_BY (country))")
    assert xdfs.isdir(f"{xdfs_dir}/hive/country=jp")
    total = con.execute(f"SELECT count(*), sum(amount) FROM read_parquet("
                        f"'{url}/hive/*/*.parquet', hive_partitioning = true) "
                        "WHERE country = 'de'").fetchall()[0]
    expected = df[df.country == "de"]
    assert total == (len(expected), int(expected.amount.sum()))
    con.execute(f"COPY sales TO '{url}/sales.csv' (HEADER)")
    hostless = f"xdfs://{xdfs_dir}/sales.csv"  # xdfs:/// : the registered file system's
    assert con.execute(f"SELECT count(*) FROM read_csv('{hostless}')").fetchall() == [(3000,)]
    assert pd.read_csv(f"{url}/sales.csv", storage_options=live_cluster.storage_options
                       ).equals(df)

    with pytest.raises(duckdb.Error, match="names another cluster"):
        other = f"xdfs://other-nn:8020{xdfs_dir}/sales.csv"  # not the same file
        con.execute(f"SELECT count(*) FROM read_csv('{other}')")


def test_a_registered_file_system_refuses_another_clusters_urls(
    live_cluster: LiveCluster, xdfs: XdfsFileSystem, xdfs_dir: str
) -> None:
    xdfs.pipe_file(f"{xdfs_dir}/f", b"x")
    assert xdfs.cat_file(f"{live_cluster.url}{xdfs_dir}/f") == b"x"
    assert xdfs.cat_file(f"xdfs://{xdfs_dir}/f") == b"x"
    with pytest.raises(InvalidArgument, match="names another cluster"):
        xdfs.cat_file(f"xdfs://elsewhere:8020{xdfs_dir}/f")
    with pytest.raises(InvalidArgument, match="names another cluster"):
        xdfs.exists(f"xdfs://elsewhere:8020{xdfs_dir}/f")


def test_pyarrow(live_cluster: LiveCluster, xdfs_dir: str) -> None:
    url, table = f"{live_cluster.url}{xdfs_dir}/t.parquet", frame()
    fs, path = fsspec.core.url_to_fs(url, **live_cluster.storage_options)
    pa_table = pa.Table.from_pandas(table)
    pq.write_table(pa_table, path, filesystem=fs)
    assert pq.read_table(path, filesystem=fs).equals(pa_table)
    assert pq.read_table(url, filesystem=fs).equals(pa_table)  # the URL, with filesystem=
    some = ds.dataset(url, filesystem=fs).to_table(filter=ds.field("country") == "fr")
    assert some.num_rows == 1000
