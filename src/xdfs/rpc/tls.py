"""Optional TLS for every RPC connection, configured by ``rpc.tls_*`` keys."""

from __future__ import annotations

import ssl

from xdfs.config import RpcConfig


def server_context(config: RpcConfig) -> ssl.SSLContext | None:
    """A server context when a certificate and key are configured, else None (plain TCP)."""
    if not config.tls_cert_file:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(config.tls_cert_file, config.tls_key_file)
    return context


def client_context(config: RpcConfig) -> ssl.SSLContext | None:
    """A verifying client context when a CA bundle is configured, else None (plain TCP)."""
    if not config.tls_ca_file:
        return None
    context = ssl.create_default_context(cafile=config.tls_ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
