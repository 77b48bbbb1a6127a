"""Libraries nobody here wrote, on ``xdfs://`` URLs of a real cluster: pandas (CSV, Parquet),
pyarrow (``pyarrow.parquet``; ``pyarrow.dataset`` partitioned writes and filtered reads,
through ``PyFileSystem(FSSpecHandler(fs))`` and through the fsspec file system itself) and
dask dataframes (on the threads scheduler, two workers).

The cluster's blocks are 256 KiB (``live_cluster``), so the larger files here span several
blocks and the libraries' ranged reads (Parquet footers and row groups, dask's CSV byte
ranges) cross block boundaries."""

from __future__ import annotations

from typing import Any

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from pyarrow.fs import FSSpecHandler, PyFileSystem

from tests.datapath.conftest import LIVE_BLOCK_BYTES, LiveCluster
from xdfs.client.fsspec_impl import XdfsFileSystem

pytestmark = pytest.mark.usefixtures("no_ambient_xdfs_env")

ROWS = 40_000


def frame(rows: int = ROWS) -> pd.DataFrame:
    """Sales-like rows: two partition keys, a number and some text."""
    rng = np.random.default_rng(15)
    return pd.DataFrame({
        "year": rng.choice([2023, 2024, 2025], rows),
        "country": rng.choice(["de", "fr", "jp", "us"], rows),
        "amount": rng.integers(0, 1_000_000, rows),
        "note": [f"order-{i:08d}-{'x' * (i % 17)}" for i in range(rows)],
    })


def sort(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values("note").reset_index(drop=True)


def test_pandas_csv_and_parquet(
    live_cluster: LiveCluster, xdfs: XdfsFileSystem, xdfs_dir: str
) -> None:
    df = frame()
    options = live_cluster.storage_options
    csv = f"{live_cluster.url}{xdfs_dir}/sales.csv"
    df.to_csv(csv, index=False, storage_options=options)
    assert xdfs.size(f"{xdfs_dir}/sales.csv") > 2 * LIVE_BLOCK_BYTES
    pd.testing.assert_frame_equal(pd.read_csv(csv, storage_options=options), df)
    gz = f"{live_cluster.url}{xdfs_dir}/sales.csv.gz"
    df.head(100).to_csv(gz, index=False, storage_options=options)
    pd.testing.assert_frame_equal(pd.read_csv(gz, storage_options=options), df.head(100))

    parquet = f"{live_cluster.url}{xdfs_dir}/sales.parquet"
    df.to_parquet(parquet, storage_options=options, row_group_size=5_000)
    assert xdfs.size(f"{xdfs_dir}/sales.parquet") > LIVE_BLOCK_BYTES
    pd.testing.assert_frame_equal(pd.read_parquet(parquet, storage_options=options), df)
    some = pd.read_parquet(parquet, storage_options=options, columns=["amount", "country"],
                           filters=[("country", "=", "jp")])
    expected = df.loc[df.country == "jp", ["amount", "country"]].reset_index(drop=True)
    pd.testing.assert_frame_equal(some, expected)


def test_pyarrow_parquet(xdfs: XdfsFileSystem, xdfs_dir: str) -> None:
    table = pa.Table.from_pandas(frame(), preserve_index=False)
    path = f"{xdfs_dir}/t.parquet"
    pq.write_table(table, path, filesystem=xdfs, row_group_size=10_000)
    with xdfs.open(path, "rb") as fh:  # footer first, then row groups: random access
        parquet = pq.ParquetFile(fh)
        assert (parquet.metadata.num_rows, parquet.num_row_groups) == (ROWS, 4)
        assert parquet.read_row_group(3).equals(table.slice(30_000))
    assert pq.read_table(path, filesystem=xdfs).equals(table)
    recent = pq.read_table(path, filesystem=xdfs, filters=[("year", ">=", 2024)])
    assert recent.num_rows == pc.sum(pc.greater_equal(table["year"], 2024)).as_py()


@pytest.mark.parametrize("through", ["FSSpecHandler", "fsspec"])
def test_pyarrow_dataset_partitioned(xdfs: XdfsFileSystem, xdfs_dir: str, through: str) -> None:
    df = frame()
    table = pa.Table.from_pandas(df, preserve_index=False)
    filesystem: Any = PyFileSystem(FSSpecHandler(xdfs)) if through == "FSSpecHandler" else xdfs
    base = f"{xdfs_dir}/sales"
    partitioning = ds.partitioning(
        pa.schema([("year", pa.int64()), ("country", pa.string())]), flavor="hive"
    )
    ds.write_dataset(table, base, format="parquet", partitioning=partitioning,
                     filesystem=filesystem, max_rows_per_file=3_000, max_rows_per_group=3_000)
    leaves = sorted({p.rsplit("/", 1)[0] for p in xdfs.find(base)})
    assert leaves == sorted(
        f"{base}/year={y}/country={c}" for y in (2023, 2024, 2025) for c in ("de", "fr", "jp", "us")
    )
    assert all(p.endswith(".parquet") for p in xdfs.find(base))

    dataset = ds.dataset(base, format="parquet", partitioning=partitioning, filesystem=filesystem)
    picked = dataset.to_table(
        filter=(pc.field("year") == 2024) & (pc.field("country").isin(["de", "jp"]))
        & (pc.field("amount") > 500_000),
        columns=["note", "amount", "country"],
    ).to_pandas()
    want = df[(df.year == 2024) & df.country.isin(["de", "jp"]) & (df.amount > 500_000)]
    pd.testing.assert_frame_equal(sort(picked), sort(want[["note", "amount", "country"]]))
    # the partition filter prunes directories: only 2 of the 12 leaves are read
    fragments = list(dataset.get_fragments(
        filter=(pc.field("year") == 2024) & (pc.field("country").isin(["de", "jp"]))
    ))
    assert {f.path.rsplit("/", 2)[1] for f in fragments} == {"country=de", "country=jp"}
    assert dataset.count_rows() == ROWS

    # writing again over the same partitions replaces them
    ds.write_dataset(table.slice(0, 100), base, format="parquet", partitioning=partitioning,
                     filesystem=filesystem, existing_data_behavior="delete_matching")
    again = ds.dataset(base, format="parquet", partitioning=partitioning, filesystem=filesystem)
    assert again.count_rows() == ROWS - sum(
        len(df[(df.year == y) & (df.country == c)])
        for y, c in set(zip(df.year[:100], df.country[:100], strict=True))
    ) + 100


def test_dask_dataframes(live_cluster: LiveCluster, xdfs: XdfsFileSystem, xdfs_dir: str) -> None:
    df = frame()
    options = live_cluster.storage_options
    url = f"{live_cluster.url}{xdfs_dir}"
    for part in range(3):  # several CSV files, each read in several byte ranges
        df.iloc[part::3].to_csv(f"{url}/csv/part-{part}.csv", index=False,
                                storage_options=options)
    # object strings, as pandas reads them, so the frames compare dtype for dtype
    with dask.config.set({"scheduler": "threads", "num_workers": 2,
                          "dataframe.convert-string": False}):
        sales = dd.read_csv(f"{url}/csv/*.csv", storage_options=options, blocksize=200_000)
        assert sales.npartitions > 3
        pd.testing.assert_frame_equal(sort(sales.compute()), sort(df))
        totals = sales.groupby("country").amount.sum().compute().sort_index()
        pd.testing.assert_series_equal(totals, df.groupby("country").amount.sum().sort_index())

        sales.to_parquet(f"{url}/parquet", storage_options=options, write_index=False)
        assert len(xdfs.glob(f"{xdfs_dir}/parquet/*.parquet")) == sales.npartitions
        back = dd.read_parquet(f"{url}/parquet", storage_options=options,
                               filters=[("year", "==", 2025)], columns=["note", "year"])
        want = df.loc[df.year == 2025, ["note", "year"]]
        pd.testing.assert_frame_equal(sort(back.compute()), sort(want))
