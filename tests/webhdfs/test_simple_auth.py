"""``http.auth = "simple"``: user.name is trusted as it stands (HDFS's insecure default),
only when configured; the user must exist, credentials still work, and the DataNode side
still takes only what the NameNode's redirect carries."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from tests.webhdfs.conftest import ALICE, WebCluster, start_web_cluster
from tests.webhdfs.test_rest import put_file_as


@pytest.fixture(scope="module")
def simple_web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebCluster]:
    yield from start_web_cluster(tmp_path_factory.mktemp("webhdfs-simple"), auth="simple")


def test_user_name_is_trusted_in_simple_mode(simple_web: WebCluster) -> None:
    web = simple_web
    home = web.call("GET", "/", "GETHOMEDIRECTORY", auth=None, **{"user.name": ALICE})
    assert home.json() == {"Path": f"/user/{ALICE}"}
    # simple mode issues no delegation tokens (HDFS answers null there)
    token = web.call("GET", "/", "GETDELEGATIONTOKEN", auth=None, **{"user.name": ALICE})
    assert token.json() == {"Token": None}
    # writes act as that user, through the redirect (the NameNode signs it)
    mkdir = web.call("PUT", f"/user/{ALICE}", "MKDIRS")
    web.call("PUT", f"/user/{ALICE}", "SETOWNER", owner=ALICE).raise_for_status()
    assert mkdir.json() == {"boolean": True}
    created = put_file_as(web, f"/user/{ALICE}/f", b"simple", **{"user.name": ALICE})
    assert created.status_code == 201
    status = web.call("GET", f"/user/{ALICE}/f", "GETFILESTATUS").json()["FileStatus"]
    assert (status["owner"], status["length"]) == (ALICE, 6)
    # ... and are refused where that user may not write
    refused = web.call("PUT", "/forbidden", "MKDIRS", auth=None, **{"user.name": ALICE})
    assert refused.status_code == 403
    assert refused.json()["RemoteException"]["exception"] == "AccessControlException"


def test_unknown_users_are_refused_in_simple_mode(simple_web: WebCluster) -> None:
    answer = simple_web.call("GET", "/", "LISTSTATUS", auth=None, **{"user.name": "mallory"})
    assert answer.status_code == 401
    assert answer.json()["RemoteException"]["exception"] == "SecurityException"
    dn = simple_web.call("GET", "/", "LISTSTATUS", auth=None, **{"user.name": "dn/x"})
    assert dn.status_code == 401


def test_datanodes_never_trust_user_name(simple_web: WebCluster) -> None:
    location = simple_web.call("PUT", "/x", "CREATE", allow_redirects=False).headers["Location"]
    unsigned = location.split("?")[0] + f"?op=CREATE&user.name={ALICE}"
    answer = requests.put(unsigned, data=b"x", timeout=60)
    assert answer.status_code == 401
    assert simple_web.call("GET", "/x", "GETFILESTATUS").status_code == 404
