"""Metadata analytics: Parquet exports of images, edits and the block map (pyarrow, no Spark),
the Spark job behind ``xdfs analyze`` and the ``xdfs`` Spark data source.

pyspark is imported only by the modules of this package that need it (:mod:`.job`,
:mod:`.reports`, :mod:`.datasource`), and only when they are imported: the exports and the
rest of the CLI never load it.
"""
