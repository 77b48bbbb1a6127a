"""Clients of xdfs: the Python API (client.py) and the fsspec file system (fsspec_impl.py)."""
