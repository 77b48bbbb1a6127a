"""Reading a journal's records back, by txid, from whichever node has them.

A writer recovering reads the chosen copy from its node (with its own epoch: committed or
not); a NameNode catching its local dirs up, ``oev`` and tailing readers read committed
records (epoch 0) from any node: every committed record is on a majority, and a node that
lacks one (it rejoined later) just sends the reader on to the next.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from xdfs.errors import StorageError, XdfsError
from xdfs.protocol import journal as j
from xdfs.quorum.channel import JournalChannel


async def read_txids(
    channels: Sequence[JournalChannel],
    journal_id: str,
    first_txid: int,
    last_txid: int,
    *,
    epoch: int = 0,
    batch_bytes: int = 1024 * 1024,
) -> AsyncIterator[j.ReadEditsResponse]:
    """Answers covering ``first_txid..last_txid`` in order; each comes from the first node
    (the last one that answered, then the given order) holding the next txid."""
    order = list(channels)
    txid = first_txid
    while txid <= last_txid:
        problems: list[str] = []
        for channel in list(order):
            request = j.ReadEditsRequest(journal_id, txid, last_txid - txid + 1, batch_bytes,
                                         epoch)
            try:
                answer = await channel.get_journaled_edits(request)
            except XdfsError as exc:
                problems.append(f"{channel.name}: {exc.message}")
                continue
            if answer.count:
                order.remove(channel)
                order.insert(0, channel)  # stick to a node that has the records
                yield answer
                txid += answer.count
                break
            problems.append(f"{channel.name}: does not have it")
        else:
            raise StorageError(f"journal {journal_id}: no node has txid {txid} "
                               f"({'; '.join(problems)})")


async def read_all(
    channels: Sequence[JournalChannel], journal_id: str, first_txid: int, last_txid: int,
    *, epoch: int = 0, batch_bytes: int = 1024 * 1024,
) -> tuple[bytes, int]:
    """The records ``first_txid..last_txid`` as one buffer, and their layout version."""
    parts: list[bytes] = []
    layout = 0
    async for answer in read_txids(channels, journal_id, first_txid, last_txid,
                                   epoch=epoch, batch_bytes=batch_bytes):
        parts.append(answer.records)
        layout = answer.layout_version
    return b"".join(parts), layout
