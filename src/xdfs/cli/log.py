"""``xdfs log``: the replicated log from the shell (create, append, read, tail -f, truncate,
stat, list, delete, tso). Addresses and secret from client.logservice[_password]."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click

from xdfs.cli.main import CliState


@contextmanager
def _client(state: CliState) -> Iterator[object]:
    from xdfs.log.client import LogClient

    client = LogClient(config=state.config)
    try:
        yield client
    finally:
        client.close()


def _lsn(text: str) -> object:
    from xdfs.protocol.log import Lsn

    return Lsn.parse(text)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def log() -> None:
    """Named, replicated, append-only logs (the log service)."""


@log.command()
@click.argument("name")
@click.option("--ensemble", type=int, default=None, help="Ensemble size E (= write quorum).")
@click.option("--ack-quorum", type=int, default=None, help="Ack quorum A.")
@click.option("--ledger-entries", type=int, default=None, help="Rotate past this many entries.")
@click.pass_obj
def create(state: CliState, name: str, ensemble: int | None, ack_quorum: int | None,
           ledger_entries: int | None) -> None:
    """Create the log NAME."""
    import msgspec

    from xdfs.logservice.server import default_settings

    settings = default_settings(state.config)
    changes: dict[str, int] = {}
    if ensemble is not None:
        changes.update(ensemble_size=ensemble, write_quorum=ensemble)
    if ack_quorum is not None:
        changes["ack_quorum"] = ack_quorum
    if ledger_entries is not None:
        changes["ledger_entries_max"] = ledger_entries
    settings = msgspec.structs.replace(settings, **changes)
    with _client(state) as client:
        stat = client.create(name, settings)  # type: ignore[attr-defined]
    click.echo(f"created log {stat.name}")


@log.command()
@click.argument("name")
@click.argument("records", nargs=-1)
@click.option("--key", default=None, help="Key of every record.")
@click.pass_obj
def append(state: CliState, name: str, records: tuple[str, ...], key: str | None) -> None:
    """Append RECORDS (one batch), or each line of stdin when none is given; print LSNs."""
    from xdfs.protocol.log import Record

    texts = list(records) or [line.rstrip("\n") for line in sys.stdin]
    if not texts:
        raise click.UsageError("nothing to append")
    batch = [Record(t.encode(), key.encode() if key is not None else None) for t in texts]
    with _client(state) as client:
        lsns = client.append_batch(name, batch)  # type: ignore[attr-defined]
    for lsn in lsns:
        click.echo(str(lsn))


def _print(records: list[object], with_lsn: bool) -> None:
    for item in records:
        lsn, record = item.lsn, item.record  # type: ignore[attr-defined]
        text = record.payload.decode("utf-8", "backslashreplace")
        click.echo(f"{lsn}\t{text}" if with_lsn else text)


@log.command()
@click.argument("name")
@click.option("--from", "from_lsn", default=None,
              help="First LSN (LEDGER:ENTRY:INDEX); default: the log's start.")
@click.option("--max-bytes", type=int, default=1 << 20, show_default=True)
@click.option("--lsn/--no-lsn", "with_lsn", default=True, help="Print each record's LSN.")
@click.pass_obj
def read(state: CliState, name: str, from_lsn: str | None, max_bytes: int, with_lsn: bool
         ) -> None:
    """Print the records of NAME from an LSN to its end."""
    with _client(state) as client:
        position = _lsn(from_lsn) if from_lsn else client.truncated_lsn(name)  # type: ignore[attr-defined]
        while True:
            records, position = client.read(name, position, max_bytes)  # type: ignore[attr-defined]
            if not records:
                return
            _print(records, with_lsn)


@log.command()
@click.argument("name")
@click.option("-f", "follow", is_flag=True, help="Keep printing records as they are appended.")
@click.option("-n", "count", type=int, default=10, show_default=True,
              help="Records before the end to start from (without -f: to print).")
@click.option("--lsn/--no-lsn", "with_lsn", default=False, help="Print each record's LSN.")
@click.pass_obj
def tail(state: CliState, name: str, follow: bool, count: int, with_lsn: bool) -> None:
    """The last records of NAME; with -f, then every new one until Ctrl-C."""
    with _client(state) as client:
        stat = client.stat(name)  # type: ignore[attr-defined]
        position = stat.truncated_lsn
        recent: list[object] = []
        while True:  # the last `count` records (logs are read forward only)
            records, position = client.read(name, position, 1 << 20)  # type: ignore[attr-defined]
            if not records:
                break
            recent = (recent + records)[-count:] if count > 0 else []
        _print(recent, with_lsn)
        while follow:
            records, position = client.read(name, position, 1 << 20, wait_s=10.0)  # type: ignore[attr-defined]
            _print(records, with_lsn)
            sys.stdout.flush()


@log.command()
@click.argument("name")
@click.argument("lsn")
@click.pass_obj
def truncate(state: CliState, name: str, lsn: str) -> None:
    """Let records of NAME below LSN be reclaimed (space comes back in the background)."""
    with _client(state) as client:
        point = client.truncate(name, _lsn(lsn))  # type: ignore[attr-defined]
    click.echo(f"truncated {name} below {point}")


@log.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@click.pass_obj
def stat(state: CliState, name: str, as_json: bool) -> None:
    """Settings, ledgers, truncation point, end and writer of NAME."""
    import msgspec

    with _client(state) as client:
        info = client.stat(name)  # type: ignore[attr-defined]
    if as_json:
        click.echo(json.dumps(msgspec.to_builtins(info), indent=2))
        return
    s = info.settings
    click.echo(f"log {info.name}: {info.ledgers} ledger(s), E={s.ensemble_size} "
               f"W={s.write_quorum} A={s.ack_quorum}")
    click.echo(f"  truncated below {info.truncated_lsn}, end {info.end_lsn}")
    click.echo(f"  writer epoch {info.writer_epoch} ({info.writer or 'none yet'}), last "
               f"open_writer at epoch {info.opened_epoch or 'none'}, "
               f"readers: {', '.join(f'{k}@{v}' for k, v in info.readers.items()) or 'none'}")


@log.command(name="list")
@click.pass_obj
def list_logs(state: CliState) -> None:
    """Every log's name."""
    with _client(state) as client:
        for name in client.list():  # type: ignore[attr-defined]
            click.echo(name)


@log.command()
@click.argument("name")
@click.pass_obj
def delete(state: CliState, name: str) -> None:
    """Delete the log NAME and its ledgers."""
    with _client(state) as client:
        client.delete(name)  # type: ignore[attr-defined]
    click.echo(f"deleted log {name}")


@log.command()
@click.argument("count", type=int, default=1)
@click.pass_obj
def tso(state: CliState, count: int) -> None:
    """Reserve COUNT timestamps; print the first."""
    with _client(state) as client:
        click.echo(str(client.tso(count)))  # type: ignore[attr-defined]
