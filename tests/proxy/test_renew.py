"""Auto-renew of push consumers' receipt handles (gateway.proxy.renew) on a task.Clock: renewed ahead of their
time while held, the latest handle used when acked, released when the client goes, bounded."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from gateway.client.errors import MQBrokerError
from gateway.proxy.config import ProxyConfig
from gateway.proxy.convert import ProxyError
from gateway.proxy.receipt_handle import ReceiptHandle
from gateway.proxy.renew import ReceiptHandleManager, renew_delay, retry_delay
from gateway.proxy.v2 import definition_pb2 as pb

T0 = 1_700_000_000.0  # the clock in seconds; handles carry ms


def handle(pop_ms: int, invisible_ms: int, offset: int = 5) -> ReceiptHandle:
    return ReceiptHandle.decode(f"{offset} {pop_ms} {invisible_ms} 0 0 broker-a 1 {offset} 4096")


class Broker:
    """Answers CHANGE_MESSAGE_INVISIBLETIME as a broker does (a new handle popped now), or as told."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.calls: list[tuple[str, int]] = []
        self.pending: list[Deferred[ReceiptHandle]] = []
        self.hold = False
        self.fail: Exception | None = None

    async def change(self, h: ReceiptHandle, group: str, topic: str, ms: int) -> ReceiptHandle:
        self.calls.append((h.handle, ms))
        if self.fail is not None:
            raise self.fail
        renewed = handle(int(self.clock.seconds() * 1000), ms, h.offset)
        if self.hold:
            d: Deferred[ReceiptHandle] = Deferred()
            self.pending.append(d)
            await d
        return renewed


def manager(online: set[str] | None = None, **config: Any) -> tuple[ReceiptHandleManager, Broker, Clock]:
    clock = Clock()
    clock.advance(T0)
    broker = Broker(clock)
    clients = {"c1"} if online is None else online
    settings = ProxyConfig(renewSchedulePeriodMillis=1000, renewAheadTimeMillis=10_000, **config)
    m = ReceiptHandleManager(settings, clock, broker.change, lambda client, group: client in clients)
    m.start()
    return m, broker, clock


def run(clock: Clock, seconds: int) -> None:
    """Let ``seconds`` pass a second at a time (the scan runs every second)."""
    for _ in range(seconds):
        clock.advance(1)


def now_ms(clock: Clock) -> int:
    return int(clock.seconds() * 1000)


def latest(m: ReceiptHandleManager, h: ReceiptHandle) -> ReceiptHandle:
    results: list[ReceiptHandle] = []
    Deferred.fromCoroutine(m.remove("c1", "G", "id", h)).addCallback(results.append)
    assert results, "remove waited although nothing was in flight"
    return results[0]


def test_a_held_message_is_renewed_ahead_of_its_time_and_acked_with_the_latest_handle() -> None:
    m, broker, clock = manager()
    first = handle(now_ms(clock), 60_000)
    assert m.add("c1", "G", "T", "id", first, 0)
    run(clock, 49)  # 11 s left: not due yet
    assert broker.calls == []
    run(clock, 1)  # 10 s left: renewed for RenewStrategyPolicy's first minute
    assert broker.calls == [(first.handle, renew_delay(0))] and renew_delay(0) == 60_000
    run(clock, 50)
    assert broker.calls[1][1] == 180_000  # then three minutes
    acked = latest(m, first)
    assert acked.handle != first.handle and acked.next_visible_time == now_ms(clock) + 180_000
    assert m.groups == {}
    run(clock, 600)
    assert len(broker.calls) == 2, "an acked message was renewed"


def test_an_ack_during_a_renewal_waits_for_its_new_handle() -> None:
    m, broker, clock = manager()
    first = handle(now_ms(clock), 5_000)
    m.add("c1", "G", "T", "id", first, 0)
    broker.hold = True
    clock.advance(1)
    assert len(broker.pending) == 1
    results: list[ReceiptHandle] = []
    Deferred.fromCoroutine(m.remove("c1", "G", "id", first)).addCallback(results.append)
    assert results == []
    broker.pending[0].callback(None)
    assert results and results[0].invisible_time == 60_000


def test_an_untracked_or_foreign_message_keeps_its_own_handle() -> None:
    m, _, clock = manager()
    h = handle(now_ms(clock), 60_000)
    assert latest(m, h) is h
    m.add("c1", "G", "T", "other-id", h, 0)
    assert latest(m, h) is h and m.groups  # another message id at that place is not this one's


def test_a_client_gone_releases_its_messages_soon() -> None:
    online = {"c1"}
    m, broker, clock = manager(online)
    h = handle(now_ms(clock), 60_000)
    m.add("c1", "G", "T", "id", h, 0)
    online.clear()
    clock.advance(1)
    assert broker.calls == [(h.handle, 1000)] and m.groups == {}


def test_past_the_max_renew_time_the_message_is_nacked_with_the_retry_delay() -> None:
    m, broker, clock = manager(renewMaxTimeMillis=100_000)
    h = handle(now_ms(clock), 60_000)
    m.add("c1", "G", "T", "id", h, 1)
    run(clock, 200)
    assert [ms for _, ms in broker.calls] == [60_000, 30_000]
    assert retry_delay(1) == 30_000 and retry_delay(0) == 10_000 and retry_delay(99) == 7_200_000
    assert m.groups == {}


def test_failures_stop_renewal_or_are_retried() -> None:
    m, broker, clock = manager()
    m.add("c1", "G", "T", "id", handle(now_ms(clock), 5_000, offset=1), 0)
    broker.fail = ProxyError(pb.Code.INVALID_RECEIPT_HANDLE, "receipt handle is expired")
    clock.advance(1)
    assert len(broker.calls) == 1 and m.groups == {}
    m.add("c1", "G", "T", "id", handle(now_ms(clock), 5_000, offset=2), 0)
    broker.fail = MQBrokerError(17, "no such checkpoint", "127.0.0.1:10911")
    clock.advance(1)
    assert len(broker.calls) == 2 and m.groups == {}
    m.add("c1", "G", "T", "id", handle(now_ms(clock), 5_000, offset=3), 0)
    broker.fail = TimeoutError("no answer")
    run(clock, 5)
    assert len(broker.calls) == 2 + 3 and m.groups == {}  # maxRenewRetryTimes tries, then given up


def test_tracked_messages_and_renewals_in_flight_are_bounded() -> None:
    m, broker, clock = manager(maxReceiptHandlesPerClient=2)
    assert m.add("c1", "G", "T", "a", handle(now_ms(clock), 60_000, offset=1), 0)
    assert m.add("c1", "G", "T", "b", handle(now_ms(clock), 60_000, offset=2), 0)
    assert not m.add("c1", "G", "T", "c", handle(now_ms(clock), 60_000, offset=3), 0)
    assert sum(len(v) for v in m.groups.values()) == 2

    m, broker, clock = manager(maxReceiptHandlesPerClient=1000)
    for i in range(400):
        m.add("c1", "G", "T", f"id{i}", handle(now_ms(clock), 5_000, offset=i), 0)
    broker.hold = True
    clock.advance(1)
    assert len(broker.pending) == 300 and m.in_flight == 300  # the rest wait for the next scan
    for d in broker.pending:
        d.callback(None)
    clock.advance(1)
    assert len(broker.pending) == 400 and m.in_flight == 100


def test_stop_releases_every_held_message() -> None:
    m, broker, clock = manager()
    m.add("c1", "G", "T", "id", handle(now_ms(clock), 60_000), 0)
    done: list[Any] = []
    m.stop().addCallback(done.append)
    assert done and broker.calls[0][1] == 1000 and m.groups == {}
