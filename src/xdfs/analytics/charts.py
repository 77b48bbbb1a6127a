"""Hand-written SVG bar charts for the HTML report: no plotting library, no external
resources, so the report is one self-contained file that any browser shows."""

from __future__ import annotations

import html
from collections.abc import Sequence

WIDTH = 720
BAR_HEIGHT = 22
LABEL_WIDTH = 220
VALUE_WIDTH = 130


def human_bytes(value: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_count(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def bar_chart(
    name: str, title: str, labels: Sequence[str], values: Sequence[float], *,
    unit: str = "count",
) -> str:
    """A horizontal bar chart as ``<figure class="chart" data-chart=name>`` with one
    ``<rect class="bar">`` per value (each with a ``<title>`` tooltip)."""
    fmt = human_bytes if unit == "bytes" else human_count
    top = max((abs(v) for v in values), default=0) or 1
    plot_width = WIDTH - LABEL_WIDTH - VALUE_WIDTH
    height = BAR_HEIGHT * len(labels) + 10
    parts = [
        f'<figure class="chart" data-chart="{html.escape(name)}">',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{html.escape(title)}">',
    ]
    for index, (label, value) in enumerate(zip(labels, values, strict=True)):
        y = 5 + index * BAR_HEIGHT
        width = max(1.0, plot_width * abs(value) / top) if value else 0.0
        text = html.escape(label if len(label) <= 34 else "..." + label[-31:])
        parts.append(
            f'<text x="{LABEL_WIDTH - 6}" y="{y + 15}" text-anchor="end" '
            f'font-size="12">{text}</text>'
            f'<rect class="bar" x="{LABEL_WIDTH}" y="{y + 2}" width="{width:.1f}" '
            f'height="{BAR_HEIGHT - 6}" fill="#3b6ea5"><title>{html.escape(label)}: '
            f"{html.escape(fmt(value))}</title></rect>"
            f'<text x="{LABEL_WIDTH + width + 6:.1f}" y="{y + 15}" font-size="12">'
            f"{html.escape(fmt(value))}</text>"
        )
    parts.append("</svg>")
    parts.append(f"<figcaption>{html.escape(title)}</figcaption></figure>")
    return "".join(parts)
