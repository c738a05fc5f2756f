"""Twisted's epoll reactor, imported without pyOpenSSL and without the legacy log context per ready descriptor.

On import, Twisted's TCP and POSIX reactor modules and its endpoints load pyOpenSSL, cryptography and
service_identity for ``startTLS``, ``listenSSL`` and the ``ssl:`` endpoints: about 13 MB resident in every
process, TLS configured or not. We use none of them: a TLS port or link is a ``TLSMemoryBIOProtocol`` around
the remoting protocol (``gateway.tls``), and those modules import pyOpenSSL themselves, only when a TLS mode
is configured.

The reactor installed is :class:`gateway.lean_epoll.LeanEPollReactor` where there is epoll, else Twisted's default.
"""

from __future__ import annotations

import select
import sys


def install() -> None:
    """Install the reactor (``LeanEPollReactor`` where there is epoll) and import Twisted's endpoints, with
    pyOpenSSL hidden; call it before anything imports the reactor or the endpoints."""
    if {"twisted.internet.reactor", "twisted.internet.endpoints", "OpenSSL"} & sys.modules.keys():
        return  # too late, or someone needs it already
    sys.modules["OpenSSL"] = None  # type: ignore[assignment]  # "import OpenSSL" raises ImportError
    try:
        if hasattr(select, "epoll"):
            from twisted.internet.main import installReactor

            from gateway.lean_epoll import LeanEPollReactor

            installReactor(LeanEPollReactor())
        from twisted.internet import endpoints, reactor  # noqa: F401
    finally:
        del sys.modules["OpenSSL"]
