"""The block record every role shares: NameNode (edits log, image), DataNodes, clients."""

from __future__ import annotations

import msgspec


class BlockRecord(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A block of a file: its id, generation stamp and length in bytes.

    Part of the on-disk format of edits and images (field order is fixed) and of the wire.
    """

    block_id: int
    genstamp: int
    num_bytes: int
