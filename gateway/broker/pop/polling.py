"""PopLongPollingService: pops that found nothing wait for a message or their poll time.

Waiting pops are keyed ``topic@group@queueId`` (queueId -1 for a pop of any queue). A message stored to a
topic wakes, for each group waiting on it, the first pop of its queue's key and of the any-queue key whose
tag filter it passes; a woken or expired pop is run again (on the next reactor turn, as Apache hands it to
its executor) and answers POLLING_TIMEOUT if it still finds nothing once its poll time is over.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.remoting.command import RemotingCommand
from gateway.store.commit_log import now_ms

from .records import SPLIT

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol

    from ..config import BrokerConfig


class PollingResult(enum.Enum):
    POLLING_SUC = enum.auto()
    POLLING_FULL = enum.auto()
    POLLING_TIMEOUT = enum.auto()
    NOT_POLLING = enum.auto()


@dataclass(eq=False, slots=True)
class PopRequest:
    channel: RemotingProtocol
    request: RemotingCommand
    expired: int  # bornTime + pollTime (ms)
    # (tags_code) -> bool; None matches everything.
    message_filter: Callable[[int], bool] | None
    timer: Any = field(default=None)
    since: float = field(default_factory=time.perf_counter)

    def is_timeout(self) -> bool:
        return now_ms() >= self.expired


def polling_key(topic: str, group: str, queue_id: int) -> str:
    """KeyBuilder.buildPollingKey."""
    return f"{topic}{SPLIT}{group}{SPLIT}{queue_id}"


class PopLongPollingService:
    """Waiting pops, at most ``popPollingSize`` per key, ``popPollingMapSize`` keys and ``maxPopPollingSize`` in all."""

    def __init__(self, config: BrokerConfig, clock: Any, execute: Callable[[PopRequest], None]) -> None:
        self.config = config
        self.clock = clock
        self.execute = execute
        self.polling: dict[str, list[PopRequest]] = {}
        # topic → groups with pops waiting on it.
        self.topic_groups: dict[str, dict[str, int]] = {}
        self.total = 0

    def polling_request(
        self,
        channel: RemotingProtocol,
        request: RemotingCommand,
        topic: str,
        group: str,
        queue_id: int,
        born_time: int,
        poll_time: int,
        message_filter: Callable[[int], bool] | None,
    ) -> PollingResult:
        """Hold a pop that found nothing (PopLongPollingService.polling)."""
        if poll_time <= 0:
            return PollingResult.NOT_POLLING
        cfg = self.config
        if self.total >= cfg.maxPopPollingSize:
            return PollingResult.POLLING_FULL
        pr = PopRequest(channel, request, born_time + poll_time, message_filter)
        if pr.is_timeout():
            return PollingResult.POLLING_TIMEOUT
        key = polling_key(topic, group, queue_id)
        held = self.polling.get(key)
        if held is None:
            if len(self.polling) >= cfg.popPollingMapSize:
                return PollingResult.POLLING_FULL
            held = self.polling[key] = []
        elif len(held) > cfg.popPollingSize:
            return PollingResult.POLLING_FULL
        groups = self.topic_groups.setdefault(topic, {})
        groups[group] = groups.get(group, 0) + 1
        held.append(pr)
        self.total += 1
        pr.timer = self.clock.callLater(max(pr.expired - now_ms(), 0) / 1000.0, self._expire, key, pr)
        return PollingResult.POLLING_SUC

    def notify_message_arriving(self, topic: str, queue_id: int, tags_code: int | None) -> None:
        """A message reached ``topic``'s queue: wake a matching pop of each group waiting on the topic."""
        groups = self.topic_groups.get(topic)
        if not groups:
            return
        for group in list(groups):
            if queue_id >= 0:
                self.notify(topic, -1, group, tags_code)
            self.notify(topic, queue_id, group, tags_code)

    def notify(self, topic: str, queue_id: int, group: str, tags_code: int | None = None) -> bool:
        """Wake the first pop waiting on this key that ``tags_code`` (None: any) passes."""
        key = polling_key(topic, group, queue_id)
        held = self.polling.get(key)
        if not held:
            return False
        for pr in held:
            if tags_code is None or pr.message_filter is None or pr.message_filter(tags_code):
                self._remove(key, pr, topic, group)
                self._wake(pr)
                return True
        return False

    def _remove(self, key: str, pr: PopRequest, topic: str, group: str) -> bool:
        held = self.polling.get(key)
        if not held or pr not in held:
            return False
        held.remove(pr)
        if not held:
            del self.polling[key]
        self.total -= 1
        groups = self.topic_groups.get(topic)
        if groups is not None and group in groups:
            groups[group] -= 1
            if groups[group] <= 0:
                del groups[group]
                if not groups:
                    del self.topic_groups[topic]
        return True

    def _expire(self, key: str, pr: PopRequest) -> None:
        topic, group, _ = key.rsplit(SPLIT, 2)
        if self._remove(key, pr, topic, group):
            self._run(pr)

    def _wake(self, pr: PopRequest) -> None:
        if pr.timer is not None and pr.timer.active():
            pr.timer.cancel()
        pr.timer = None
        # Not from inside the store's append (the notifier), and never recursively.
        self.clock.callLater(0, self._run, pr)

    def _run(self, pr: PopRequest) -> None:
        if pr.channel.connected_:
            self.execute(pr)

    def channel_closed(self, channel: RemotingProtocol) -> None:
        for key, held in list(self.polling.items()):
            topic, group, _ = key.rsplit(SPLIT, 2)
            for pr in [p for p in held if p.channel is channel]:
                if pr.timer is not None and pr.timer.active():
                    pr.timer.cancel()
                self._remove(key, pr, topic, group)

    def shutdown(self) -> None:
        for held in self.polling.values():
            for pr in held:
                if pr.timer is not None and pr.timer.active():
                    pr.timer.cancel()
        self.polling.clear()
        self.topic_groups.clear()
        self.total = 0
