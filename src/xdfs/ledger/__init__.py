"""Ledger storage: the entries of the log service's ledgers on a storage node (served by
the JournalNode process next to its journals)."""
