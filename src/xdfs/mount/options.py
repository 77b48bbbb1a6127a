"""The ``-o`` options of ``xdfs mount``: parsed once into a frozen value (pure)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from xdfs.errors import InvalidArgument

#: Options passed to libfuse as they are (besides the ones the mount itself reads).
FUSE_PASSTHROUGH = frozenset({"allow_other", "allow_root", "ro"})


@dataclass(frozen=True)
class MountOptions:
    ro: bool = False
    allow_other: bool = False
    allow_root: bool = False
    #: Seconds the kernel trusts a file's attributes (size, mtime, mode) before asking again.
    attr_timeout: float = 1.0
    #: Seconds the kernel trusts a name -> inode lookup (and a negative one: no such name).
    entry_timeout: float = 1.0
    #: Seconds one file system call may take before it fails with EIO (cluster down).
    call_timeout: float = 60.0
    #: Directory entries fetched from the NameNode per listing call.
    readdir_page: int = 1000
    #: The local uid/gid shown for xdfs owners and groups no local account has.
    unknown_uid: int = 65534
    unknown_gid: int = 65534
    #: FUSE requests served at once (pyfuse3 worker tasks).
    max_tasks: int = 64
    fsname: str = "xdfs"

    def fuse_options(self) -> set[str]:
        """What libfuse is given: no ``default_permissions`` (the NameNode checks), and
        ``ro``/``allow_other`` as asked."""
        chosen = {name for name in FUSE_PASSTHROUGH if getattr(self, name)}
        return chosen | {f"fsname={self.fsname}", "subtype=xdfs"}


_NUMBERS = {f.name: f.type for f in fields(MountOptions) if f.type in ("float", "int")}
_FLAGS = {f.name for f in fields(MountOptions) if f.type == "bool"}


def parse_options(specs: tuple[str, ...] | list[str]) -> MountOptions:
    """``("ro,attr_timeout=5", "allow_other")`` -> MountOptions; InvalidArgument for an
    unknown option or a bad value (the mount is then not attempted)."""
    values: dict[str, object] = {}
    for spec in specs:
        for item in filter(None, (part.strip() for part in spec.split(","))):
            name, has_value, raw = item.partition("=")
            values[name] = _value(name, raw if has_value else None)
    options = replace(MountOptions(), **values)  # type: ignore[arg-type]
    if options.call_timeout <= 0 or options.readdir_page <= 0 or options.max_tasks <= 0:
        raise InvalidArgument("call_timeout, readdir_page and max_tasks must be positive")
    return options


def _value(name: str, raw: str | None) -> object:
    if name in _FLAGS:
        if raw is not None:
            raise InvalidArgument(f"mount option {name} takes no value")
        return True
    if name == "fsname":
        if not raw:
            raise InvalidArgument("mount option fsname needs a value")
        return raw
    kind = _NUMBERS.get(name)
    if kind is None:
        raise InvalidArgument(f"unknown mount option {name!r}")
    if raw is None:
        raise InvalidArgument(f"mount option {name} needs a value ({name}=N)")
    try:
        number = float(raw) if kind == "float" else int(raw)
    except ValueError:
        raise InvalidArgument(f"mount option {name}={raw}: not a number") from None
    if number < 0:
        raise InvalidArgument(f"mount option {name}={raw}: must not be negative")
    return number
