"""The whole configuration (:class:`XdfsConfig`, one field per section) and where it comes
from: defaults < TOML file (``--conf`` or ``XDFS_CONF``) < environment < ``-D`` overrides;
also its TOML and Markdown renderings."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from xdfs.config.datanode import BalancerConfig, DataNodeConfig
from xdfs.config.ha import HaConfig, JournalNodeConfig
from xdfs.config.namenode import BackupNodeConfig, NameNodeConfig
from xdfs.config.rpc import ClientConfig, HttpConfig, RpcConfig
from xdfs.config.services import DevConfig, LogServiceConfig
from xdfs.config.sharding import ShardingConfig
from xdfs.errors import ConfigError

CONF_ENV = "XDFS_CONF"


@dataclass(frozen=True)
class XdfsConfig:
    rpc: RpcConfig = field(default_factory=RpcConfig)
    namenode: NameNodeConfig = field(default_factory=NameNodeConfig)
    datanode: DataNodeConfig = field(default_factory=DataNodeConfig)
    backupnode: BackupNodeConfig = field(default_factory=BackupNodeConfig)
    journalnode: JournalNodeConfig = field(default_factory=JournalNodeConfig)
    ha: HaConfig = field(default_factory=HaConfig)
    client: ClientConfig = field(default_factory=ClientConfig)
    dev: DevConfig = field(default_factory=DevConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    logservice: LogServiceConfig = field(default_factory=LogServiceConfig)
    balancer: BalancerConfig = field(default_factory=BalancerConfig)
    sharding: ShardingConfig = field(default_factory=ShardingConfig)

    def validate(self) -> XdfsConfig:
        self.rpc.validate()
        self.namenode.validate()
        self.datanode.validate()
        self.backupnode.validate()
        self.journalnode.validate()
        self.ha.validate()
        self.http.validate()
        self.logservice.validate()
        self.client.validate()
        self.balancer.validate()
        self.sharding.validate()
        return self


def _sections() -> dict[str, type[Any]]:
    """Section name -> its dataclass, read off XdfsConfig so there is one list of sections."""
    defaults = XdfsConfig()
    return {f.name: type(getattr(defaults, f.name)) for f in dataclasses.fields(XdfsConfig)}


def _parse_scalar(text: str) -> Any:
    """Parse a -D value as a TOML scalar (number, boolean, quoted string); else a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_overrides(items: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Turn ``["rpc.call_timeout_s=5", ...]`` into ``{"rpc": {"call_timeout_s": 5}}``."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not sep or not dot or not section or not name:
            raise ConfigError(f"override {item!r} is not of the form section.key=value")
        out.setdefault(section, {})[name] = _parse_scalar(value.strip())
    return out


def build_config(layers: Iterable[Mapping[str, Any]]) -> XdfsConfig:
    """Merge mappings (earliest first) over the defaults and validate the result."""
    sections = _sections()
    merged: dict[str, dict[str, Any]] = {}
    for layer in layers:
        for section, values in layer.items():
            cls = sections.get(section)
            if cls is None:
                raise ConfigError(f"unknown config section [{section}]")
            if not isinstance(values, Mapping):
                raise ConfigError(f"config section [{section}] must be a table")
            known = {f.name for f in dataclasses.fields(cls)}
            for key in values:
                if key not in known:
                    raise ConfigError(f"unknown config key {section}.{key}")
            merged.setdefault(section, {}).update(values)
    built: dict[str, Any] = {}
    for section, values in merged.items():
        try:
            built[section] = msgspec.convert(values, sections[section], strict=False)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"config [{section}]: {exc}") from None
    return XdfsConfig(**built).validate()


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None


def load_config(
    conf_path: str | os.PathLike[str] | None = None,
    overrides: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
) -> XdfsConfig:
    """The effective configuration: defaults < TOML file < environment < ``-D`` overrides."""
    env = os.environ if env is None else env
    layers: list[Mapping[str, Any]] = []
    path = conf_path or env.get(CONF_ENV)
    if path:
        layers.append(read_toml(path))
    client_env = {
        key: env[var]
        for key, var in (("fs", "XDFS_FS"), ("user", "XDFS_USER"), ("password", "XDFS_PASSWORD"))
        if env.get(var)
    }
    if client_env:
        layers.append({"client": client_env})
    layers.append(parse_overrides(overrides))
    return build_config(layers)


def config_as_dict(config: XdfsConfig) -> dict[str, dict[str, Any]]:
    return {f.name: dataclasses.asdict(getattr(config, f.name)) for f in dataclasses.fields(config)}


def config_as_toml(config: XdfsConfig) -> str:
    import tomli_w

    return tomli_w.dumps(config_as_dict(config))


def config_reference_markdown() -> str:
    """The table of every key, default and meaning (the source of docs/configuration.md)."""
    lines = ["| key | default | meaning |", "|---|---|---|"]
    defaults = XdfsConfig()
    for section_field in dataclasses.fields(XdfsConfig):
        section = getattr(defaults, section_field.name)
        for f in dataclasses.fields(section):
            value = getattr(section, f.name)
            shown = _toml_literal(value)
            lines.append(f"| `{section_field.name}.{f.name}` | `{shown}` | {f.metadata['doc']} |")
    return "\n".join(lines) + "\n"


def _toml_literal(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def write_toml(path: Path, data: Mapping[str, Any]) -> None:
    """Write a small TOML file atomically and durably (temp file, fsync, rename, fsync of
    the directory): ``xdfs dev`` keeps its superuser's password in one."""
    import tomli_w

    from xdfs.common.files import atomic_write

    atomic_write(path, tomli_w.dumps(dict(data)).encode())
