"""Server-rendered HTML pages of the web UI: one layout, escaping, the shipped CSS.

No JavaScript and nothing fetched from elsewhere: a page is HTML and ``/ui/static/xdfs.css``
(package data). Everything a page shows that did not come from this module's own literals
goes through :func:`h` (file names, user names, error messages are hostile input)."""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Sequence
from importlib import resources

from aiohttp import web

from xdfs import __version__

UI_PREFIX = "/ui"
CSS_PATH = f"{UI_PREFIX}/static/xdfs.css"
#: Pages link each other by these; a server lists the ones it serves.
Nav = Sequence[tuple[str, str]]  # (href, label)


def h(value: object) -> str:
    """Escaped text (quotes too: values also go into attributes)."""
    return html.escape(str(value), quote=True)


def page(title: str, nav: Nav, body: str, *, role: str, user: str = "",
         status: int = 200) -> web.Response:
    links = "".join(f'<a href="{h(href)}">{h(label)}</a>' for href, label in nav)
    who = (f'<span class="user">{h(user)} · <a href="{UI_PREFIX}/logout">log out</a></span>'
           if user else "")
    text = (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{h(title)} · xdfs {h(role)}</title>"
        f'<link rel="stylesheet" href="{CSS_PATH}"></head><body>'
        f'<header><span class="brand">xdfs {h(role)}</span><nav>{links}</nav>{who}</header>'
        f"<main><h1>{h(title)}</h1>{body}</main>"
        f"<footer>xdfs {h(__version__)}</footer></body></html>"
    )
    return web.Response(text=text, content_type="text/html", status=status,
                        headers={"Cache-Control": "no-store",
                                 "Content-Security-Policy": "default-src 'self'"})


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, css: str = "") -> str:
    """A table; cells are HTML already (callers escape their values with :func:`h`)."""
    head = "".join(f"<th>{h(name)}</th>" for name in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>"
                   for row in rows)
    return f'<table class="{h(css)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def facts(items: Iterable[tuple[str, object]]) -> str:
    """A definition list of label -> value (values escaped)."""
    rows = "".join(f"<dt>{h(label)}</dt><dd>{h(value)}</dd>" for label, value in items)
    return f'<dl class="facts">{rows}</dl>'


def size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def bar(used: int, total: int) -> str:
    """A capacity bar: HTML's own meter element (no script, no inline style, which the
    pages' Content-Security-Policy forbids)."""
    percent = 100.0 * used / total if total > 0 else 0.0
    return (f'<meter class="bar" min="0" max="100" high="90" value="{percent:.1f}" '
            f'title="{percent:.1f}% used">{percent:.1f}%</meter> {percent:.1f}%')


def when(at_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at_s)) if at_s > 0 else "never"


async def _css(request: web.Request) -> web.Response:
    text = resources.files(__package__).joinpath("static/xdfs.css").read_text("utf-8")
    return web.Response(text=text, content_type="text/css",
                        headers={"Cache-Control": "max-age=3600"})


def static_routes() -> list[web.RouteDef]:
    return [web.get(CSS_PATH, _css)]
