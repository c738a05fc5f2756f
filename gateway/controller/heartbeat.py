"""Which brokers are alive (Apache 5's DefaultBrokerHeartbeatManager): local to each controller, not replicated.

A broker in controller mode sends BROKER_HEARTBEAT every second or so with its epoch, max offset and
election priority; it is gone once ``heartbeatTimeoutMills`` pass without one (or its connection closes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.logger import Logger

log = Logger()

DEFAULT_HEARTBEAT_TIMEOUT_MS = 10_000  # BrokerConfig.controllerHeartBeatTimeoutMills


@dataclass(slots=True)
class BrokerLiveInfo:
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    last_update: float
    timeout: float
    epoch: int = 0
    max_offset: int = 0
    election_priority: int = 2**31 - 1
    channel: Any = None


class BrokerHeartbeatManager:
    """Live brokers keyed by (brokerName, brokerId); ``on_inactive`` hears of each one that went."""

    def __init__(self, clock: Any, on_inactive: Callable[[BrokerLiveInfo], None]) -> None:
        self.clock = clock
        self.on_inactive = on_inactive
        self.live: dict[tuple[str, int], BrokerLiveInfo] = {}

    def heartbeat(
        self,
        cluster_name: str,
        broker_name: str,
        broker_id: int,
        broker_addr: str,
        timeout_ms: int | None,
        epoch: int | None,
        max_offset: int | None,
        election_priority: int | None,
        channel: Any = None,
    ) -> None:
        """Record a BROKER_HEARTBEAT."""
        key = (broker_name, broker_id)
        info = self.live.get(key)
        now = self.clock.seconds()
        if info is None:
            info = self.live[key] = BrokerLiveInfo(cluster_name, broker_name, broker_id, broker_addr, now, 0)
            log.info("broker {name} ({id}, {addr}) is alive", name=broker_name, id=broker_id, addr=broker_addr)
        info.broker_addr = broker_addr
        info.last_update = now
        info.timeout = (timeout_ms or DEFAULT_HEARTBEAT_TIMEOUT_MS) / 1000
        if epoch is not None and max_offset is not None:
            info.epoch, info.max_offset = epoch, max_offset
        if election_priority is not None:
            info.election_priority = election_priority
        info.channel = channel

    def expect(self, cluster_name: str, broker_name: str, broker_id: int, broker_addr: str) -> None:
        """A broker the replicated state knows but this controller has not heard from (it just became leader):
        alive for one default timeout, inactive if no heartbeat comes by then."""
        if (broker_name, broker_id) not in self.live:
            now = self.clock.seconds()
            self.live[(broker_name, broker_id)] = BrokerLiveInfo(
                cluster_name, broker_name, broker_id, broker_addr, now, DEFAULT_HEARTBEAT_TIMEOUT_MS / 1000
            )

    def is_alive(self, broker_name: str, broker_id: int) -> bool:
        info = self.live.get((broker_name, broker_id))
        return info is not None and self.clock.seconds() - info.last_update <= info.timeout

    def live_info(self, broker_name: str, broker_id: int) -> tuple[int, int, int] | None:
        info = self.live.get((broker_name, broker_id))
        return None if info is None else (info.epoch, info.max_offset, info.election_priority)

    def alive_in_group(self, broker_name: str) -> list[BrokerLiveInfo]:
        return [i for (name, _), i in self.live.items() if name == broker_name and self.is_alive(name, i.broker_id)]

    def scan(self) -> None:
        """Drop brokers past their timeout and report each (scanNotActiveBroker)."""
        now = self.clock.seconds()
        for key, info in list(self.live.items()):
            if now - info.last_update > info.timeout:
                del self.live[key]
                log.warn(
                    "broker {name} ({id}, {addr}) sent no heartbeat for {s:.1f} s: inactive",
                    name=info.broker_name,
                    id=info.broker_id,
                    addr=info.broker_addr,
                    s=now - info.last_update,
                )
                self.on_inactive(info)

    def channel_closed(self, channel: Any) -> None:
        """A broker's connection closed: it is gone now, not at its timeout (BrokerHousekeepingService)."""
        for key, info in list(self.live.items()):
            if info.channel is channel:
                del self.live[key]
                self.on_inactive(info)
