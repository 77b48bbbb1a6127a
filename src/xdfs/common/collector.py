"""The garbage collector of a long-running server process.

CPython's cyclic collector runs a young collection every 700 new container objects and,
every hundred of those, may walk every tracked object of the process. A NameNode keeps
its namespace in memory (dictionaries of children, the block map, the retry cache): with
Python's defaults a full collection walked them every few seconds under load, ~70 ms
each with 50,000 files, longer with more, and the collector took a quarter of the
NameNode's CPU on creates. Nearly all of that memory lives as long as the process, and
servers make little cyclic garbage (a few hundred objects a second, measured), so:

* :func:`tune` makes young collections rarer (``rpc.gc_young_objects``);
* :func:`settle` runs once a server has loaded its state and started serving: one full
  collection, then ``gc.freeze()``, which moves every object alive then to a generation
  no collection walks again (objects freed later are still freed by their reference
  counts; only cycles among them would stay, and a starting server has none worth
  keeping).

Only server commands call these: a library must not change the collector of the process
that imports it.
"""

from __future__ import annotations

import gc

#: Python's own thresholds of the older generations (collections of the younger one
#: between two of the older); only the young one is changed.
_OLDER_GENERATIONS = (10, 10)


def tune(young_objects: int) -> None:
    """Collect the young generation every ``young_objects`` new container objects (0:
    Python's default)."""
    if young_objects > 0:
        gc.set_threshold(young_objects, *_OLDER_GENERATIONS)


def settle() -> None:
    """Everything alive now lives as long as the process: collect once, then keep later
    collections off it."""
    gc.collect()
    gc.freeze()
