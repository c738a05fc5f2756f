"""The servers' reactor (gateway.lean_epoll): Twisted's epoll reactor serving ready descriptors without the legacy
log context, with Twisted's handling of what a descriptor's code raises kept."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from twisted.internet.main import CONNECTION_DONE
from twisted.logger import globalLogPublisher

from gateway.lean_epoll import LeanEPollReactor


class Reader:
    """A readable socket: counts its reads, raises from doRead or connectionLost when told to."""

    def __init__(self, sock: socket.socket, fail_read: bool = False, fail_lost: bool = False) -> None:
        self.sock, self.fail_read, self.fail_lost = sock, fail_read, fail_lost
        self.reads = 0
        self.lost: list[Any] = []

    def fileno(self) -> int:
        return self.sock.fileno()

    def doRead(self) -> object:
        self.reads += 1
        if self.fail_read:
            raise ValueError("doRead failed")
        return None

    def connectionLost(self, reason: Any) -> None:
        self.lost.append(reason)
        if self.fail_lost:
            raise KeyError("connectionLost failed")

    def logPrefix(self) -> str:
        return "Reader"


@pytest.fixture
def reactor(pairs: list[tuple[socket.socket, socket.socket]]) -> Iterator[LeanEPollReactor]:
    r = LeanEPollReactor()  # stopped before the sockets are closed
    yield r
    r.removeAll()
    r.waker.connectionLost(None)
    r._poller.close()


@pytest.fixture
def pairs() -> Iterator[list[tuple[socket.socket, socket.socket]]]:
    made = [socket.socketpair() for _ in range(3)]
    for _, peer in made:
        peer.send(b"x")  # each stays readable: nothing reads it
    yield made
    for pair in made:
        for s in pair:
            s.close()


@pytest.fixture
def logged() -> Iterator[list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    globalLogPublisher.addObserver(events.append)
    yield events
    globalLogPublisher.removeObserver(events.append)


def failures(events: list[dict[str, Any]]) -> list[type]:
    return [e["failure"].type for e in events if e.get("isError") and "failure" in e]  # what log.err() logged


def test_ready_descriptors_are_read_and_the_loop_is_the_reactors(reactor: LeanEPollReactor, pairs: list) -> None:
    readers = [Reader(a) for a, _ in pairs]
    for r in readers:
        reactor.addReader(r)
    reactor.doIteration(0)
    reactor.doIteration(0)
    assert [r.reads for r in readers] == [2, 2, 2]
    reactor.removeReader(readers[1])
    reactor.doIteration(0)
    assert [r.reads for r in readers] == [3, 2, 3]


def test_a_failing_read_is_logged_and_drops_that_descriptor_only(
    reactor: LeanEPollReactor, pairs: list, logged: list
) -> None:
    readers = [Reader(pairs[0][0]), Reader(pairs[1][0], fail_read=True), Reader(pairs[2][0])]
    for r in readers:
        reactor.addReader(r)
    reactor.doIteration(0)
    assert failures(logged) == [ValueError]
    assert [len(r.lost) for r in readers] == [0, 1, 0]
    assert readers[1].lost[0].type is ValueError
    assert readers[1] not in reactor.getReaders()
    reactor.doIteration(0)
    assert [r.reads for r in readers] == [2, 1, 2]


def test_what_escapes_a_descriptors_handling_is_logged_and_the_others_are_served(
    reactor: LeanEPollReactor, pairs: list, logged: list
) -> None:
    # connectionLost raising escapes _doReadOrWrite: Twisted's callWithLogger logged it; so does the lean poll.
    readers = [Reader(pairs[0][0], fail_read=True, fail_lost=True), Reader(pairs[1][0]), Reader(pairs[2][0])]
    for r in readers:
        reactor.addReader(r)
    reactor.doIteration(0)
    assert failures(logged) == [ValueError, KeyError]
    assert [r.reads for r in readers] == [1, 1, 1]


def test_a_closed_peer_is_a_clean_disconnect(reactor: LeanEPollReactor) -> None:
    a, b = socket.socketpair()
    try:
        reader = Reader(a)
        reader.doRead = lambda: CONNECTION_DONE  # type: ignore[method-assign]  # as a transport reading EOF
        b.close()
        reactor.addReader(reader)
        reactor.doIteration(0)
        assert len(reader.lost) == 1 and reader.lost[0].check(type(CONNECTION_DONE))
    finally:
        a.close()
