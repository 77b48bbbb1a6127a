"""The name dirs on disk: the storage directory (``VERSION``, ``seen_txid``, the lock),
fsimage files, startup recovery and checkpoints with their retention, format, and moving
images over RPC."""
