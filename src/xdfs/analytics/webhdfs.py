"""Spark (its bundled Hadoop client) on xdfs through the WebHDFS gateway: ``webhdfs://``
paths, authenticated by OAuth2 bearer tokens the gateway's token endpoint issues for an
xdfs user and password (Hadoop's ConfCredentialBasedAccessTokenProvider)."""

from __future__ import annotations

from typing import Any

TOKEN_PROVIDER = "org.apache.hadoop.hdfs.web.oauth2.ConfCredentialBasedAccessTokenProvider"


def hadoop_conf(http_address: str, user: str, password: str) -> dict[str, str]:
    """The Hadoop settings (without Spark's ``spark.hadoop.`` prefix) that let Hadoop's
    WebHDFS client reach the gateway at ``http_address`` (host:port) as ``user``."""
    return {
        "dfs.webhdfs.oauth2.enabled": "true",
        "dfs.webhdfs.oauth2.access.token.provider": TOKEN_PROVIDER,
        "dfs.webhdfs.oauth2.client.id": user,
        "dfs.webhdfs.oauth2.credential": password,
        "dfs.webhdfs.oauth2.refresh.url": f"http://{http_address}/oauth2/token",
    }


def configure(session: Any, http_address: str, user: str, password: str) -> None:
    """Apply :func:`hadoop_conf` to a running SparkSession (file systems created from
    now on use it; ``spark.hadoop.*`` settings at build time do the same)."""
    conf = session.sparkContext._jsc.hadoopConfiguration()
    for key, value in hadoop_conf(http_address, user, password).items():
        conf.set(key, value)
