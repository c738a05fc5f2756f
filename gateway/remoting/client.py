"""A remoting client: one cached connection per address, requests with timeouts, oneway sends.

Connections are made through an endpoint factory, so TLS can wrap them without touching callers.
Server-initiated requests (NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE) reach ``dispatcher``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.internet.endpoints import HostnameEndpoint, connectProtocol
from twisted.internet.interfaces import IStreamClientEndpoint

from .command import RemotingCommand
from .dispatch import RequestDispatcher
from .protocol import RemotingProtocol

EndpointFactory = Callable[[Any, str, int], IStreamClientEndpoint]
# Java's RPCHook.doBeforeRequest: sees each request just before it goes out, e.g. to sign it.
RequestHook = Callable[[str, RemotingCommand], None]


def tcp_endpoint(reactor: Any, host: str, port: int) -> IStreamClientEndpoint:
    return HostnameEndpoint(reactor, host, port, timeout=3)


def split_addr(addr: str) -> tuple[str, int]:
    """``host:port`` (IPv6 hosts may be bracketed or bare)."""
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


class RemotingClient:
    """Connections to many servers, keyed by ``host:port``."""

    def __init__(
        self,
        reactor: Any = None,
        dispatcher: RequestDispatcher | None = None,
        endpoint_factory: EndpointFactory = tcp_endpoint,
    ) -> None:
        if reactor is None:
            from twisted.internet import reactor as default_reactor

            reactor = default_reactor
        self.reactor = reactor
        self.dispatcher = dispatcher or RequestDispatcher(answer_unknown=True)
        self.endpoint_factory = endpoint_factory
        self.request_hooks: list[RequestHook] = []
        self._channels: dict[str, RemotingProtocol] = {}
        self._connecting: dict[str, list[defer.Deferred[RemotingProtocol]]] = {}
        self.dispatcher.on_channel_closed.append(self._forget)

    def _forget(self, channel: RemotingProtocol) -> None:
        for addr, ch in list(self._channels.items()):
            if ch is channel:
                del self._channels[addr]

    def get_channel(self, addr: str) -> defer.Deferred[RemotingProtocol]:
        """The open connection to ``addr``, connecting first if needed."""
        ch = self._channels.get(addr)
        if ch is not None and ch.connected_:
            return defer.succeed(ch)
        d: defer.Deferred[RemotingProtocol] = defer.Deferred()
        waiters = self._connecting.get(addr)
        if waiters is not None:
            waiters.append(d)
            return d
        self._connecting[addr] = [d]
        host, port = split_addr(addr)
        conn = connectProtocol(
            self.endpoint_factory(self.reactor, host, port), RemotingProtocol(self.dispatcher, self.reactor)
        )

        def connected(proto: RemotingProtocol) -> None:
            self._channels[addr] = proto
            for w in self._connecting.pop(addr, []):
                w.callback(proto)

        def failed(f: Any) -> None:
            for w in self._connecting.pop(addr, []):
                w.errback(f)

        conn.addCallbacks(connected, failed)
        return d

    def _before_request(self, addr: str, request: RemotingCommand) -> None:
        for hook in self.request_hooks:
            hook(addr, request)

    def invoke(self, addr: str, request: RemotingCommand, timeout: float = 3.0) -> defer.Deferred[RemotingCommand]:
        """Send ``request`` to ``addr``; the Deferred fires with the response."""
        self._before_request(addr, request)
        return self.get_channel(addr).addCallback(lambda ch: ch.invoke(request, timeout))

    def invoke_oneway(self, addr: str, request: RemotingCommand) -> defer.Deferred[None]:
        self._before_request(addr, request)
        return self.get_channel(addr).addCallback(lambda ch: ch.invoke_oneway(request))

    def close(self) -> defer.Deferred[Any]:
        """Close every connection; fires when all are gone."""
        waits = []
        for ch in list(self._channels.values()):
            if ch.connected_:
                d: defer.Deferred[None] = defer.Deferred()
                self.dispatcher.on_channel_closed.append(
                    lambda c, ch=ch, d=d: c is ch and not d.called and d.callback(None)
                )
                waits.append(d)
                ch.close()
        self._channels.clear()
        return defer.DeferredList(waits)
