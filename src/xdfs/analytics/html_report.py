"""The single self-contained HTML report of ``xdfs analyze`` (inline CSS and SVG charts).

Structure, stable for tools and tests: the headline findings first
(``<section id="headlines">`` with one ``<li>`` per finding), then one ``<section id=...>``
per report, each with an
``<h2>``, its tables as ``<table class="report-table" data-table=NAME>`` (the Parquet table
of the same name, at most ``ROWS_SHOWN`` rows; the rest is in the Parquet table) and its
charts as ``<figure class="chart" data-chart=NAME>``.
"""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from xdfs.analytics.charts import human_bytes

ROWS_SHOWN = 50

_CSS = """
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 1100px; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; margin-top: 2em; }
table { border-collapse: collapse; margin: 1em 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th { background: #f0f3f7; } td.text { text-align: left; }
figure { margin: 1em 0; } figcaption { font-size: 12px; color: #555; }
p.note { color: #555; font-size: 13px; }
ul.headlines { font-size: 1.1em; background: #f7f7f0; padding: 0.8em 2em; }
"""


@dataclass
class Table:
    name: str
    columns: list[str]
    rows: list[tuple[Any, ...]]
    total_rows: int
    byte_columns: frozenset[str] = frozenset()


@dataclass
class Section:
    id: str
    title: str
    notes: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    charts: list[str] = field(default_factory=list)  # figure markup from charts.bar_chart


def _cell(value: object, is_bytes: bool) -> str:
    if value is None:
        return "<td></td>"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f'<td class="text">{html.escape(str(value))}</td>'
    text = f"{value:,.3f}" if isinstance(value, float) else f"{value:,}"
    if is_bytes:
        text += f" ({human_bytes(value)})"
    return f"<td>{html.escape(text)}</td>"


def _table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = []
    for row in table.rows[:ROWS_SHOWN]:
        cells = "".join(
            _cell(value, column in table.byte_columns)
            for column, value in zip(table.columns, row, strict=True)
        )
        body.append(f"<tr>{cells}</tr>")
    more = ""
    if table.total_rows > min(len(table.rows), ROWS_SHOWN):
        more = (f'<p class="note">{min(len(table.rows), ROWS_SHOWN)} of {table.total_rows} '
                f"rows shown; all are in tables/{html.escape(table.name)}.parquet</p>")
    return (
        f'<h3>{html.escape(table.name)}</h3><table class="report-table" '
        f'data-table="{html.escape(table.name)}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>{more}"
    )


def render(title: str, generated: dt.datetime, facts: list[tuple[str, str]],
           sections: list[Section], headlines: Sequence[str] = ()) -> str:
    toc = "".join(
        f'<li><a href="#{html.escape(s.id)}">{html.escape(s.title)}</a></li>' for s in sections
    )
    fact_rows = "".join(
        f'<tr><th>{html.escape(k)}</th><td class="text">{html.escape(v)}</td></tr>'
        for k, v in facts
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="note">Generated {html.escape(generated.isoformat(timespec="seconds"))}'
        "</p>",
    ]
    if headlines:
        items = "".join(f"<li>{html.escape(text)}</li>" for text in headlines)
        parts.append(f'<section id="headlines"><h2>Headline findings</h2>'
                     f'<ul class="headlines">{items}</ul></section>')
    parts.append(f'<table class="facts">{fact_rows}</table><ol>{toc}</ol>')
    for section in sections:
        parts.append(f'<section id="{html.escape(section.id)}">')
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        parts.extend(f'<p class="note">{html.escape(note)}</p>' for note in section.notes)
        parts.extend(section.charts)
        parts.extend(_table(table) for table in section.tables)
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts)
