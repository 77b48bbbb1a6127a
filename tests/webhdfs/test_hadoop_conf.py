"""``xdfs conf --hadoop``: the Hadoop settings of a nameservice as an hdfs-site.xml that
Hadoop's Configuration reads (checked here with an XML parser), password masked unless
asked for."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import tomli_w

CONF = {
    "ha": {"nameservice": "prod", "namenodes": {"nn1": "h1:8020", "nn2": "h2:8020"},
           "webhdfs": {"nn1": "h1:9870", "nn2": "h2:9870"}},
    "client": {"user": "alice", "password": "p&<w>"},
}


def _conf(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "xdfs.toml"
    path.write_text(tomli_w.dumps(CONF))
    return subprocess.run([sys.executable, "-m", "xdfs", "--conf", str(path), "conf",
                           "--hadoop", *args], capture_output=True, text=True, timeout=60,
                          check=False)


def _properties(xml: str) -> dict[str, str]:
    root = ET.fromstring(xml)
    assert root.tag == "configuration"
    return {p.findtext("name", ""): p.findtext("value", "") for p in root.iter("property")}


def test_hadoop_settings_of_the_nameservice(tmp_path: Path) -> None:
    shown = _conf(tmp_path, "--show-secrets")
    assert shown.returncode == 0, shown.stderr
    assert _properties(shown.stdout) == {
        "dfs.nameservices": "prod",
        "dfs.ha.namenodes.prod": "nn1,nn2",
        "dfs.namenode.http-address.prod.nn1": "h1:9870",
        "dfs.namenode.http-address.prod.nn2": "h2:9870",
        "dfs.client.failover.proxy.provider.prod":
            "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider",
        "dfs.webhdfs.oauth2.enabled": "true",
        "dfs.webhdfs.oauth2.access.token.provider":
            "org.apache.hadoop.hdfs.web.oauth2.ConfCredentialBasedAccessTokenProvider",
        "dfs.webhdfs.oauth2.client.id": "alice",
        "dfs.webhdfs.oauth2.credential": "p&<w>",
        "dfs.webhdfs.oauth2.refresh.url": "http://h1:9870/oauth2/token",
    }
    masked = _conf(tmp_path)
    assert _properties(masked.stdout)["dfs.webhdfs.oauth2.credential"] == "********"
    assert "--show-secrets" in masked.stderr
    other = _conf(tmp_path, "--token-namenode", "nn2")
    assert _properties(other.stdout)["dfs.webhdfs.oauth2.refresh.url"] == (
        "http://h2:9870/oauth2/token")
    unknown = _conf(tmp_path, "--token-namenode", "nn3")
    assert unknown.returncode != 0 and "nn3" in unknown.stderr
