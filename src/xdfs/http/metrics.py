"""``GET /metrics``: a server's Prometheus series (xdfs.metrics), in the text format."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from xdfs.metrics import ServerMetrics

METRICS_PATH = "/metrics"


def metrics_routes(metrics: ServerMetrics) -> list[web.RouteDef]:
    async def scrape(request: web.Request) -> web.Response:
        # Collectors read in-memory figures only: a scrape is a short step of the loop.
        return web.Response(body=generate_latest(metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    return [web.get(METRICS_PATH, scrape)]
