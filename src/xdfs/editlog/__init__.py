"""Edit-log files shared by the NameNode, the BackupNode and the JournalNodes.

:mod:`.framing` (records and segment headers, pure), :mod:`.segments` (segment names, the
validating reader, :class:`~.segments.FileJournal`, the writer of one directory's segments)
and :mod:`.buffer` (the double buffer with group-commit bookkeeping, pure).

This package knows records as opcode, txid and opaque payload: it knows nothing of ops (the
NameNode's codec is :mod:`xdfs.namenode.editlog.codec`) and imports nothing from a server.
"""
