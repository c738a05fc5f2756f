"""Broker liveness on a controller: heartbeats, their timeout, closed connections, and brokers a new leader
has not heard from yet."""

from __future__ import annotations

from twisted.internet.task import Clock

from gateway.controller.heartbeat import DEFAULT_HEARTBEAT_TIMEOUT_MS, BrokerHeartbeatManager


def test_heartbeats_timeouts_closed_channels_and_expected_brokers() -> None:
    clock = Clock()
    gone: list[tuple[str, int]] = []
    m = BrokerHeartbeatManager(clock, lambda info: gone.append((info.broker_name, info.broker_id)))
    channel = object()
    m.heartbeat("c", "b", 1, "h:1", 3000, 1, 500, 7, channel)
    assert m.is_alive("b", 1) and m.live_info("b", 1) == (1, 500, 7)
    clock.advance(2.9)
    m.scan()
    assert gone == []
    clock.advance(0.2)
    assert not m.is_alive("b", 1)
    m.scan()
    assert gone == [("b", 1)]
    m.heartbeat("c", "b", 2, "h:2", 3000, None, None, None, channel)
    m.channel_closed(channel)  # its connection closed: gone at once
    assert gone[-1] == ("b", 2) and not m.is_alive("b", 2)
    # A new leader expects brokers it only knows from the replicated state: each gets one default timeout.
    m.expect("c", "b", 3, "h:3")
    clock.advance(DEFAULT_HEARTBEAT_TIMEOUT_MS / 1000 - 1)
    m.scan()
    assert m.is_alive("b", 3) and gone[-1] == ("b", 2)
    clock.advance(1.5)
    m.scan()
    assert gone[-1] == ("b", 3)
    assert isinstance(m.live, dict) and not m.live
