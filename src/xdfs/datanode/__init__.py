"""The DataNode: stores block replicas, verifies their checksums, reports to the NameNode
and obeys its commands (docs/architecture.md, seed 003).

Modules: ``layout`` (directory tree, VERSION), ``checksums`` (meta files), ``replica`` (one
replica's files), ``storage`` (the data dir and replica map), ``transfer`` (async block
I/O), ``handlers`` (the ``datanode`` service), ``actor`` (the NameNode-facing loop),
``reports`` (its pure bookkeeping), ``replication``, ``scanner`` and ``server``.
"""
