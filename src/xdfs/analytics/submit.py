"""``spark-submit``'s entry point for ``xdfs analyze`` (a Python file: spark-submit runs
files, not console scripts)::

    PYSPARK_PYTHON=.venv/bin/python spark-submit --master spark://host:7077 \\
        "$(.venv/bin/python -m xdfs.analytics.submit --path)" \\
        --image webhdfs://gateway:9870/images/fsimage_123 --out webhdfs://gateway:9870/reports

The arguments after the file are ``xdfs analyze``'s; the master and every other Spark
setting come from spark-submit (``--master`` is not needed here). ``python -m
xdfs.analytics ARGS`` runs the same command without spark-submit.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> None:
    from xdfs.cli.main import cli

    args = sys.argv[1:] if argv is None else argv
    if args == ["--path"]:
        print(os.path.abspath(__file__))
        return
    cli.main(["analyze", *args], prog_name="xdfs analyze")


if __name__ == "__main__":
    # Run as a file, Python put this file's directory first on sys.path: its modules
    # (job, storage, ...) must not shadow top-level names.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    main()
