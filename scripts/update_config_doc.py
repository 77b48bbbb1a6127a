"""Regenerate the key table at the end of docs/configuration.md from xdfs.config."""

from pathlib import Path

from xdfs.config import config_reference_markdown

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
MARKER = "| key | default | meaning |"

text = DOC.read_text()
DOC.write_text(text[: text.index(MARKER)] + config_reference_markdown())
