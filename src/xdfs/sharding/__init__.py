"""Metadata sharding as pure cores: the slot of a path, the slot map and its planner, the
two-phase commit of cross-shard changes. No sockets, no clock, no ``os``: the servers drive
them (docs/architecture.md, "Metadata sharding")."""
