"""The Twisted side of remoting: one protocol for both ends of a connection.

Requests from the peer go to a :class:`~gateway.remoting.dispatch.RequestDispatcher`; responses
resolve the Deferred of the request with the same ``opaque`` (the AMP ``BoxDispatcher`` pattern).
Every pending request fails when the connection is lost. A malformed frame closes the connection.
"""

from __future__ import annotations

import itertools
from typing import Any

from twisted.internet import error
from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.protocols.policies import TimeoutMixin
from zope.interface import implementer

from .codec import FrameDecoder, ProtocolError, encode_parts
from .codes import RPC_ONEWAY
from .command import RemotingCommand
from .dispatch import RequestDispatcher

log = Logger()

# Java clients share one counter per JVM; ours is per process, which is all a peer can tell.
_opaque_counter = itertools.count(1)


class RemotingTimeoutError(Exception):
    """No response within the timeout."""


@implementer(IPushProducer)
class RemotingProtocol(Protocol, TimeoutMixin):
    """A remoting connection (server or client side).

    With ``idle_timeout`` (seconds) a connection that reads nothing for that long is closed, as
    Java's IdleStateHandler does (``serverChannelMaxIdleTimeSeconds``, 120 s).
    """

    def __init__(
        self, dispatcher: RequestDispatcher | None = None, clock: Any = None, idle_timeout: float | None = None
    ) -> None:
        self.dispatcher = dispatcher
        self.clock = clock
        self.idle_timeout = idle_timeout
        self.decoder = FrameDecoder()
        self.pending: dict[int, Deferred[RemotingCommand]] = {}
        self.connected_ = False
        self.peer = "?"
        self.peer_host = ""
        self.peer_port = 0
        # Free-form per-connection state for services (client id, ACL identity...).
        self.attributes: dict[str, Any] = {}
        self.factory: Any = None

    # -- connection lifecycle

    def connectionMade(self) -> None:
        self.connected_ = True
        addr = self.transport.getPeer()
        self.peer_host = getattr(addr, "host", "")
        self.peer_port = getattr(addr, "port", 0)
        self.peer = f"{self.peer_host}:{self.peer_port}"
        if self.clock is None:
            from twisted.internet import reactor

            self.clock = reactor
        if self.idle_timeout:
            self.callLater = self.clock.callLater
            self.setTimeout(self.idle_timeout)
        # Stop reading requests while our responses cannot be written (slow peer).
        self.transport.registerProducer(self, True)
        if isinstance(self.factory, RemotingServerFactory):
            self.factory.opened(self)
        if self.dispatcher is not None:
            self.dispatcher.channel_opened(self)

    def connectionLost(self, reason: Any = None) -> None:
        self.connected_ = False
        self.setTimeout(None)
        pending, self.pending = self.pending, {}
        for d in pending.values():
            d.errback(error.ConnectionLost(f"connection to {self.peer} lost"))
        if isinstance(self.factory, RemotingServerFactory):
            self.factory.closed(self)
        if self.dispatcher is not None:
            self.dispatcher.channel_closed(self)

    # -- IPushProducer: the transport tells us when its write buffer is full

    def pauseProducing(self) -> None:
        self.transport.pauseProducing()

    def resumeProducing(self) -> None:
        self.transport.resumeProducing()

    def stopProducing(self) -> None:
        pass

    # -- input

    def timeoutConnection(self) -> None:
        log.info("closing idle connection {peer}", peer=self.peer)
        self.transport.abortConnection()

    def dataReceived(self, data: bytes) -> None:
        if self.timeOut:
            self.resetTimeout()
        try:
            commands = self.decoder.feed(data)
        except ProtocolError as e:
            log.warn("closing {peer}: {error}", peer=self.peer, error=e)
            self.transport.abortConnection()
            return
        for cmd in commands:
            if cmd.is_response:
                d = self.pending.pop(cmd.opaque, None)
                if d is None:
                    log.debug("response with unknown opaque {opaque} from {peer}", opaque=cmd.opaque, peer=self.peer)
                else:
                    d.callback(cmd)
            elif self.dispatcher is not None:
                self.dispatcher.dispatch(self, cmd)

    # -- output

    def send_command(self, cmd: RemotingCommand) -> None:
        """Write a command (a response, or a request whose opaque is set)."""
        if self.connected_:
            self.transport.writeSequence(encode_parts(cmd))

    def invoke(self, request: RemotingCommand, timeout: float = 3.0) -> Deferred[RemotingCommand]:
        """Send a request and get a Deferred of its response (RemotingTimeoutError on timeout)."""
        if not self.connected_:
            return _failed(error.ConnectionLost(f"not connected to {self.peer}"))
        opaque = next(_opaque_counter) & 0x7FFFFFFF
        request.opaque = opaque
        request.flag &= ~RPC_ONEWAY
        d: Deferred[RemotingCommand] = Deferred(lambda _d: self.pending.pop(opaque, None))
        self.pending[opaque] = d
        d.addTimeout(timeout, self.clock, onTimeoutCancel=_on_timeout(self.peer, request.code, timeout))
        self.transport.writeSequence(encode_parts(request))
        return d

    def invoke_oneway(self, request: RemotingCommand) -> None:
        """Send a request that gets no response."""
        request.opaque = next(_opaque_counter) & 0x7FFFFFFF
        request.flag |= RPC_ONEWAY
        self.send_command(request)

    def close(self) -> None:
        if self.transport is not None:
            # A transport waits for its producer to unregister before it closes (TLS does).
            self.transport.unregisterProducer()
            self.transport.loseConnection()


def _on_timeout(peer: str, code: int, timeout: float) -> Any:
    def raise_timeout(result: Any, t: float) -> Any:
        raise RemotingTimeoutError(f"request code {code} to {peer} timed out after {timeout}s")

    return raise_timeout


def _failed(exc: Exception) -> Deferred[Any]:
    d: Deferred[Any] = Deferred()
    d.errback(exc)
    return d


class RemotingServerFactory(Factory):
    """Server connections that share one dispatcher."""

    noisy = False

    def __init__(self, dispatcher: RequestDispatcher, idle_timeout: float | None = 120.0) -> None:
        self.dispatcher = dispatcher
        self.idle_timeout = idle_timeout
        self.channels: set[RemotingProtocol] = set()
        self._closing: dict[RemotingProtocol, Deferred[None]] = {}

    def opened(self, channel: RemotingProtocol) -> None:
        self.channels.add(channel)

    def closed(self, channel: RemotingProtocol) -> None:
        self.channels.discard(channel)
        d = self._closing.pop(channel, None)
        if d is not None:
            d.callback(None)

    def close_all(self) -> Deferred[Any]:
        """Abort every open connection; fires once all are closed (a stopped server keeps none)."""
        waits = []
        for channel in list(self.channels):
            d: Deferred[None] = Deferred()
            self._closing[channel] = d
            waits.append(d)
            channel.transport.abortConnection()
        return DeferredList(waits, consumeErrors=True)

    def buildProtocol(self, addr: Any) -> RemotingProtocol:
        p = RemotingProtocol(self.dispatcher, idle_timeout=self.idle_timeout)
        p.factory = self
        return p
