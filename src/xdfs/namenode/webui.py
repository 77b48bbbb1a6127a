"""The NameNode's web UI: overview, DataNodes, file-system browser, startup progress and
recent slow calls, server-rendered on the WebHDFS gateway's aiohttp app (one HTTP stack,
this NameNode's event loop), plus ``/metrics``.

Users log in as WebHDFS clients do (xdfs.http.auth: HTTP Basic, a Bearer token, or
``delegation=``), or with the login form, which puts an xdfs token (``login``, as the
RPC call) in an HttpOnly cookie. The browser lists and stats as that user, through the
namesystem's own permission checks (what ``xdfs dfs -ls`` would be refused, the page is
refused). The slow-call page names users and peers: superusers only. Every value shown is
escaped (xdfs.http.ui.h)."""

from __future__ import annotations

import logging
import posixpath
import stat as statmod
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from aiohttp import web

from xdfs import __version__
from xdfs.errors import AccessDenied, NotAuthenticated, XdfsError
from xdfs.http import webhdfs as w
from xdfs.http.auth import Credentials, request_credentials
from xdfs.http.metrics import METRICS_PATH, metrics_routes
from xdfs.http.server import read_form
from xdfs.http.ui import UI_PREFIX, bar, facts, h, page, size, static_routes, table, when
from xdfs.http.ui.status import slow_calls_table, status_page_route
from xdfs.namenode.blocks.fsck import datanode_report
from xdfs.namenode.metrics import NameNodeView, status_facts
from xdfs.protocol.namenode import DataNodeInfo, FileStatus

if TYPE_CHECKING:
    from xdfs.namenode.webhdfs.gateway import WebHdfsGateway

log = logging.getLogger(__name__)

_Page = Callable[[web.Request, str], Awaitable[web.StreamResponse]]
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

COOKIE = "xdfs_ui_token"
LOGIN_PATH = f"{UI_PREFIX}/login"
#: Entries one browser page lists (the rest: "next page" link).
BROWSE_PAGE_ENTRIES = 500
NAV = [(f"{UI_PREFIX}/", "Overview"), (f"{UI_PREFIX}/datanodes", "DataNodes"),
       (f"{UI_PREFIX}/browse?path=/", "Browse"), (f"{UI_PREFIX}/startup", "Startup"),
       (f"{UI_PREFIX}/slow", "Slow operations"), (METRICS_PATH, "Metrics")]


class WebUi:
    def __init__(self, node: NameNodeView, gateway: WebHdfsGateway) -> None:
        self.node = node
        self.gateway = gateway

    def routes(self) -> list[web.RouteDef]:
        assert self.node.server is not None, "HTTP starts after the RPC server"
        pages = {"/": self.overview, "/datanodes": self.datanodes, "/browse": self.browse,
                 "/startup": self.startup, "/slow": self.slow, "/download": self.download}
        routes = [web.get(UI_PREFIX + path, self._guarded(handler))
                  for path, handler in pages.items()]
        return [web.get("/", _home), web.get(UI_PREFIX, _home), *routes,
                web.get(LOGIN_PATH, self.login_form), web.post(LOGIN_PATH, self.login),
                web.get(f"{UI_PREFIX}/logout", self.logout), *static_routes(),
                status_page_route("namenode", self.node.server.metrics,
                                  lambda: status_facts(self.node)),
                *metrics_routes(self.node.server.metrics)]

    # -- who is asking ------------------------------------------------------------------

    def _guarded(self, handler: _Page) -> _Handler:
        async def run(request: web.Request) -> web.StreamResponse:
            try:
                user = await self._user(request)
            except NotAuthenticated:
                raise web.HTTPFound(f"{LOGIN_PATH}?{urlencode({'next': request.path_qs})}"
                                    ) from None
            except XdfsError as exc:  # a bad or expired token, a wrong password
                return self._login_page(f"Log in again: {exc.message}", request.path_qs,
                                        status=401)
            try:
                return await handler(request, user)
            except XdfsError as exc:
                return page("Error", NAV, f'<p class="error">{h(exc.message)}</p>',
                            role="namenode", user=user,
                            status=w.remote_exception(exc).status)
        return run

    async def _user(self, request: web.Request) -> str:
        token = request.cookies.get(COOKIE, "")
        if token:
            credentials = Credentials(token=token)
        else:
            credentials = request_credentials(request.query, request.headers,
                                              self.node.config.http.auth)
        return await self.gateway.user(credentials, request.remote or "")

    async def login_form(self, request: web.Request) -> web.Response:
        return self._login_page("", request.query.get("next", ""))

    def _login_page(self, error: str, next_path: str, status: int = 200) -> web.Response:
        message = f'<p class="error">{h(error)}</p>' if error else ""
        body = (f'{message}<form class="login" method="post" action="{LOGIN_PATH}">'
                f'<input type="hidden" name="next" value="{h(next_path)}">'
                '<label for="user">User</label><input id="user" name="user" autofocus>'
                '<label for="password">Password</label>'
                '<input id="password" name="password" type="password">'
                '<button id="login" type="submit">Log in</button></form>')
        return page("Log in", [], body, role="namenode", status=status)

    async def login(self, request: web.Request) -> web.StreamResponse:
        try:
            form = await read_form(request, self.node.config.http.body_idle_timeout_s)
        except XdfsError as exc:
            return self._login_page(exc.message, "", status=400)
        user, password = str(form.get("user", "")), str(form.get("password", ""))
        next_path = _local(str(form.get("next", "")))
        auth = self.node.auth
        assert auth is not None, "HTTP serves an active NameNode"
        try:
            token, _expires_ms = await auth.login(user, password, 0.0,
                                                  f"{request.remote or ''}:0")
        except XdfsError as exc:
            log.info("web UI login of %r refused: %s", user[:64], exc.message)
            return self._login_page(f"Login failed: {exc.message}", next_path, status=401)
        response = web.HTTPFound(next_path)
        response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/")
        raise response

    async def logout(self, request: web.Request) -> web.StreamResponse:
        response = web.HTTPFound(LOGIN_PATH)
        response.del_cookie(COOKIE, path="/")
        raise response

    # -- pages --------------------------------------------------------------------------

    async def overview(self, request: web.Request, user: str) -> web.Response:
        node = self.node
        fs, edits = node.fs, node.edits
        assert fs is not None and edits is not None and node.version is not None
        report = datanode_report(fs.ns, fs.blocks)
        live = sum(1 for info in report.nodes if info.state == "live")
        safe = "ON: " + fs.safe_mode.reason if fs.safe_mode.on else "off"
        summary = facts([
            ("Cluster id", node.version.cluster_id),
            ("Namespace id", node.version.namespace_id),
            ("Version", __version__),
            ("HA state", node.ha_state + ("" if node.ha_enabled else " (no HA configured)")),
            ("Safe mode", safe),
            ("Started", when(node.started_at_ms / 1000)),
            ("Files and directories", fs.ns.inode_count()),
            ("Blocks", report.blocks),
            ("DataNodes", f"{live} live, {len(report.nodes) - live} dead"),
        ])
        blocks = facts([
            ("Under-replicated", report.under_replicated),
            ("Missing", report.missing_blocks),
            ("Corrupt", report.corrupt_blocks),
            ("Pending replication", report.pending_replication),
            ("Pending deletion", report.pending_deletion),
        ])
        capacity = (f'<p id="capacity">{bar(report.used_bytes, report.capacity_bytes)} — '
                    f"{h(size(report.used_bytes))} used, {h(size(report.free_bytes))} "
                    f"remaining of {h(size(report.capacity_bytes))}</p>")
        journal = facts([
            ("Last checkpoint", f"txid {node.image_txid} at {when(node.last_checkpoint_s)}"),
            ("Edits", f"last txid {edits.last_txid}, synced {edits.synced_txid}, segment "
                      f"from {edits.current_segment_start}"),
            ("Shared journal", node.config.namenode.shared_edits or "none (local edits)"),
            *([("Standby: applied txid", node.standby.last_txid),
               ("Standby: journal", node.standby.error or "reading")] if node.standby else []),
        ])
        backups = (node.replicator.backup_infos(node.config.namenode.backup_forget_s)
                   if node.replicator is not None else [])
        followers = table(["follower", "synced txid", "behind (txns)", "last fetch"],
                          [(h(b.address), h(b.synced_txid), h(b.lag_txns),
                            h(when(b.last_fetch_ms / 1000))) for b in backups]
                          ) if backups else "<p>No BackupNode follows this NameNode.</p>"
        body = (f'<section id="summary">{summary}</section><h2>Capacity</h2>{capacity}'
                f"<h2>Blocks</h2>{blocks}<h2>Journal</h2>{journal}{followers}")
        return page("Overview", NAV, body, role="namenode", user=user)

    async def datanodes(self, request: web.Request, user: str) -> web.Response:
        fs = self.node.fs
        assert fs is not None
        report = datanode_report(fs.ns, fs.blocks)
        rows = [_datanode_row(info) for info in report.nodes]
        body = (table(["address", "state", "admin state", "rack", "capacity", "used",
                       "remaining", "blocks", "last contact", "transfers", "node id"], rows,
                      css="datanodes")
                if rows else "<p>No DataNode has registered.</p>")
        return page("DataNodes", NAV, body, role="namenode", user=user)

    async def browse(self, request: web.Request, user: str) -> web.Response:
        self.gateway.check_active()  # a standby's namespace may lag: browse the active's
        fs = self.node.fs
        assert fs is not None
        path = request.query.get("path", "/") or "/"
        status = fs.stat(user, path)
        if not status.is_dir:
            return self._file(user, path, status)
        start = request.query.get("after", "")
        entries, remaining = fs.list_dir(user, path, start, BROWSE_PAGE_ENTRIES)
        rows = [_entry_row(entry) for entry in entries]
        more = (f'<p><a href="{_browse_url(path, after=entries[-1].path.rsplit("/", 1)[1])}">'
                f"next {BROWSE_PAGE_ENTRIES}</a></p>" if remaining and entries else "")
        parent = posixpath.dirname(path.rstrip("/")) or "/"
        up = "" if path == "/" else f'<p><a href="{_browse_url(parent)}">.. (parent)</a></p>'
        listing = table(["name", "permission", "owner", "group", "size", "replication",
                         "modified"], rows, css="listing") if rows else "<p>(empty)</p>"
        return page(f"Browse {path}", NAV, up + listing + more, role="namenode", user=user)

    def _file(self, user: str, path: str, status: FileStatus) -> web.Response:
        fs = self.node.fs
        assert fs is not None
        located = fs.block_locations(user, path, 0, -1)
        details = facts([
            ("Size", f"{size(status.length)} ({status.length} bytes)"),
            ("Permission", _mode(status)), ("Owner", status.owner), ("Group", status.group),
            ("Replication", status.replication), ("Block size", size(status.block_size)),
            ("Modified", when(status.mtime_ms / 1000)),
            ("Open for writing", "yes" if status.under_construction else "no"),
        ])
        rows = [(h(b.block.block_id), h(b.block.genstamp), h(b.offset), h(b.block.num_bytes),
                 h(", ".join(b.locations) or "none")) for b in located.blocks]
        blocks = table(["block id", "genstamp", "offset", "bytes", "locations"], rows,
                       css="blocks") if rows else "<p>No blocks.</p>"
        download = (f'<p><a id="download" href="{UI_PREFIX}/download?'
                    f'{h(urlencode({"path": path}))}">Download</a> (through WebHDFS)</p>')
        parent = posixpath.dirname(path) or "/"
        up = f'<p><a href="{_browse_url(parent)}">.. (parent)</a></p>'
        return page(f"File {path}", NAV, up + details + download + "<h2>Blocks</h2>" + blocks,
                    role="namenode", user=user)

    async def download(self, request: web.Request, user: str) -> web.StreamResponse:
        """To the DataNode URL of WebHDFS's OPEN, as its redirect: a token that reads this
        file only (refused here, on this page, when the user may not read it)."""
        self.gateway.check_active()
        path = request.query.get("path", "")
        raise web.HTTPFound(self.gateway.read_url(user, path, "OPEN", 0, {}))

    async def startup(self, request: web.Request, user: str) -> web.Response:
        node = self.node
        rows = [(h(phase.name), h(when(phase.started_s)),
                 h(f"{phase.ended_s - phase.started_s:.2f} s" if phase.ended_s else
                   "under way"), h(phase.detail)) for phase in node.startup.phases]
        fs = node.fs
        if fs is not None:
            reason = fs.safe_mode.reason or "left"
            rows.append(("safe mode", "", "ON" if fs.safe_mode.on else "done", h(reason)))
        body = table(["phase", "started", "took", "result"], rows, css="startup")
        return page("Startup progress", NAV, body, role="namenode", user=user)

    async def slow(self, request: web.Request, user: str) -> web.Response:
        node = self.node
        assert node.fs is not None and node.server is not None
        if not node.fs.ns.is_superuser(user):
            raise AccessDenied("only a superuser sees the slow operations (they name users)")
        rpc = node.server.metrics.rpc
        body = (f"<p>The {rpc.slow_calls.maxlen} most recent calls slower than "
                f"{rpc.slow_call_s:g} s (rpc.slow_call_s, rpc.slow_calls_kept), newest "
                f"first.</p>" + slow_calls_table(rpc.slow_calls))
        return page("Slow operations", NAV, body, role="namenode", user=user)


async def _home(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound(f"{UI_PREFIX}/")


def _local(path: str) -> str:
    """Where to go after logging in: a path of this UI only (never another site)."""
    return path if path.startswith(UI_PREFIX + "/") and "//" not in path else f"{UI_PREFIX}/"


def _browse_url(path: str, after: str = "") -> str:
    query = {"path": path, **({"after": after} if after else {})}
    return h(f"{UI_PREFIX}/browse?{urlencode(query)}")


def _mode(status: FileStatus) -> str:
    kind = statmod.S_IFDIR if status.is_dir else statmod.S_IFREG
    text = statmod.filemode(kind | (status.mode & 0o777))
    return text + ("t" if status.mode & 0o1000 else "")


def _entry_row(entry: FileStatus) -> tuple[str, ...]:
    name = entry.path.rsplit("/", 1)[1] + ("/" if entry.is_dir else "")
    link = f'<a href="{_browse_url(entry.path)}">{h(name)}</a>'
    return (link, h(_mode(entry)), h(entry.owner), h(entry.group),
            "" if entry.is_dir else h(size(entry.length)),
            "" if entry.is_dir else h(entry.replication), h(when(entry.mtime_ms / 1000)))


def _datanode_row(info: DataNodeInfo) -> tuple[str, ...]:
    state = f'<span class="{h(info.state)}">{h(info.state)}</span>'
    admin = info.admin_state
    if admin in ("decommissioning", "entering_maintenance"):
        admin += f" ({info.decommission_blocks_left} blocks left)"
    elif admin == "in_maintenance" and info.maintenance_expiry_ms:
        admin += f" until {when(info.maintenance_expiry_ms / 1000)}"
    return (h(info.address), state, h(admin), h(info.rack), h(size(info.capacity_bytes)),
            bar(info.used_bytes, info.capacity_bytes), h(size(info.free_bytes)),
            h(info.blocks), h(f"{info.last_contact_s:.1f} s ago"),
            h(info.transfers_in_progress), h(info.node_id))
