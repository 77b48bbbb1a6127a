"""A real cluster (``xdfs dev``: a NameNode, two DataNodes and a BackupNode, each its own
process, each serving HTTP) and a real browser: Debian's headless chromium driven by
selenium through Debian's chromium-driver (scripts/bootstrap.sh installs both). Screenshots
of the pages go to the test's tmp dir (``screenshots``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.wait import WebDriverWait

from tests.datapath.test_dev_cluster import ENV, PASSWORD, READY, USER, _client, stop_dev
from xdfs.client.client import Client
from xdfs.common.process import ProcessGroup

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: DataNodes are declared dead after 4 missed half-second heartbeats (the dead-node test).
CONF = """[namenode]
heartbeat_interval_s = 0.5
heartbeat_misses_dead = 4
"""


@dataclass
class DevCluster:
    base: Path
    uri: str
    processes: list[dict[str, Any]]
    screenshots: Path

    def http(self, role: str) -> str:
        return str(next(p["http"] for p in self.processes if p["role"] == role))

    def url(self, path: str, role: str = "namenode") -> str:
        return f"http://{self.http(role)}{path}"

    def client(self) -> Client:
        return _client(self.uri)


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    tmp = tmp_path_factory.mktemp("ui-dev")
    (tmp / "xdfs.toml").write_text(CONF)
    base = tmp / "dev"
    with ProcessGroup(tmp) as group:
        proc = group.start_xdfs(
            "dev", "--conf", str(tmp / "xdfs.toml"), "dev", "--base-dir", str(base),
            "--port", "0", "--datanodes", "2", "--backup",
            ready_pattern=READY, deadline_s=240, env=ENV)
        listing = json.loads((base / "cluster.json").read_text())["processes"]
        assert proc.match is not None
        try:
            yield DevCluster(base, proc.match.group(1), listing, tmp / "screenshots")
        finally:
            stop_dev(proc, listing)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    """A fresh headless chromium (its own profile: no cookie carries over)."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1280,900"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def log_in(browser: webdriver.Chrome, dev: DevCluster, user: str = USER,
           password: str = PASSWORD, path: str = "/ui/") -> None:
    browser.get(dev.url(path))
    assert "/ui/login" in browser.current_url  # not logged in: sent to the form
    browser.find_element(By.ID, "user").send_keys(user)
    browser.find_element(By.ID, "password").send_keys(password)
    button = browser.find_element(By.ID, "login")
    button.click()
    # the click does not wait for the answer: the form going stale means the next page
    # (the one asked for, or the form again with an error) has replaced it
    WebDriverWait(browser, 60).until(lambda _driver: replaced(button))


def replaced(element: WebElement) -> bool:
    """Whether ``element``'s page has been replaced. Mid-navigation chromedriver may answer
    "Node with given id does not belong to the document" instead of a stale reference
    (seen once in a full run); that too means the old document is gone."""
    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in str(exc):
            return True
        raise
    return False


def screenshot(browser: webdriver.Chrome, dev: DevCluster, name: str) -> Path:
    dev.screenshots.mkdir(exist_ok=True)
    path = dev.screenshots / f"{name}.png"
    assert browser.save_screenshot(str(path)), path
    return path


def text(browser: webdriver.Chrome) -> str:
    return browser.find_element(By.TAG_NAME, "body").text
