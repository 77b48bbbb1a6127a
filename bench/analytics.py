"""Analytics benchmark: a generated 1M-inode image (written with the image writer, no
cluster), exported to Parquet (oiv --format parquet) and to JSON lines, then the whole Spark
job (xdfs analyze) on local[2].

    .venv/bin/python bench/analytics.py [--inodes 1000000] [--master local[2]]
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from xdfs.analytics.export import export_image, write_json_lines_image
from xdfs.common.images import format_md5_file
from xdfs.namenode.image.fsimage import write_image_files
from xdfs.namenode.namespace.ops import LAYOUT_VERSION, ImageHeader, InodeRecord
from xdfs.protocol.blocks import BlockRecord

FILES_PER_DIR = 200
OWNERS = [f"user{i}" for i in range(20)]
DAY_MS = 86_400_000


def inodes(count: int, now_ms: int, seed: int = 1) -> Iterator[InodeRecord]:
    """Root, then directories of FILES_PER_DIR files each (parents first)."""
    rng = random.Random(seed)
    yield InodeRecord(1, 0, "", True, 0o755, "root", "supergroup", now_ms, now_ms)
    next_id, block_id, made = 2, 1 << 30, 1
    while made < count:
        dir_id = next_id
        next_id += 1
        owner = rng.choice(OWNERS)
        yield InodeRecord(dir_id, 1, f"d{dir_id}", True, 0o755, owner, "users", now_ms,
                          now_ms)
        made += 1
        for _ in range(min(FILES_PER_DIR, count - made)):
            size = int(rng.lognormvariate(12, 3)) % (1 << 31)
            blocks = []
            left = size
            while left > 0:
                blocks.append(BlockRecord(block_id, 1001, min(left, 128 << 20)))
                block_id += 1
                left -= 128 << 20
            age_ms = rng.randrange(0, 400) * DAY_MS
            yield InodeRecord(next_id, dir_id, f"f{next_id}", False, 0o644, owner, "users",
                              now_ms - age_ms, now_ms - age_ms // 2, 3, 128 << 20,
                              tuple(blocks))
            next_id += 1
            made += 1


def write_image(directory: Path, count: int) -> Path:
    now_ms = int(time.time() * 1000)
    header = ImageHeader(LAYOUT_VERSION, 1, "CID-bench", 1, count + 2, 1 << 40, 2000, count,
                         0, 0, "root", "supergroup")
    path = directory / "fsimage_0000000000000000001"
    digest = write_image_files([path], header, inodes(count, now_ms), [], [])
    path.with_name(path.name + ".md5").write_text(format_md5_file(digest, path.name))
    return path


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() \
        else path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inodes", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="xdfs-bench-analytics-") as tmp:
        base = Path(tmp)
        started = time.perf_counter()
        image = write_image(base, args.inodes)
        generate_s = time.perf_counter() - started
        started = time.perf_counter()
        export_image(image, base / "parquet")
        parquet_s = time.perf_counter() - started
        started = time.perf_counter()
        write_json_lines_image(image, base / "inodes.jsonl")
        json_s = time.perf_counter() - started
        from xdfs.analytics.job import JobConfig, run

        # bytes per inode is measured separately below (the job measures it the same way)

        started = time.perf_counter()
        summary = run(JobConfig(image=str(base / "parquet"), out=str(base / "out"),
                                master=args.master, bytes_per_inode=0.0,
                                shuffle_partitions=8))
        job_s = time.perf_counter() - started
        from xdfs.analytics.memory import measure_bytes_per_inode

        started = time.perf_counter()
        cost = measure_bytes_per_inode(image)
        measure_s = time.perf_counter() - started
        rows = [
            ("generate image (write_image_files)", f"{generate_s:.1f} s",
             f"{size_of(image) / 1e6:.1f} MB"),
            ("oiv -> Parquet (inodes + blocks)", f"{parquet_s:.1f} s",
             f"{size_of(base / 'parquet') / 1e6:.1f} MB"),
            ("oiv -> JSON lines", f"{json_s:.1f} s",
             f"{size_of(base / 'inodes.jsonl') / 1e6:.1f} MB"),
            ("Parquet / JSON", f"{parquet_s / json_s:.2f}x time",
             f"{size_of(base / 'parquet') / size_of(base / 'inodes.jsonl'):.2f}x size"),
            (f"xdfs analyze on {args.master} (Parquet in)", f"{job_s:.1f} s",
             f"{len(summary['tables'])} tables"),
            ("bytes per inode (200k inodes, tracemalloc)", f"{measure_s:.1f} s",
             f"{cost.bytes_per_inode:.0f} B/inode"),
        ]
        print(f"{args.inodes:,} inodes, {os.cpu_count()} CPUs")
        print(f"| {'step':<44} | {'time':>14} | {'output':>16} |")
        print(f"|{'-' * 46}|{'-' * 16}|{'-' * 18}|")
        for step, took, out in rows:
            print(f"| {step:<44} | {took:>14} | {out:>16} |")


if __name__ == "__main__":
    main()
