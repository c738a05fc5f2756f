"""Client exceptions (MQClientException, MQBrokerException) and the remoting failures worth a retry."""

from __future__ import annotations

from twisted.internet import error

from gateway.remoting.protocol import RemotingTimeoutError

# Failures of the connection rather than of the request (Java's RemotingException family).
REMOTING_ERRORS: tuple[type[BaseException], ...] = (error.ConnectError, error.ConnectionClosed, RemotingTimeoutError)


class MQClientError(Exception):
    """The client could not do what was asked (no route, bad message, every attempt failed).

    ``code`` is the broker's response code of the last failure, when there was one.
    """

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class MQBrokerError(Exception):
    """A broker or name server answered with an error code."""

    def __init__(self, code: int, remark: str | None, addr: str) -> None:
        super().__init__(f"CODE: {code} DESC: {remark} BROKER: {addr}")
        self.code = code
        self.remark = remark
        self.addr = addr
