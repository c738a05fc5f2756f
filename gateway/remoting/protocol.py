"""The Twisted side of remoting: one protocol for both ends of a connection.

Requests from the peer go to a :class:`~gateway.remoting.dispatch.RequestDispatcher`; responses
resolve the Deferred of the request with the same ``opaque`` (the AMP ``BoxDispatcher`` pattern).
Every pending request fails when the connection is lost. A malformed frame closes the connection.
A server's connections charge the bytes they hold (a partial frame, replies the peer is not reading)
to the server's :class:`~gateway.remoting.budget.MemoryBudget`, which closes the newest of them when
the total passes its cap.
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

from .budget import MemoryBudget
from .codec import FrameDecoder, ProtocolError, encode_parts
from .codes import RPC_ONEWAY
from .command import RemotingCommand
from .direct import buffers_nothing, can_send_now, send_now, set_no_delay
from .dispatch import RequestDispatcher
from .sender import SendThread

log = Logger()

# Java clients share one counter per JVM; ours is per process, which is all a peer can tell.
_opaque_counter = itertools.count(1)


class RemotingTimeoutError(Exception):
    """No response within the timeout."""


@implementer(IPushProducer)
class RemotingProtocol(Protocol, TimeoutMixin):
    """A remoting connection (server or client side).

    With ``idle_timeout`` (seconds) a connection that reads nothing for that long is closed, as
    Java's IdleStateHandler does (``serverChannelMaxIdleTimeSeconds``, 120 s). With ``budget`` (servers)
    the connection charges what it holds to it and is closed when the budget sheds it.
    """

    def __init__(
        self,
        dispatcher: RequestDispatcher | None = None,
        clock: Any = None,
        idle_timeout: float | None = None,
        budget: MemoryBudget | None = None,
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
        self.budget = budget
        # Charged to the budget: the decoder's partial frame, and replies written while the transport's
        # buffer was full (Twisted pauses us past its bufferSize, 64 KiB, and resumes us once it drained).
        self._partial = 0
        self._unsent = 0
        self._paused = False
        # Frames written while a read is handled or, on plain TCP, during this reactor turn: they leave
        # together, in one send.
        self._replies: list[bytes] | None = None
        # A plain TCP transport whose empty buffer we may bypass (see _send_now).
        self._direct = False
        # A server connection's send thread (its factory's, if it has one) and its channel there.
        self._sender: SendThread | None = None
        self._channel = -1
        # The factory's request lane (the broker's C send lane), served before the dispatcher.
        self._lane: Any = None

    # -- connection lifecycle

    def connectionMade(self) -> None:
        self.connected_ = True
        addr = self.transport.getPeer()
        self.peer_host = getattr(addr, "host", "")
        self.peer_port = getattr(addr, "port", 0)
        self.peer = f"{self.peer_host}:{self.peer_port}"
        set_no_delay(self.transport)  # Nagle would stall a client with several requests in flight
        if self.clock is None:
            from twisted.internet import reactor

            self.clock = reactor
        if self.idle_timeout:
            self.callLater = self.clock.callLater
            self.setTimeout(self.idle_timeout)
        self._direct = can_send_now(self.transport)
        sender = getattr(self.factory, "sender", None)
        if self._direct and sender is not None:
            try:
                self._channel = sender.open(self, self.transport.fileno())
                self._sender = sender
            except OSError as e:  # out of descriptors: this connection sends on the reactor
                log.warn("{peer} sends on the reactor: {error}", peer=self.peer, error=e)
        self._lane = getattr(self.factory, "lane", None)
        # Stop reading requests while our responses cannot be written (slow peer).
        self.transport.registerProducer(self, True)
        if isinstance(self.factory, RemotingServerFactory):
            self.factory.opened(self)
        if self.dispatcher is not None:
            self.dispatcher.channel_opened(self)

    def connectionLost(self, reason: Any = None) -> None:
        self.connected_ = False
        if self._sender is not None:
            self._sender.close(self._channel)
            self._sender = None
        self.setTimeout(None)
        self._release()
        pending, self.pending = self.pending, {}
        for d in pending.values():
            d.errback(error.ConnectionLost(f"connection to {self.peer} lost"))
        if isinstance(self.factory, RemotingServerFactory):
            self.factory.closed(self)
        if self.dispatcher is not None:
            self.dispatcher.channel_closed(self)

    # -- IPushProducer: the transport tells us when its write buffer is full

    def pauseProducing(self) -> None:
        self._paused = True
        self.transport.pauseProducing()

    def resumeProducing(self) -> None:
        self._paused = False
        if self._unsent and self.budget is not None:
            # Everything written has left the process.
            self.budget.give_back(self._unsent)
            self._unsent = 0
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
        if self._replies is None:
            self._replies = []
        lane = self._lane
        try:
            try:
                commands = self.decoder.feed(data, self._serve_in_place if lane is not None else None)
            except ProtocolError as e:
                log.warn("closing {peer}: {error}", peer=self.peer, error=e)
                self.transport.abortConnection()
                return
            budget = self.budget
            if budget is not None:
                partial = self.decoder.buffered
                if partial != self._partial:
                    delta = partial - self._partial
                    self._partial = partial
                    budget.charge(delta)
                    if not self.connected_:
                        return  # evicted: its complete frames would get no answer
            i, n = 0, len(commands)
            while i < n:
                if lane is not None:
                    # It takes requests in order and stops at the first it leaves to the dispatcher.
                    i = lane.take(self, commands, i, self._replies)
                    if i >= n:
                        break
                cmd = commands[i]
                i += 1
                if cmd.is_response:
                    d = self.pending.pop(cmd.opaque, None)
                    if d is None:
                        log.debug(
                            "response with unknown opaque {opaque} from {peer}", opaque=cmd.opaque, peer=self.peer
                        )
                    else:
                        d.callback(cmd)
                elif self.dispatcher is not None:
                    self.dispatcher.dispatch(self, cmd)
        finally:
            self._end_batch()

    def _serve_in_place(self, buf: bytearray) -> None:
        """The lane serves the plain sends at the start of the decoder's buffer without decoding them."""
        self._lane.take_frames(self, buf, self.decoder.max_frame_length, self._replies)

    # -- output

    def send_command(self, cmd: RemotingCommand) -> None:
        """Write a command (a response, or a request whose opaque is set)."""
        if self.connected_:
            self._write(encode_parts(cmd))

    def write_frame(self, frame: bytes) -> None:
        """Write an encoded frame (a response the send lane built)."""
        if self.connected_:
            self._write([frame])

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
        self._write(encode_parts(request))
        return d

    def invoke_oneway(self, request: RemotingCommand) -> None:
        """Send a request that gets no response."""
        request.opaque = next(_opaque_counter) & 0x7FFFFFFF
        request.flag |= RPC_ONEWAY
        self.send_command(request)

    def _write(self, parts: list[bytes]) -> None:
        if self._replies is not None:
            self._replies += parts
        elif self._direct:
            # Outside a read (SYNC_FLUSH answers released by one fsync, a slave's ack, our own requests): gathered
            # until the end of this reactor turn, then sent as a read's replies are.
            self._replies = list(parts)
            self.transport.reactor.callLater(0, self._end_batch, True)
        else:
            self.transport.writeSequence(parts)
            self._charge_if_paused(parts)

    def _end_batch(self, waited: bool = False) -> None:
        replies, self._replies = self._replies, None
        if replies and self.connected_:
            self._send_now(replies, waited)

    def _send_now(self, parts: list[bytes], waited: bool = False) -> None:
        """Send the frames of one read or one reactor turn when nothing is buffered before them: through the send
        thread if the connection has a channel, else to the socket now (:func:`~gateway.remoting.direct.send_now`).
        ``waited``: frames written outside a read (SYNC_FLUSH answers released by an fsync, a slave's ack), whose
        senders wait on them one by one; they leave now rather than wait for the thread to be scheduled."""
        sender = self._sender
        if sender is not None and buffers_nothing(self.transport):
            rest = sender.send(self._channel, parts, waited)
            if rest:
                self._buffer(rest)
            return
        left = send_now(self.transport, parts, self._direct)
        if left:
            self._charge_if_paused(left)

    def take_back(self) -> None:
        """Move what the send thread has not sent yet into the transport: its socket stalled, or we close."""
        sender = self._sender
        if sender is None:
            return
        data = sender.take(self._channel)
        if data and self.connected_:
            self._buffer(data)

    def _buffer(self, data: bytes) -> None:
        """Bytes the send thread or the socket did not take: into the transport's buffer, ahead of later frames."""
        self.transport.write(data)
        self._charge_if_paused([data])

    def _charge_if_paused(self, parts: list[bytes]) -> None:
        if self._paused and self.budget is not None:
            # The transport's buffer is full (maybe with this very frame): it waits in our memory.
            size = sum(map(len, parts))
            self._unsent += size
            self.budget.charge(size)

    # -- memory budget

    @property
    def held(self) -> int:
        """Bytes charged to the server's memory budget: a partial frame and replies not yet sent."""
        return self._partial + self._unsent

    def evict(self) -> None:
        """Drop what this connection holds and close it at once: its server is over its memory budget."""
        log.warn(
            "closing {peer}: the server's connections hold more than remotingMaxBufferedBytes={limit} bytes;"
            " this one held {partial} bytes of an incomplete frame and {unsent} of unsent replies",
            peer=self.peer,
            limit=self.budget.limit if self.budget is not None else None,
            partial=self._partial,
            unsent=self._unsent,
        )
        self._release()
        self.decoder.clear()
        self.connected_ = False
        self.transport.abortConnection()

    def _release(self) -> None:
        if self.budget is not None and (self._partial or self._unsent):
            self.budget.give_back(self._partial + self._unsent)
            self._partial = self._unsent = 0

    def close(self) -> None:
        if self.transport is not None:
            self.take_back()
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
    """Server connections that share one dispatcher and one memory budget.

    Without ``budget`` the factory has one of its own (``DEFAULT_MAX_BUFFERED_BYTES``); factories of
    one server (the broker's port and its VIP port) pass the same one.
    """

    noisy = False

    def __init__(
        self, dispatcher: RequestDispatcher, idle_timeout: float | None = 120.0, budget: MemoryBudget | None = None
    ) -> None:
        self.dispatcher = dispatcher
        self.idle_timeout = idle_timeout
        self.budget = budget if budget is not None else MemoryBudget()
        self.channels: set[RemotingProtocol] = set()
        # Where connections made from now on send their replies (see gateway.remoting.sender); None: the reactor.
        self.sender: SendThread | None = None
        # What serves requests before the dispatcher on connections made from now on: an object whose
        # take(channel, commands, start, replies) serves commands[start:] in order while it can and returns the index
        # of the first it leaves (the broker's C send lane); None: the dispatcher serves all.
        self.lane: Any = None
        self._closing: dict[RemotingProtocol, Deferred[None]] = {}

    def opened(self, channel: RemotingProtocol) -> None:
        self.channels.add(channel)
        self.budget.join(channel)

    def closed(self, channel: RemotingProtocol) -> None:
        self.channels.discard(channel)
        self.budget.leave(channel)
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
        p = RemotingProtocol(self.dispatcher, idle_timeout=self.idle_timeout, budget=self.budget)
        p.factory = self
        return p
