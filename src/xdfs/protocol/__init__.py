"""Method tables of every xdfs service, shared by servers and clients (docs/protocol.md)."""
