"""``xdfs logservice``: the replicated log service's server (seeds 002, 004)."""
