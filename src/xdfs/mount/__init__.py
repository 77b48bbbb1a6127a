"""``xdfs mount``: the file system through FUSE (libfuse3's low-level API via pyfuse3).

Pure cores (:mod:`.inodes`, :mod:`.handles`, :mod:`.users`, :mod:`.options`,
:mod:`.errnos`) and a thin asyncio driver (:mod:`.ops`, the pyfuse3 operations over
:class:`xdfs.AsyncClient`; :mod:`.run`, mounting and unmounting).
"""
