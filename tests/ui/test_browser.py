"""The web UI in a real browser against a real cluster (``xdfs dev`` processes): login,
every page with the cluster's own figures, a DataNode killed -9 shown dead, a hostile file
name shown as text, a non-superuser refused another user's 0700 directory; a screenshot of
each page (tmp dir; docs/screenshots/ holds a reviewed copy)."""

from __future__ import annotations

import asyncio
import os
import signal
from urllib.parse import urlparse

import pytest
import requests
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from tests.ui.conftest import DevCluster, log_in, replaced, screenshot, text
from xdfs.testing.poll import eventually

pytestmark = pytest.mark.slow

HOSTILE = '<img id="evil" src="x">&"\'.txt'
DATA = os.urandom(200_000)


def facts(browser: webdriver.Chrome, section: str = "") -> dict[str, str]:
    terms = browser.find_elements(By.CSS_SELECTOR, f"{section} dl.facts dt")
    values = browser.find_elements(By.CSS_SELECTOR, f"{section} dl.facts dd")
    return {t.text: v.text for t, v in zip(terms, values, strict=True)}


def rows(browser: webdriver.Chrome, table: str) -> list[list[str]]:
    return [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            for row in browser.find_elements(By.CSS_SELECTOR, f"table.{table} tbody tr")]


def test_login_overview_and_datanodes_show_the_clusters_figures(
    dev: DevCluster, browser: webdriver.Chrome
) -> None:
    with dev.client() as client:
        client.mkdirs("/ui")
        client.write_file("/ui/figures", DATA)
        status = client.status()
        report = client.datanode_report()
    log_in(browser, dev)
    assert urlparse(browser.current_url).path == "/ui/"
    shown = facts(browser, "#summary")
    assert shown["Cluster id"] == status.cluster_id
    assert shown["HA state"].startswith("active")
    assert shown["Safe mode"] == "off"
    assert shown["DataNodes"] == "2 live, 0 dead"
    assert int(shown["Blocks"]) == report.blocks
    assert int(shown["Files and directories"]) >= 3  # /, /ui, /ui/figures (and more)
    assert "used" in browser.find_element(By.ID, "capacity").text
    screenshot(browser, dev, "overview")

    browser.get(dev.url("/ui/datanodes"))
    listed = {row[0]: row for row in rows(browser, "datanodes")}
    assert set(listed) == {node.address for node in report.nodes}
    assert all(row[1] == "live" for row in listed.values())
    screenshot(browser, dev, "datanodes")

    for page, heading in (("/ui/startup", "Startup progress"),
                          ("/ui/slow", "Slow operations")):
        browser.get(dev.url(page))
        assert browser.find_element(By.TAG_NAME, "h1").text == heading
        screenshot(browser, dev, page.rsplit("/", 1)[1])
    browser.get(dev.url("/ui/startup"))
    phases = rows(browser, "startup")
    assert phases[0][0] == "load image and replay edits"
    assert phases[-1][:1] == ["safe mode"] and phases[-1][2] == "done"


def test_the_browser_lists_files_blocks_and_downloads_with_hostile_names_escaped(
    dev: DevCluster, browser: webdriver.Chrome
) -> None:
    path = f"/ui/{HOSTILE}"
    with dev.client() as client:
        client.mkdirs("/ui")
        client.write_file(path, DATA)
        located = client.block_locations(path)
    log_in(browser, dev, path="/ui/browse?path=/ui")
    assert browser.find_elements(By.ID, "evil") == []  # shown as text, never as markup
    link = browser.find_element(By.LINK_TEXT, HOSTILE)
    screenshot(browser, dev, "browse")
    link.click()
    WebDriverWait(browser, 60).until(lambda _driver: replaced(link))
    assert browser.find_element(By.TAG_NAME, "h1").text == f"File {path}"
    blocks = rows(browser, "blocks")
    assert [int(row[0]) for row in blocks] == [b.block.block_id for b in located.blocks]
    assert [set(row[4].split(", ")) for row in blocks] == [
        set(b.locations) for b in located.blocks]
    screenshot(browser, dev, "file")
    download = browser.find_element(By.ID, "download").get_attribute("href")
    assert download is not None
    cookies = {c["name"]: c["value"] for c in browser.get_cookies()}
    fetched = requests.get(download, cookies=cookies, timeout=60)
    assert fetched.status_code == 200 and fetched.content == DATA
    anonymous = requests.get(download, timeout=60)  # no cookie: to the login form
    assert urlparse(anonymous.url).path == "/ui/login" and anonymous.content != DATA


def test_a_non_superuser_cannot_browse_another_users_private_directory(
    dev: DevCluster, browser: webdriver.Chrome
) -> None:
    with dev.client() as client:
        client.add_user("carol", "carol-pw", ["staff"])
        client.mkdirs("/private/inner")
        client.set_permission("/private", 0o700)
    log_in(browser, dev, "carol", "carol-pw", path="/ui/browse?path=/private")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Error"
    assert "Permission denied" in text(browser)
    assert "inner" not in text(browser)
    screenshot(browser, dev, "denied")
    browser.get(dev.url("/ui/slow"))  # names users and peers: superusers only
    assert "only a superuser" in text(browser)
    browser.get(dev.url("/ui/browse?path=/"))
    assert "private/" in text(browser)  # the root lists it (as ls would)


def test_a_wrong_password_is_refused_with_one_clear_message(
    dev: DevCluster, browser: webdriver.Chrome
) -> None:
    log_in(browser, dev, "root", "not-the-password")
    assert "Login failed" in browser.find_element(By.CLASS_NAME, "error").text
    assert browser.get_cookies() == []
    screenshot(browser, dev, "login-failed")


def test_status_pages_of_a_datanode_and_the_backup(
    dev: DevCluster, browser: webdriver.Chrome
) -> None:
    for role in ("datanode", "backupnode"):
        browser.get(dev.url("/", role))
        assert browser.find_element(By.TAG_NAME, "h1").text == f"{role} status"
        screenshot(browser, dev, f"{role}-status")
    browser.get(dev.url("/ui/status", "datanode"))
    assert "registered\nyes" in text(browser) or "yes" in facts(browser)["registered"]


def test_a_killed_datanode_shows_dead(dev: DevCluster, browser: webdriver.Chrome) -> None:
    """Last in this module: the cluster keeps one DataNode from here on."""
    victim = next(p for p in dev.processes if p["role"] == "datanode")
    os.kill(victim["pid"], signal.SIGKILL)
    log_in(browser, dev, path="/ui/datanodes")

    def shown_dead() -> bool:
        browser.refresh()
        listed = {row[0]: row[1] for row in rows(browser, "datanodes")}
        return listed.get(victim["address"]) == "dead"

    asyncio.run(eventually(shown_dead, what=f"{victim['address']} shown dead"))
    assert browser.find_elements(By.CSS_SELECTOR, "table.datanodes span.dead")
    screenshot(browser, dev, "datanodes-dead")
    browser.get(dev.url("/ui/"))
    assert facts(browser, "#summary")["DataNodes"] == "1 live, 1 dead"
