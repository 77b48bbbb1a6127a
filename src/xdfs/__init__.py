"""xdfs: a distributed file system in Python (see DESIGN.md)."""

__version__ = "0.1.0"
