"""Every tunable of xdfs: one frozen dataclass per section, each default and limit named
with its unit last, each with a one-line doc that ``docs/configuration.md`` is checked
against.

Sources, later ones winning: the defaults here, a TOML file (``--conf`` or ``XDFS_CONF``),
then ``-D section.key=value`` overrides and role-specific flags. Unknown sections or keys
and values of the wrong type are a :class:`~xdfs.errors.ConfigError`, never ignored.

The sections live in one module per group (``rpc``, ``namenode``, ``datanode``, ``ha``,
``services``, ``sharding``); ``loading`` assembles them. Import every name from ``xdfs.config``.
"""

from xdfs.config.base import GiB, KiB, MiB, setting
from xdfs.config.datanode import BalancerConfig, DataNodeConfig
from xdfs.config.ha import HaConfig, JournalNodeConfig
from xdfs.config.loading import (
    CONF_ENV,
    XdfsConfig,
    build_config,
    config_as_dict,
    config_as_toml,
    config_reference_markdown,
    load_config,
    parse_overrides,
    read_toml,
    write_toml,
)
from xdfs.config.namenode import BackupNodeConfig, NameNodeConfig
from xdfs.config.rpc import AUTH_CREDENTIALS, AUTH_SIMPLE, ClientConfig, HttpConfig, RpcConfig
from xdfs.config.services import DevConfig, LogServiceConfig
from xdfs.config.sharding import ShardingConfig

__all__ = [
    "AUTH_CREDENTIALS",
    "AUTH_SIMPLE",
    "CONF_ENV",
    "BackupNodeConfig",
    "BalancerConfig",
    "ClientConfig",
    "DataNodeConfig",
    "DevConfig",
    "GiB",
    "HaConfig",
    "HttpConfig",
    "JournalNodeConfig",
    "KiB",
    "LogServiceConfig",
    "MiB",
    "NameNodeConfig",
    "RpcConfig",
    "ShardingConfig",
    "XdfsConfig",
    "build_config",
    "config_as_dict",
    "config_as_toml",
    "config_reference_markdown",
    "load_config",
    "parse_overrides",
    "read_toml",
    "setting",
    "write_toml",
]
