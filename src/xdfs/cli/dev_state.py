"""Which name dir of an ``xdfs dev`` cluster is the active NameNode, across takeovers and
restarts (``DIR/dev-state.json``, written atomically).

A dev cluster has two name dirs, ``namenode`` and ``backupnode``. At first ``namenode`` is
active and ``backupnode`` (with ``--backup``) follows it. When the backup is promoted
(``xdfs admin -transitionToActive``), the supervisor sees its "promoted" log line and
records the other dir as active, and the old one as *fenced*. The next ``xdfs dev`` on
the same DIR starts the recorded active dir as the NameNode (on the configured port) and,
with ``--backup``, a fresh BackupNode of it in the other dir: the fenced dir is first
renamed aside (``namenode.fenced-1`` ...), never deleted -- it may hold edits that the
backup had not fetched when it took over, and its history diverges from the active one's
after them, so it cannot simply follow again.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import click

from xdfs.common.files import atomic_write

STATE_FILE = "dev-state.json"
NAME_DIRS = ("namenode", "backupnode")
PROMOTED = re.compile(r"promoted: serving as the NameNode at (\S+)")


@dataclass(frozen=True)
class DevState:
    active: str = NAME_DIRS[0]  # the name dir (under DIR) of the active NameNode
    fenced: str = ""  # a fenced former active's name dir, set aside at the next start

    @property
    def standby(self) -> str:
        return NAME_DIRS[1] if self.active == NAME_DIRS[0] else NAME_DIRS[0]


#: A cluster that never had a takeover: ``namenode`` active (formatted when empty).
DEV_STATE_DEFAULT = DevState()


def read_state(base: Path) -> DevState:
    path = base / STATE_FILE
    if not path.exists():
        return DevState()
    try:
        state = DevState(**json.loads(path.read_text()))
    except (ValueError, TypeError) as exc:
        raise click.ClickException(f"{path} is damaged ({exc}): say which of "
                                   f"{', '.join(NAME_DIRS)} is active, or remove it") from None
    if state.active not in NAME_DIRS or state.fenced not in ("", *NAME_DIRS):
        raise click.ClickException(f"{path}: unknown name dir in {state}")
    return state


def write_state(base: Path, state: DevState) -> None:
    atomic_write(base / STATE_FILE, (json.dumps(asdict(state)) + "\n").encode())


def arrange(base: Path) -> DevState:
    """The state for this start: a fenced dir is renamed aside first (kept for the user)."""
    state = read_state(base)
    fenced = base / state.fenced if state.fenced else None
    if fenced is not None and fenced.exists():
        number = 1
        while (aside := base / f"{state.fenced}.fenced-{number}").exists():
            number += 1
        fenced.rename(aside)
        click.echo(f"xdfs dev: {fenced.name} was fenced by a takeover; kept as {aside.name}")
    if state.fenced:
        state = DevState(state.active)
        write_state(base, state)
    active = base / state.active
    if state.active != NAME_DIRS[0] and not active.is_dir():
        raise click.ClickException(f"{active} is the active name dir ({STATE_FILE}) but is "
                                   "missing: restore it (nothing else holds the namespace)")
    return state


class PromotionWatch:
    """Notices the backup's promotion in its log and records the other dir as active."""

    def __init__(self, base: Path, state: DevState, log_path: Path) -> None:
        self.base = base
        self.state = state
        self.log_path = log_path
        self._offset = log_path.stat().st_size if log_path.exists() else 0
        self.promoted = False

    def poll(self) -> None:
        if self.promoted or not self.log_path.exists():
            return
        with open(self.log_path, "rb") as log:
            log.seek(self._offset)
            data = log.read()
        cut = data.rfind(b"\n") + 1  # a line still being written is read again next time
        self._offset += cut
        found = PROMOTED.search(data[:cut].decode(errors="replace"))
        if found:
            self.promoted = True
            write_state(self.base, DevState(self.state.standby, fenced=self.state.active))
            click.echo(f"xdfs dev: the backup took over at {found.group(1)}; "
                       f"{self.state.standby} is now the active name dir")
