"""The quorum-write core: one writer, 2N+1 storage nodes, a majority makes a write durable.

Shared by the NameNode's quorum journal (HDFS's QJM, seed 001) and the log service's
ledgers (seeds 002, 004). Pure modules decide (:mod:`.calls`: who answered, is the quorum
reached; :mod:`.recovery`: which copy of an unfinished segment wins); asyncio drivers send.
"""
