"""The pyfuse3 operations of ``xdfs mount``: a thin asyncio driver over :class:`AsyncClient`.

Every call runs under the mount's ``call_timeout`` (the cluster down answers EIO then,
never a call hung forever) and maps xdfs errors to errno values (:mod:`.errnos`). The
bookkeeping lives in the pure cores: :mod:`.inodes` (inode numbers, paths), :mod:`.handles`
(open files, the write rule) and :mod:`.users` (owners).
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import posixpath
import stat
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

import pyfuse3

from xdfs.client.client import AsyncClient
from xdfs.errors import AccessDenied, AlreadyExists, NotFound, XdfsError
from xdfs.mount.errnos import errno_of
from xdfs.mount.handles import Handles, OpenDir, OpenFile, Writing
from xdfs.mount.inodes import InodeTable, is_temp_name, temp_name
from xdfs.mount.options import MountOptions
from xdfs.mount.users import UserMap
from xdfs.protocol.namenode import FileStatus

log = logging.getLogger("xdfs.mount")

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

#: What ``ls``/``cp`` see as the preferred I/O size: 1 MiB requests.
BLOCK_HINT = 1 << 20
NAME_MAX = 255


def fuse_call(method: F) -> F:
    """Bound by the call timeout; xdfs errors become their errno, anything unexpected EIO
    with its traceback in the log (a FUSE handler must raise FUSEError only)."""

    @functools.wraps(method)
    async def call(self: XdfsOperations, *args: Any) -> Any:
        try:
            async with asyncio.timeout(self.options.call_timeout):  # no extra task
                return await method(self, *args)
        except pyfuse3.FUSEError:
            raise
        except XdfsError as exc:
            raise pyfuse3.FUSEError(errno_of(exc)) from None
        except KeyError:  # an inode or handle the table no longer knows
            raise pyfuse3.FUSEError(errno.ENOENT) from None
        except TimeoutError:
            log.warning("%s: no answer from the cluster in %.0f s: EIO",
                        method.__name__, self.options.call_timeout)
            raise pyfuse3.FUSEError(errno.EIO) from None
        except Exception:
            log.exception("%s failed", method.__name__)
            raise pyfuse3.FUSEError(errno.EIO) from None

    return cast(F, call)


def refuse(number: int, why: str) -> pyfuse3.FUSEError:
    """What xdfs cannot do: one log line and the errno."""
    log.warning("refused (%s): %s", errno.errorcode[number], why)
    return pyfuse3.FUSEError(number)


def _name(raw: bytes) -> str:
    name = os.fsdecode(raw)
    if len(raw) > NAME_MAX:
        raise pyfuse3.FUSEError(errno.ENAMETOOLONG)
    return name


class XdfsOperations(pyfuse3.Operations):
    supports_dot_lookup = False
    enable_writeback_cache = False

    def __init__(self, client: AsyncClient, options: MountOptions, table: InodeTable,
                 users: UserMap) -> None:
        super().__init__()
        self.client = client
        self.options = options
        self.table = table
        self.users = users
        self.files: Handles[OpenFile] = Handles()
        self.dirs: Handles[OpenDir] = Handles()
        #: inode -> the handle writing it (one writer per file through this mount).
        self.writing: dict[int, OpenFile] = {}

    # -- attributes ---------------------------------------------------------------------

    def attributes(self, status: FileStatus, ino: int) -> pyfuse3.EntryAttributes:
        attrs = pyfuse3.EntryAttributes()
        attrs.st_ino = ino
        kind = stat.S_IFDIR if status.is_dir else stat.S_IFREG
        attrs.st_mode = kind | (status.mode & 0o7777)
        attrs.st_nlink = 1  # unknown: find and du then make no leaf-count assumptions
        attrs.st_uid = self.users.uid_of(status.owner)
        attrs.st_gid = self.users.gid_of(status.group)
        size = status.length
        writer = self.writing.get(ino)
        if writer is not None:
            size = max(size, writer.end)  # bytes written, not all visible yet
        attrs.st_size = size
        attrs.st_blksize = BLOCK_HINT
        attrs.st_blocks = (size + 511) // 512
        attrs.st_mtime_ns = status.mtime_ms * 1_000_000
        attrs.st_ctime_ns = attrs.st_mtime_ns
        attrs.st_atime_ns = status.atime_ms * 1_000_000
        attrs.attr_timeout = self.options.attr_timeout
        attrs.entry_timeout = self.options.entry_timeout
        node = self.table.nodes.get(ino)
        if node is not None:
            node.last = (status.mtime_ms, status.length)
        return attrs

    async def _entry(self, parent: int, name: str, status: FileStatus,
                     temp: str = "") -> pyfuse3.EntryAttributes:
        ino = self.table.remember(parent, name, status.inode_id, temp)
        return self.attributes(status, ino)

    @fuse_call
    async def lookup(self, parent_inode: int, name: bytes,
                     ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        text = _name(name)
        pending = self.table.pending(parent_inode, text)
        try:
            if pending is not None:
                node = self.table.nodes[pending]
                status = await self.client.stat(self.table.path(pending))
                return await self._entry(parent_inode, text, status, node.temp)
            status = await self.client.stat(self.table.child_path(parent_inode, text))
        except NotFound:
            return self._absent()
        return await self._entry(parent_inode, text, status)

    def _absent(self) -> pyfuse3.EntryAttributes:
        """No such name: the kernel remembers that for entry_timeout (inode 0)."""
        if not self.options.entry_timeout:
            raise pyfuse3.FUSEError(errno.ENOENT)
        attrs = pyfuse3.EntryAttributes()
        attrs.st_ino = 0
        attrs.entry_timeout = self.options.entry_timeout
        return attrs

    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        for ino, count in inode_list:
            self.table.forget(ino, count)

    @fuse_call
    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        return self.attributes(await self.client.stat(self.table.path(inode)), inode)

    @fuse_call
    async def setattr(self, inode: int, attr: pyfuse3.EntryAttributes,
                      fields: pyfuse3.SetattrFields, fh: int | None,
                      ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        path = self.table.path(inode)
        if fields.update_size:
            await self._resize(inode, path, attr.st_size)
        if fields.update_mode:
            await self.client.set_permission(path, attr.st_mode & 0o7777)
        if fields.update_uid or fields.update_gid:
            await self.client.set_owner(path, *self._owner(attr, fields))
        if fields.update_mtime or fields.update_atime:
            mtime = attr.st_mtime_ns // 1_000_000 if fields.update_mtime else -1
            atime = attr.st_atime_ns // 1_000_000 if fields.update_atime else -1
            writer = self.writing.get(inode)
            if writer is not None:  # closing sets the mtime: these times are set after it
                writer.times = (mtime, atime)
            else:
                await self.client.set_times(path, mtime, atime)
        return self.attributes(await self.client.stat(path), inode)

    def _owner(self, attr: pyfuse3.EntryAttributes,
               fields: pyfuse3.SetattrFields) -> tuple[str, str]:
        owner = group = ""
        if fields.update_uid:
            owner = self.users.user_of(attr.st_uid) or ""
            if not owner:
                raise refuse(errno.EINVAL, f"chown to uid {attr.st_uid}: no local user name")
        if fields.update_gid:
            group = self.users.group_of(attr.st_gid) or ""
            if not group:
                raise refuse(errno.EINVAL, f"chgrp to gid {attr.st_gid}: no local group name")
        return owner, group

    async def _resize(self, inode: int, path: str, size: int) -> None:
        """truncate/ftruncate: a file being written may be cut to where it already is
        (O_TRUNC then ftruncate(0) is common); a closed one shortened (xdfs truncate);
        growing a file would write zeros in place: refused."""
        writer = self.writing.get(inode)
        if writer is not None:
            if size != writer.end:
                raise refuse(errno.EOPNOTSUPP, f"truncate {path} to {size} while written")
            return
        status = await self.client.stat(path)
        if status.is_dir:
            raise pyfuse3.FUSEError(errno.EISDIR)
        if size > status.length:
            raise refuse(errno.EOPNOTSUPP, f"truncate {path} to {size} > its {status.length}")
        if size < status.length and not await self.client.truncate(path, size):
            await self._recovered(path)

    async def _recovered(self, path: str) -> None:
        """A truncate inside a block returns before the block is cut on its replicas;
        truncate(2) returns when the file has its new length (bounded by call_timeout)."""
        pause = 0.02
        while (await self.client.stat(path)).under_construction:
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)

    # -- directories --------------------------------------------------------------------

    @fuse_call
    async def mkdir(self, parent_inode: int, name: bytes, mode: int,
                    ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        text = _name(name)
        path = self.table.child_path(parent_inode, text)
        status = await self.client.mkdirs(path, mode & ~ctx.umask & 0o7777, parents=False)
        return await self._entry(parent_inode, text, status)

    @fuse_call
    async def rmdir(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        text = _name(name)
        # an empty directory is gone for good (nothing in it to restore from the trash)
        await self.client.delete(self.table.child_path(parent_inode, text), skip_trash=True)
        self.table.removed(parent_inode, text)

    @fuse_call
    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        path = self.table.path(inode)
        pages = self.client.iter_dir(path, self.options.readdir_page).__aiter__()
        return self.dirs.add(OpenDir(path, pages=pages, ino=inode))

    @fuse_call
    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        """Entries after ``start_id`` (an index into the listing so far), fetched from
        the NameNode a page at a time as the kernel asks for more."""
        listing = self.dirs.get(fh)
        index = start_id
        while True:
            if index >= len(listing.entries) and not await self._more(listing):
                return
            status = listing.entries[index]
            index += 1
            name = status.path.rsplit("/", 1)[1]
            if is_temp_name(name):  # a file still being written: visible once closed
                continue
            ino = self.table.inode_of(status.inode_id)
            if not pyfuse3.readdir_reply(token, os.fsencode(name),
                                         self.attributes(status, ino), index):
                return
            self.table.remember(listing.ino, name, status.inode_id)

    async def _more(self, listing: OpenDir) -> bool:
        if listing.done:
            return False
        try:
            listing.entries.append(await anext(listing.pages))
        except StopAsyncIteration:
            listing.done = True
            return False
        return True

    async def releasedir(self, fh: int) -> None:
        listing = self.dirs.pop(fh)
        if listing is not None:
            await listing.pages.aclose()

    # -- names --------------------------------------------------------------------------

    @fuse_call
    async def unlink(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        text = _name(name)
        pending = self.table.pending(parent_inode, text)
        if pending is not None:  # removed while written: dropped when closed
            self.writing[pending].final_path = ""
        else:
            # into the trash when the cluster keeps one (fs.trash_interval_s > 0)
            await self.client.delete(self.table.child_path(parent_inode, text))
        self.table.removed(parent_inode, text)

    @fuse_call
    async def rename(self, parent_inode_old: int, name_old: bytes, parent_inode_new: int,
                     name_new: bytes, flags: int, ctx: pyfuse3.RequestContext) -> None:
        old, new = _name(name_old), _name(name_new)
        if flags & ~pyfuse3.RENAME_NOREPLACE:
            raise refuse(errno.EINVAL, "rename with RENAME_EXCHANGE")
        dst = self.table.child_path(parent_inode_new, new)
        pending = self.table.pending(parent_inode_old, old)
        if pending is not None:  # renamed while written: it gets the new name when closed
            if parent_inode_new != parent_inode_old:  # its temporary file stays where it is
                raise refuse(errno.EBUSY, f"{dst}: moving a file being written to another "
                             "directory (close it first)")
            self.writing[pending].final_path = dst
        else:
            src = self.table.child_path(parent_inode_old, old)
            noreplace = bool(flags & pyfuse3.RENAME_NOREPLACE)
            if noreplace or (parent_inode_new, new) in self.table.entries:
                await self._clear_target(src, dst, noreplace=noreplace)  # known to exist
                await self.client.rename(src, dst)
            else:
                await self._move(src, dst)
        self.table.moved(parent_inode_old, old, parent_inode_new, new)

    async def _move(self, src: str, dst: str) -> None:
        """POSIX rename of ``src`` to a ``dst`` thought absent: one NameNode call when it
        is; when it is not (made meanwhile), undone if xdfs moved ``src`` into the
        directory ``dst``, then replaced as :meth:`_clear_target` says."""
        try:
            final = await self.client.rename(src, dst)
        except AlreadyExists:
            final = ""
        if final == dst:
            return
        if final:
            await self.client.rename(final, src)
        await self._clear_target(src, dst, noreplace=False)
        await self.client.rename(src, dst)

    async def _clear_target(self, src: str, dst: str, *, noreplace: bool) -> None:
        """POSIX rename replaces an existing file, or an empty directory by a directory;
        xdfs's rename does neither (it moves into a directory), so the target is
        removed first. Two NameNode calls: between them the target name is absent."""
        try:
            target = await self.client.stat(dst)
        except NotFound:
            return
        if noreplace:
            raise pyfuse3.FUSEError(errno.EEXIST)
        source = await self.client.stat(src)
        if target.inode_id == source.inode_id:
            return
        if target.is_dir and not source.is_dir:
            raise pyfuse3.FUSEError(errno.EISDIR)
        if source.is_dir and not target.is_dir:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        if target.is_dir and target.children:
            raise pyfuse3.FUSEError(errno.ENOTEMPTY)
        await self.client.delete(dst, skip_trash=True)

    async def link(self, inode: int, new_parent_inode: int, new_name: bytes,
                   ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        raise refuse(errno.EPERM, "hard links: xdfs has one name per inode")

    async def symlink(self, parent_inode: int, name: bytes, target: bytes,
                      ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        raise refuse(errno.EPERM, "symbolic links: the namespace has none")

    async def mknod(self, parent_inode: int, name: bytes, mode: int, rdev: int,
                    ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        raise refuse(errno.EPERM, "device files, fifos and sockets: the namespace has none")

    # -- files --------------------------------------------------------------------------

    @fuse_call
    async def create(self, parent_inode: int, name: bytes, mode: int, flags: int,
                     ctx: pyfuse3.RequestContext
                     ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        """A new file, written under a hidden temporary name and renamed to ``name`` when
        closed: a reader never takes a half-written file for a complete one."""
        text = _name(name)
        final = self.table.child_path(parent_inode, text)
        temp = temp_name(text)
        handle = await self._start_new(posixpath.join(posixpath.dirname(final), temp), final,
                                       mode & ~ctx.umask & 0o7777)
        attrs = await self._entry(parent_inode, text, handle.writer.status, temp)
        handle.ino = attrs.st_ino
        self.writing[handle.ino] = handle
        return pyfuse3.FileInfo(fh=self.files.add(handle)), attrs

    async def _start_new(self, temp_path: str, final: str, mode: int) -> OpenFile:
        writer = await self.client.open_write(temp_path, mode=mode, create_parents=False)
        return OpenFile(0, temp_path, True, 0, Writing.NEW, final, writer=writer,
                        lock=asyncio.Lock())

    @fuse_call
    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        path = self.table.path(inode)
        writable = flags & os.O_ACCMODE != os.O_RDONLY
        if not writable:
            return await self._open_read(inode, path)
        existing = path
        if writable and inode in self.writing:
            existing = self._supersede(inode, path, flags).path  # its mode for the new one
            path = self.table.path(inode)  # the real name
        status = await self.client.stat(existing)
        if writable and flags & os.O_TRUNC:  # a rewrite: the old content until close
            node = self.table.nodes[inode]
            node.temp = temp_name(node.name)
            handle = await self._start_new(self.table.path(inode), path, status.mode & 0o7777)
            handle.ino = inode
            self.writing[inode] = handle
            return pyfuse3.FileInfo(fh=self.files.add(handle))
        handle = OpenFile(inode, path, True, status.length, lock=asyncio.Lock())
        self._forget_pages(inode)
        return pyfuse3.FileInfo(fh=self.files.add(handle))

    async def _open_read(self, inode: int, path: str) -> pyfuse3.FileInfo:
        """One NameNode call (the block locations): whether the kernel may keep its
        cached pages is judged from the attributes it was last given, which it has just
        revalidated (or trusts for attr_timeout)."""
        reader = await self.client.open_read(path)
        handle = OpenFile(inode, path, False, reader.length, reader=reader,
                          lock=asyncio.Lock())
        return pyfuse3.FileInfo(fh=self.files.add(handle), keep_cache=self._unchanged(inode))

    def _supersede(self, inode: int, path: str, flags: int) -> OpenFile:
        """A second writer of a file through this mount: refused (EBUSY), except an
        ``O_TRUNC`` open while the first has written nothing (created, then opened again
        by path to be written, as pandas does): the first handle's empty file is then
        dropped when it closes, and its writes are refused."""
        first = self.writing[inode]
        if not (flags & os.O_TRUNC and first.writing is Writing.NEW and first.end == 0):
            raise refuse(errno.EBUSY, f"{path}: already open for writing through this mount")
        first.final_path = ""
        first.superseded = True
        del self.writing[inode]
        self.table.committed(inode)  # the name is the real file's again until reopened
        return first

    def _unchanged(self, inode: int) -> bool:
        """The kernel keeps its cached pages of a file across opens only while the file
        is as it was at the last open for reading (mtime and length)."""
        node = self.table.nodes.get(inode)
        if node is None or node.last is None:
            return False
        unchanged, node.seen = node.seen == node.last, node.last
        return unchanged

    def _forget_pages(self, inode: int) -> None:
        node = self.table.nodes.get(inode)
        if node is not None:
            node.seen = None

    @fuse_call
    async def read(self, fh: int, off: int, size: int) -> bytes:
        handle = self.files.get(fh)
        async with handle.lock:
            if handle.reader is None:
                handle.reader = await self.client.open_read(handle.path)
            data: bytes = await handle.reader.read_at(off, size)
            return data

    @fuse_call
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        handle = self.files.get(fh)
        async with handle.lock:
            if handle.failed:
                raise pyfuse3.FUSEError(errno.EIO)
            if handle.superseded:
                raise refuse(errno.EBUSY, f"{handle.path}: truncated by a later open")
            if not handle.write_allowed(off):
                raise refuse(errno.EOPNOTSUPP, f"write at {off} of {handle.path}, which "
                             f"ends at {handle.end}: xdfs writes only at the end")
            if handle.writer is None:  # the first write of an existing file: append
                handle.writer = await self.client.append(handle.path)
                handle.writing = Writing.APPEND
                self.writing[handle.ino] = handle
            try:
                await handle.writer.write(buf)
            except BaseException:
                handle.failed = True
                raise
            handle.wrote(len(buf))
            return len(buf)

    @fuse_call
    async def flush(self, fh: int) -> None:
        """close(2): the file is complete, durable and under its name when this returns
        (release comes later and its errors reach nobody)."""
        handle = self.files.get(fh)
        async with handle.lock:
            await self._finish(handle)

    async def _finish(self, handle: OpenFile) -> None:
        writer, handle.writer = handle.writer, None
        if writer is None:
            return
        try:
            if handle.failed:
                await writer.abort()
                raise pyfuse3.FUSEError(errno.EIO)
            await writer.close()
            dropped = handle.writing is Writing.NEW and not handle.final_path
            if handle.writing is Writing.NEW:
                await self._commit(handle)
            if handle.times is not None and not dropped:  # futimens while written
                await self.client.set_times(handle.path, *handle.times)
                handle.times = None
        except BaseException:
            handle.failed = True
            raise
        finally:
            if self.writing.get(handle.ino) is handle:
                del self.writing[handle.ino]
        handle.writing = Writing.NONE
        self._forget_pages(handle.ino)

    async def _commit(self, handle: OpenFile) -> None:
        if not handle.final_path:  # unlinked while written
            await self.client.delete(handle.path, skip_trash=True)
            return
        await self._move(handle.path, handle.final_path)
        self.table.committed(handle.ino)
        handle.path = handle.final_path

    @fuse_call
    async def fsync(self, fh: int, datasync: bool) -> None:
        """The bytes written so far reach every DataNode of the file's pipeline (hflush);
        a new file keeps its temporary name until closed."""
        handle = self.files.get(fh)
        async with handle.lock:
            if handle.writer is not None:
                await handle.writer.hflush()

    async def release(self, fh: int) -> None:
        handle = self.files.pop(fh)
        if handle is None:
            return
        try:
            async with handle.lock:
                await asyncio.wait_for(self._finish(handle), self.options.call_timeout)
        except (pyfuse3.FUSEError, XdfsError, TimeoutError, OSError) as exc:
            log.warning("closing %s failed: %r", handle.path, exc)
        if handle.reader is not None:
            await handle.reader.close()

    # -- the file system ------------------------------------------------------------------

    @fuse_call
    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        """The cluster's capacity over its live DataNodes, in 4 KiB units."""
        data = pyfuse3.StatvfsData()
        data.f_bsize = BLOCK_HINT
        data.f_frsize = 4096
        data.f_namemax = NAME_MAX
        try:
            report = await self.client.datanode_report()
        except AccessDenied:
            return data
        data.f_blocks = report.capacity_bytes // data.f_frsize
        data.f_bfree = data.f_bavail = report.free_bytes // data.f_frsize
        return data

    async def close_all(self) -> None:
        """At unmount: finish every file still open (the kernel released them all when
        the mount went away normally; after a forced one some may remain)."""
        for handle in self.files.values():
            try:
                await asyncio.wait_for(self._finish(handle), self.options.call_timeout)
            except (pyfuse3.FUSEError, XdfsError, TimeoutError, OSError) as exc:
                log.warning("closing %s at unmount failed: %r", handle.path, exc)
