"""The status page of a server that has no namespace to show (DataNode, JournalNode,
BackupNode): its facts, its recent slow calls, and ``/metrics``; plus the one way any server
starts an HTTP listener for them (``<role>.http_address``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from aiohttp import web

from xdfs.config import HttpConfig
from xdfs.http.metrics import METRICS_PATH, metrics_routes
from xdfs.http.server import HttpServer
from xdfs.http.ui import UI_PREFIX, facts, h, page, static_routes, table, when
from xdfs.metrics import ServerMetrics, SlowCall

STATUS_PATH = f"{UI_PREFIX}/status"
Facts = Callable[[], Sequence[tuple[str, object]]]


def slow_calls_table(calls: Iterable[SlowCall]) -> str:
    rows = [(h(when(call.at_s)), h(call.method), f"{call.seconds:.3f}", h(call.user),
             h(call.peer)) for call in reversed(list(calls))]
    if not rows:
        return "<p>No call was slower than rpc.slow_call_s.</p>"
    return table(["finished", "method", "seconds", "user", "peer"], rows, css="slow")


def status_page_route(role: str, metrics: ServerMetrics, status: Facts) -> web.RouteDef:
    """The status page (no login: it shows no file names) at ``/ui/status``."""
    nav = [(STATUS_PATH, "Status"), (METRICS_PATH, "Metrics")]

    async def show(request: web.Request) -> web.Response:
        body = (facts(status()) + "<h2>Recent slow calls</h2>"
                + slow_calls_table(metrics.rpc.slow_calls))
        return page(f"{role} status", nav, body, role=role)

    return web.get(STATUS_PATH, show)


def status_routes(role: str, metrics: ServerMetrics, status: Facts) -> list[web.RouteDef]:
    async def home(request: web.Request) -> web.Response:
        raise web.HTTPFound(STATUS_PATH)

    return [web.get("/", home), web.get(UI_PREFIX, home),
            status_page_route(role, metrics, status), *static_routes(),
            *metrics_routes(metrics)]


async def start_status_http(role: str, address: str, body_bytes_max: int,
                            metrics: ServerMetrics, status: Facts,
                            extra: Iterable[web.RouteDef] = (),
                            limits: HttpConfig | None = None) -> HttpServer | None:
    """An HTTP server on ``address`` with the status page and /metrics (and ``extra``
    routes: a DataNode's WebHDFS data part; ``limits``: its connection caps and timeouts,
    the defaults unless given); None when ``address`` is empty."""
    if not address:
        return None
    http = HttpServer(role, body_bytes_max, limits)
    http.add_routes([*extra, *status_routes(role, metrics, status)])
    await http.start(address)
    return http
