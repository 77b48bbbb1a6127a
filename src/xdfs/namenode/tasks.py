"""The NameNode's periodic duties as asyncio tasks: run one every interval (a failure is
logged, never fatal to the loop), and cancel a set of them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from xdfs.errors import StorageError, XdfsError

log = logging.getLogger(__name__)


async def cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def every(name: str, interval_s: float, duty: Callable[[], Awaitable[None]]) -> None:
    """Run ``duty`` every ``interval_s``; a failure is logged, never fatal to the loop
    (storage failures stop the NameNode through the edits log's fatal path instead)."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await duty()
        except StorageError as exc:
            log.error("%s: storage failure: %s", name, exc)
        except XdfsError as exc:
            log.warning("%s: %s", name, exc.message)
        except Exception:
            log.exception("%s failed", name)
