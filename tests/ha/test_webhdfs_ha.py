"""WebHDFS on an HA pair, with real processes and fsspec's own ``webhdfs`` client (one
nobody here wrote): each NameNode serves its gateway whatever its state; the standby
answers every request with HDFS's StandbyException (403, RemoteException JSON), the
active works, and after a failover it is the other way round.
``xdfs.client.webhdfs_ha`` finds the active gateway each time."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest

from xdfs.client.webhdfs_ha import active_webhdfs, webhdfs_filesystem
from xdfs.testing.net import free_port

from ..journal.qjm_cluster import PASSWORD, USER
from .cluster import IDS, HaCluster, formatted_pair

pytestmark = pytest.mark.slow


@pytest.fixture
def ha(tmp_path: Path) -> Iterator[tuple[HaCluster, dict[str, str]]]:
    gateways = {nn_id: f"127.0.0.1:{free_port()}" for nn_id in IDS}
    with formatted_pair(tmp_path) as cluster:
        for nn_id in IDS:
            cluster.start(nn_id, "-D", f"namenode.http_address={gateways[nn_id]}")
        yield cluster, gateways


def _fs(gateway: str) -> fsspec.AbstractFileSystem:
    host, port = gateway.rsplit(":", 1)
    return fsspec.filesystem("webhdfs", host=host, port=int(port), user=USER,
                             password=PASSWORD, skip_instance_cache=True)


def _remote_exception(gateway: str, query: str, method: str = "GET"
                      ) -> tuple[int, dict[str, str]]:
    request = urllib.request.Request(f"http://{gateway}/webhdfs/v1/{query}", method=method)
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=30)
    return caught.value.code, json.loads(caught.value.read())["RemoteException"]


def _assert_standby(gateway: str) -> None:
    """fsspec's client fails (it raises RuntimeError with the message of any exception
    it does not map), and the answer has HDFS's StandbyException shape, for reads and
    writes alike."""
    with pytest.raises(RuntimeError, match="standby"):
        _fs(gateway).ls("/")
    with pytest.raises(RuntimeError, match="standby"):
        _fs(gateway).mkdir("/refused")
    for query, method in (("?op=LISTSTATUS", "GET"), ("x?op=MKDIRS", "PUT"),
                          ("x?op=DELETE", "DELETE")):
        status, remote = _remote_exception(gateway, query, method)
        assert status == 403
        assert remote["exception"] == "StandbyException"
        assert remote["javaClassName"] == "org.apache.hadoop.ipc.StandbyException"
        assert "standby" in remote["message"]


def _oauth2(gateway: str, password: str, user: str = USER) -> tuple[int, dict[str, object]]:
    form = urllib.parse.urlencode({"grant_type": "client_credentials", "client_id": user,
                                   "client_secret": password}).encode()
    request = urllib.request.Request(f"http://{gateway}/oauth2/token", method="POST",
                                     data=form)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _home_by_token(gateway: str, token: object) -> str:
    request = urllib.request.Request(f"http://{gateway}/webhdfs/v1/?op=GETHOMEDIRECTORY",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return str(json.loads(answer.read())["Path"])


def _assert_standby_issues_tokens(standby: str, active: str) -> None:
    """The standby's token endpoint answers (Hadoop's client knows one refresh.url),
    its tokens work on the active, and it checks the password as the active does."""
    status, body = _oauth2(standby, PASSWORD)
    assert status == 200, body
    assert body["token_type"] == "bearer" and int(str(body["expires_in"])) > 0
    assert _home_by_token(active, body["access_token"]) == f"/user/{USER}"
    for user, password in ((USER, "wrong"), ("nobody", PASSWORD)):
        status, body = _oauth2(standby, password, user)
        assert (status, body) == (401, {"error": "invalid_client"}), user


def _ok(result: object) -> None:
    assert getattr(result, "returncode", 1) == 0, getattr(result, "stderr", "")


def test_the_standby_gateway_answers_standby_exception_and_follows_failovers(
    ha: tuple[HaCluster, dict[str, str]],
) -> None:
    cluster, gateways = ha
    # Both standby at first: both gateways serve, both refuse.
    for nn_id in IDS:
        _assert_standby(gateways[nn_id])
    _ok(cluster.admin("-transitionToActive", "nn1"))
    _assert_standby(gateways["nn2"])
    active = _fs(gateways["nn1"])
    active.mkdir("/via-nn1")
    assert "/via-nn1" in {entry.rstrip("/") for entry in active.ls("/", detail=False)}
    assert active_webhdfs([gateways["nn2"], gateways["nn1"]]) == gateways["nn1"]
    _assert_standby_issues_tokens(gateways["nn2"], gateways["nn1"])

    _ok(cluster.admin("-transitionToStandby", "nn1"))
    _ok(cluster.admin("-transitionToActive", "nn2"))
    _assert_standby(gateways["nn1"])
    found = webhdfs_filesystem([gateways["nn1"], gateways["nn2"]], user=USER,
                               password=PASSWORD)
    assert found.url == f"http://{gateways['nn2']}/webhdfs/v1"
    found.mkdir("/via-nn2")
    _assert_standby_issues_tokens(gateways["nn1"], gateways["nn2"])
    listed = {entry.rstrip("/") for entry in _fs(gateways["nn2"]).ls("/", detail=False)}
    assert {"/via-nn1", "/via-nn2"} <= listed
