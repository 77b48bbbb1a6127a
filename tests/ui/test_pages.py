"""The NameNode's pages over plain HTTP (no browser): every way to log in (form and
cookie, HTTP Basic, a Bearer token), logging out, no open redirect after login, escaping
of hostile names, the permission checks of the browser, download through WebHDFS."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import requests

from tests.integration.conftest import ROOT, ROOT_PW
from tests.webhdfs.conftest import ALICE, ALICE_PW, WebCluster, start_web_cluster

HOSTILE = '<img src=x onerror="alert(1)">&\'.txt'


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebCluster]:
    yield from start_web_cluster(tmp_path_factory.mktemp("ui-pages"))


def session(web: WebCluster, user: str, password: str) -> requests.Session:
    s = requests.Session()
    answer = s.post(f"http://{web.http}/ui/login",
                    data={"user": user, "password": password, "next": "/ui/datanodes"},
                    timeout=60)
    assert answer.status_code == 200 and answer.url.endswith("/ui/datanodes"), answer.text
    return s


def test_basic_and_bearer_credentials_work_without_the_form(web: WebCluster) -> None:
    page = requests.get(f"http://{web.http}/ui/", auth=(ROOT, ROOT_PW), timeout=60)
    assert page.status_code == 200 and "<h1>Overview</h1>" in page.text
    token = web.run(_login(web))
    page = requests.get(f"http://{web.http}/ui/startup", timeout=60,
                        headers={"Authorization": f"Bearer {token}"})
    assert page.status_code == 200 and "load image and replay edits" in page.text
    wrong = requests.get(f"http://{web.http}/ui/", auth=(ROOT, "nope"), timeout=60)
    assert wrong.status_code == 401 and "Log in again" in wrong.text


async def _login(web: WebCluster) -> str:
    async with web.client() as client:
        return (await client.login(ROOT, ROOT_PW)).token


def test_the_form_sets_a_cookie_logout_drops_it_and_next_stays_local(
    web: WebCluster,
) -> None:
    s = session(web, ROOT, ROOT_PW)
    assert s.cookies.get("xdfs_ui_token")
    assert s.get(f"http://{web.http}/ui/", timeout=60).url.endswith("/ui/")
    s.get(f"http://{web.http}/ui/logout", timeout=60)
    assert "/ui/login" in s.get(f"http://{web.http}/ui/", timeout=60).url
    for target in ("//evil.example/", "http://evil.example/", "/webhdfs/v1/?op=x"):
        answer = requests.post(f"http://{web.http}/ui/login", timeout=60, data={
            "user": ROOT, "password": ROOT_PW, "next": target})
        assert answer.url == f"http://{web.http}/ui/", target
    refused = requests.post(f"http://{web.http}/ui/login", timeout=60,
                            data={"user": ROOT, "password": "wrong", "next": "/ui/"})
    assert refused.status_code == 401 and "Login failed" in refused.text
    assert not refused.cookies


def test_hostile_names_are_escaped_and_the_download_is_the_file(web: WebCluster) -> None:
    directory = f"/pages-{uuid.uuid4().hex[:8]}"
    data = b"payload " * 10_000
    web.call("PUT", directory, "MKDIRS").raise_for_status()
    made = web.call("PUT", f"{directory}/{HOSTILE}", "CREATE", data=data)
    assert made.status_code == 201, made.text
    s = session(web, ROOT, ROOT_PW)
    listing = s.get(f"http://{web.http}/ui/browse", params={"path": directory}, timeout=60)
    assert "<img" not in listing.text
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;&#x27;.txt" in listing.text
    file_page = s.get(f"http://{web.http}/ui/browse", timeout=60,
                      params={"path": f"{directory}/{HOSTILE}"})
    assert "<img" not in file_page.text and "Blocks" in file_page.text
    download = s.get(f"http://{web.http}/ui/download", timeout=60,
                     params={"path": f"{directory}/{HOSTILE}"})
    assert download.status_code == 200 and download.content == data


def test_a_user_sees_what_the_permissions_let_them(web: WebCluster) -> None:
    private = f"/private-{uuid.uuid4().hex[:8]}"
    web.call("PUT", f"{private}/secret-name", "MKDIRS", permission="700").raise_for_status()
    web.call("PUT", private, "SETPERMISSION", permission="700").raise_for_status()
    alice = session(web, ALICE, ALICE_PW)
    denied = alice.get(f"http://{web.http}/ui/browse", params={"path": private}, timeout=60)
    assert denied.status_code == 403 and "secret-name" not in denied.text
    download = alice.get(f"http://{web.http}/ui/download", timeout=60,
                         params={"path": f"{private}/secret-name"})
    assert download.status_code == 403
    slow = alice.get(f"http://{web.http}/ui/slow", timeout=60)
    assert slow.status_code == 403 and "only a superuser" in slow.text
    root = session(web, ROOT, ROOT_PW)
    assert "secret-name" in root.get(f"http://{web.http}/ui/browse", timeout=60,
                                     params={"path": private}).text
    missing = root.get(f"http://{web.http}/ui/browse", params={"path": "/no/such"},
                       timeout=60)
    assert missing.status_code == 404
