"""Writes that skip Twisted's buffer when it is empty, and sockets that send small frames at once.

``transport.write`` only buffers: the bytes leave on the next writable event, after two ``epoll_ctl`` calls
and one more reactor turn. When nothing is buffered before them, the socket may take them now; only what it
does not take is left to the transport (which then orders, pauses and sends it as usual).
"""

from __future__ import annotations

from typing import Any

from twisted.internet import tcp


def can_send_now(transport: Any) -> bool:
    """Whether ``transport`` is a plain TCP connection whose buffer :func:`send_now` can look into."""
    return (
        isinstance(transport, tcp.Connection) and hasattr(transport, "_tempDataLen") and hasattr(transport, "_aborting")
    )


def buffers_nothing(transport: Any) -> bool:
    """Whether a transport that passed :func:`can_send_now` has nothing waiting to be sent and is not closing."""
    t = transport
    return not (t._tempDataLen or t.offset != len(t.dataBuffer) or t.disconnecting or t._aborting)


def send_now(transport: Any, parts: list[bytes], direct: bool) -> list[bytes]:
    """Send ``parts`` in one system call if ``direct`` (the transport passed :func:`can_send_now`, which callers
    keep) and nothing is buffered, else through the transport's buffer; returns what was left to the buffer
    (nothing when the socket took it all)."""
    t = transport
    if not direct or not buffers_nothing(t):
        t.writeSequence(parts)
        return parts
    data = b"".join(parts)
    sent = t.writeSomeData(data)
    if isinstance(sent, Exception):  # the connection is gone: the transport finds out and closes it
        sent = 0
    if sent < len(data):
        rest = [data[sent:]]
        t.writeSequence(rest)
        return rest
    return []


def set_no_delay(transport: Any) -> None:
    """TCP_NODELAY, as Netty's remoting server and client and Apache's HA sockets set it: a small frame (a response,
    a slave's report) must not wait for the ACK of the one before it (Nagle), which the peer may delay up to 40 ms.
    A TLS wrapper passes it on; a transport without it (a test's) is left alone."""
    no_delay = getattr(transport, "setTcpNoDelay", None)
    if no_delay is not None:
        no_delay(True)
