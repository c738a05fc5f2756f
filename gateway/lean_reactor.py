"""Twisted's reactor, imported without pyOpenSSL.

On import, Twisted's TCP and POSIX reactor modules and its endpoints load pyOpenSSL, cryptography and
service_identity for ``startTLS``, ``listenSSL`` and the ``ssl:`` endpoints: about 13 MB resident in every
process, TLS configured or not. We use none of them: a TLS port or link is a ``TLSMemoryBIOProtocol`` around
the remoting protocol (``gateway.tls``), and those modules import pyOpenSSL themselves, only when a TLS mode
is configured.
"""

from __future__ import annotations

import sys


def install() -> None:
    """Import the default reactor and Twisted's endpoints with pyOpenSSL hidden; call it before anything
    imports either."""
    if {"twisted.internet.reactor", "twisted.internet.endpoints", "OpenSSL"} & sys.modules.keys():
        return  # too late, or someone needs it already
    sys.modules["OpenSSL"] = None  # type: ignore[assignment]  # "import OpenSSL" raises ImportError
    try:
        from twisted.internet import endpoints, reactor  # noqa: F401
    finally:
        del sys.modules["OpenSSL"]
