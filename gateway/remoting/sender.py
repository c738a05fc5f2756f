"""A server's socket writes on a thread that never takes the GIL (``_sender.c``), as Netty's worker threads send a
Java broker's responses beside the threads that process requests.

On loopback and on a busy broker, ``send`` is the costliest system call of a request: the kernel runs the TCP
transmit path there and, for a local peer, that peer's receive path and wake-up too (about a sixth of a send's
CPU time, measured on the broker's reactor). On this thread that work runs on another core while the reactor goes on
parsing and storing, so one broker uses more than one core.

Not every reply is handed over: a thread woken on a busy machine waits for the scheduler, and a peer that waits
for its reply (a Java producer's sending threads, a SYNC_FLUSH send) would wait with it. So the first reply of a
reactor turn leaves from the reactor at once, and so do frames written outside a read (answers released by an
fsync or a slave's ack); the replies of the turn's further reads, which would otherwise wait for those reads to be
processed, go to the thread, woken once at the end of the turn. Nothing is sent from the reactor while frames of the
same channel are queued, so a channel's frames keep their order.

A connection hands its replies to the thread only while its transport buffers nothing (what
:func:`~gateway.remoting.direct.send_now` checks). When a socket stops taking bytes (a slow peer), the thread keeps
what it could not send, tells the reactor through a pipe, and the connection takes the bytes back into its
transport, which buffers them and pauses the peer's reads as it always does; it goes back to the thread once its
transport has sent everything. Before the server closes a connection itself, the connection takes back what the
thread has not sent yet, so it leaves before the close.

Without the C extension (or with ``ROCKETMQ_GATEWAY_PURE_PYTHON=1``) :func:`start_send_thread` returns None and
every reply is sent on the reactor.
"""

from __future__ import annotations

from typing import Any, Protocol

from twisted.internet.interfaces import IReactorFDSet

from gateway.native import ThreadPipe, load_extension


class Stalling(Protocol):
    """A connection that sends through the thread: told when its socket stopped taking bytes."""

    def take_back(self) -> None: ...


_c_sender = load_extension("gateway.remoting._sender")


class SendThread(ThreadPipe):
    """The thread, its stall pipe (watched by ``reactor``) and the connections that send through it."""

    def __init__(self, reactor: Any) -> None:
        assert _c_sender is not None
        super().__init__(reactor, "send-thread")
        self._thread = _c_sender.SendThread(self._write_fd)
        self._channels: dict[int, Stalling] = {}
        self._stopped = False
        self._kick: Any = None  # the DelayedCall that wakes the thread at the end of this reactor turn

    def open(self, connection: Stalling, fd: int) -> int:
        """A channel for ``connection``'s socket ``fd`` (a dup, closed by :meth:`close` after what was sent on it)."""
        channel = self._thread.open(fd)
        self._channels[channel] = connection
        return channel

    def send(self, channel: int, parts: list[bytes], now: bool = False) -> bytes | None:
        """Send ``parts`` in one piece after what the channel has queued. The first send of a reactor turn, or one
        sent ``now``, leaves at once from the reactor if nothing of its channel is queued (its peer waits for it:
        handing it over would add the thread's scheduling to its latency); returns what the socket did not take
        then, for the transport to buffer. Other sends are queued (copied) for the thread, woken once at the end of
        the turn: on a single core, each wake-up is two context switches."""
        if not now and self._kick is None:
            self._kick = self._reactor.callLater(0, self._kicked)
            now = True
        # A send asked for now that must be queued after all (behind frames of its channel, or in more parts than
        # one sendmsg takes) wakes the thread itself.
        return self._thread.send(channel, parts, now)

    def _kicked(self) -> None:
        self._kick = None
        self._thread.kick()

    def take(self, channel: int) -> bytes | None:
        """What the channel has not sent yet (None: nothing); the thread sends for it again after this."""
        return self._thread.take(channel)

    def close(self, channel: int) -> None:
        """Forget the channel; its dup is closed once what was queued before is sent (at once if stopped)."""
        if self._channels.pop(channel, None) is not None:
            self._thread.close(channel)

    def on_news(self) -> None:
        for channel in self._thread.stalled():
            connection = self._channels.get(channel)
            if connection is not None:
                connection.take_back()

    def stop(self) -> None:
        """Send what is queued, end the thread, stop watching its pipe."""
        if self._stopped:
            return
        self._stopped = True
        if self._kick is not None:
            self._kick.cancel()
            self._kick = None
        self._thread.stop()
        self.close_pipe()


def start_send_thread(reactor: Any) -> SendThread | None:
    """A send thread for a server on ``reactor``; None without the C extension or a reactor that watches
    descriptors."""
    if _c_sender is None or not IReactorFDSet.providedBy(reactor):
        return None
    return SendThread(reactor)
