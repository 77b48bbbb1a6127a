"""The journals a JournalNode serves: one worker thread per journal, and the registry of them.

Each journal has its own worker thread: every call of that journal runs there, one at a
time, in the order the calls arrived (a handler hands its call to the thread before its
first ``await``). So a journal's state never sees two calls at once, its fsyncs never
block the event loop, and journals never wait for each other.

A journal whose disk failed (a full disk: ENOSPC; an I/O error) refuses every further
call at once (StorageError): it never answers from a state it could not make durable, and
the writer, told on its first failed call, leaves it out until the next segment. The
next ``start_log_segment`` or ``new_epoch`` (a segment roll, a new writer) loads the
journal from disk again first, as a restart of the JournalNode would (a torn tail cut,
the in-progress segment settled): when the disk works again the node rejoins there, as
in HDFS's quorum journal; when it still fails, it stays out until the next one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from xdfs.errors import NotFormatted, StorageError
from xdfs.journal.storage import Journal
from xdfs.protocol.journal import JOURNAL_ID_RE, check_journal_id

log = logging.getLogger(__name__)

T = TypeVar("T")


class JournalWorker:
    """A journal and the one thread that runs its calls."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.failure: StorageError | None = None
        #: Set (and replaced) after every writer call: tailing readers wake up to read.
        self.changed = asyncio.Event()
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"journal {journal.journal_id}")

    def submit(self, call: Callable[[Journal], T], *, fresh_start: bool = False
               ) -> asyncio.Future[T]:
        """Queue ``call`` now (callers must not await before this, to keep the order).
        ``fresh_start``: a segment start or a new epoch, where a failed journal is loaded
        from disk again and tried (module doc)."""
        run = self._run_fresh if fresh_start else self._run
        return asyncio.get_running_loop().run_in_executor(self._thread, run, call)

    def _run_fresh(self, call: Callable[[Journal], T]) -> T:
        if self.failure is not None:
            reloaded = Journal(self.journal.root, self.journal.journal_id)
            try:
                self.journal.close()
                reloaded.load()
            except (StorageError, OSError) as exc:
                log.warning("journal %s: still failing (%s): stays out of the quorum",
                            self.journal.journal_id, exc)
                raise StorageError(f"journal {self.journal.journal_id} failed earlier "
                                   f"({self.failure.message}) and cannot be loaded again: "
                                   f"{exc}") from exc
            log.warning("journal %s: loaded again after its failure (%s); trying to rejoin",
                        self.journal.journal_id, self.failure.message)
            self.journal, self.failure = reloaded, None
        return self._run(call)

    def notify(self) -> None:
        """A writer call went through: wake the long-polling readers."""
        event, self.changed = self.changed, asyncio.Event()
        event.set()

    def _run(self, call: Callable[[Journal], T]) -> T:
        if self.failure is not None:
            raise StorageError(f"journal {self.journal.journal_id} failed earlier "
                               f"({self.failure.message}); restart the JournalNode")
        try:
            return call(self.journal)
        except OSError as exc:  # (a write's own errors arrive as StorageError)
            error = StorageError(f"journal {self.journal.journal_id}: {exc}")
            self.failure = error
            log.critical("journal %s failed: %s", self.journal.journal_id, error.message)
            raise error from exc
        except StorageError as exc:
            self.failure = exc
            log.critical("journal %s failed: %s", self.journal.journal_id, exc.message)
            raise

    def close(self) -> None:
        self._thread.submit(self.journal.close)
        self._thread.shutdown(wait=True)


class Journals:
    """The journals under one journal dir (a subdirectory per journal id), by id."""

    def __init__(self, journal_dir: Path) -> None:
        self.journal_dir = journal_dir
        self.workers: dict[str, JournalWorker] = {}

    def load(self) -> None:
        """Load every journal found on disk (blocking: run it off the event loop)."""
        for entry in sorted(self.journal_dir.iterdir()):
            if entry.is_dir() and JOURNAL_ID_RE.match(entry.name):
                journal = Journal(entry, entry.name)
                journal.load()
                self.workers[entry.name] = JournalWorker(journal)

    def __contains__(self, journal_id: str) -> bool:
        return journal_id in self.workers

    def worker(self, journal_id: str, *, create: bool = False) -> JournalWorker:
        """The worker of ``journal_id``. Only ``format_journal`` creates a journal; any
        other call naming an unknown one is refused (NotFormatted)."""
        worker = self.workers.get(journal_id)
        if worker is None:
            check_journal_id(journal_id)
            if not create:
                raise NotFormatted(f"no journal {journal_id!r} on this JournalNode "
                                   "(xdfs namenode -initializeSharedEdits formats it)")
            worker = JournalWorker(Journal(self.journal_dir / journal_id, journal_id))
            self.workers[journal_id] = worker
        return worker

    def by_name(self) -> list[tuple[str, JournalWorker]]:
        return sorted(self.workers.items())

    def close(self) -> None:
        """Close every journal (blocking: waits for each worker's queued calls)."""
        for worker in self.workers.values():
            worker.close()
        self.workers.clear()
