"""The Hadoop (and Spark) settings of an xdfs nameservice for Hadoop's WebHDFS client
(``xdfs conf --hadoop``): ``webhdfs://<nameservice>/path`` names the HA pair, the client
fails over between the NameNodes' gateways on StandbyException or a dead address, and
gets OAuth2 bearer tokens from one NameNode's token endpoint, which a standby answers
too (its tokens are valid on the active: xdfs.namenode.webhdfs.gateway.standby_token).
Pure: from the configuration to key/value pairs and their text."""

from __future__ import annotations

import shlex
from xml.sax.saxutils import escape

from xdfs.analytics.webhdfs import hadoop_conf
from xdfs.config import XdfsConfig
from xdfs.errors import ConfigError

#: Hadoop's failover proxy provider for a logical nameservice (what hdfs:// clients use;
#: webhdfs:// ones fail over on their own but read the same keys).
FAILOVER_PROXY_PROVIDER = (
    "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider")
SPARK_PREFIX = "spark.hadoop."


def gateways(config: XdfsConfig) -> dict[str, str]:
    """NameNode id -> its WebHDFS gateway (host:port): ``ha.webhdfs``, else the one
    gateway of ``client.webhdfs`` or ``namenode.http_address``, as ``nn1``."""
    if config.ha.webhdfs:
        return dict(config.ha.webhdfs)
    address = config.client.webhdfs or config.namenode.http_address
    if not address or address.endswith(":0"):
        raise ConfigError("no WebHDFS gateway to name: set ha.webhdfs (NameNode id -> "
                          "host:port of its gateway), client.webhdfs or "
                          "namenode.http_address")
    return {"nn1": address}


def nameservice_conf(config: XdfsConfig, user: str, password: str,
                     token_namenode: str = "") -> dict[str, str]:
    """The Hadoop settings (no ``spark.hadoop.`` prefix) for ``webhdfs://<nameservice>/``
    as ``user``; tokens from ``token_namenode``'s gateway (default: the first one)."""
    by_id = gateways(config)
    token_namenode = token_namenode or next(iter(by_id))
    if token_namenode not in by_id:
        raise ConfigError(f"no NameNode {token_namenode!r} in ha.webhdfs "
                          f"({', '.join(by_id)})")
    ns = config.ha.nameservice
    settings = {
        "dfs.nameservices": ns,
        f"dfs.ha.namenodes.{ns}": ",".join(by_id),
        **{f"dfs.namenode.http-address.{ns}.{nn}": address for nn, address in by_id.items()},
        f"dfs.client.failover.proxy.provider.{ns}": FAILOVER_PROXY_PROVIDER,
    }
    return {**settings, **hadoop_conf(by_id[token_namenode], user, password)}


def as_xml(settings: dict[str, str]) -> str:
    """A Hadoop configuration file (core-site.xml / hdfs-site.xml) holding ``settings``."""
    properties = "".join(
        f"  <property>\n    <name>{escape(key)}</name>\n    <value>{escape(value)}</value>\n"
        "  </property>\n" for key, value in settings.items())
    return f'<?xml version="1.0"?>\n<configuration>\n{properties}</configuration>\n'


def as_spark_args(settings: dict[str, str]) -> str:
    """``--conf spark.hadoop.KEY=VALUE`` lines for spark-submit / pyspark."""
    return "".join(f"--conf {shlex.quote(f'{SPARK_PREFIX}{key}={value}')}\n"
                   for key, value in settings.items())
