"""The NameNode's WebHDFS-compatible REST gateway (:mod:`.gateway`)."""
