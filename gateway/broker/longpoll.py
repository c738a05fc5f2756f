"""Long polling (PullRequestHoldService): pulls that found nothing wait for a message or their timeout.

A held pull is re-run, without suspension and without committing, when a matching message for its
queue is dispatched or when its suspend time runs out; the re-run answers PULL_NOT_FOUND if still
nothing is there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.remoting.command import RemotingCommand

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol


@dataclass(eq=False, slots=True)
class PullRequest:
    channel: RemotingProtocol
    request: RemotingCommand
    pull_from_offset: int
    # (tags_code) -> bool; None matches everything.
    message_filter: Callable[[int], bool] | None
    timer: Any = field(default=None)
    # When the pull arrived (time.perf_counter), for its latency once answered.
    since: float = field(default_factory=time.perf_counter)


class PullRequestHoldService:
    """Held pulls keyed by ``topic@queueId``; ``execute(pull_request)`` re-runs one and writes its answer."""

    def __init__(self, clock: Any, execute: Callable[[PullRequest], None]) -> None:
        self.clock = clock
        self.execute = execute
        self.table: dict[str, list[PullRequest]] = {}

    @staticmethod
    def _key(topic: str, queue_id: int) -> str:
        return f"{topic}@{queue_id}"

    def suspend(self, topic: str, queue_id: int, pr: PullRequest, timeout_ms: int) -> None:
        key = self._key(topic, queue_id)
        self.table.setdefault(key, []).append(pr)
        pr.timer = self.clock.callLater(max(timeout_ms, 0) / 1000.0, self._expire, key, pr)

    def _remove(self, key: str, pr: PullRequest) -> bool:
        held = self.table.get(key)
        if not held or pr not in held:
            return False
        held.remove(pr)
        if not held:
            del self.table[key]
        return True

    def _expire(self, key: str, pr: PullRequest) -> None:
        if self._remove(key, pr):
            self._run(pr)

    def _run(self, pr: PullRequest) -> None:
        if pr.channel.connected_:
            self.execute(pr)

    def notify_message_arriving(self, topic: str, queue_id: int, max_offset: int, tags_code: int | None) -> None:
        """A message reached the consume queue: wake the held pulls it can satisfy."""
        if not self.table:  # nobody waits (every send of a producer-only load)
            return
        key = self._key(topic, queue_id)
        held = self.table.get(key)
        if not held:
            return
        wake = []
        keep = []
        for pr in held:
            if max_offset > pr.pull_from_offset and (
                tags_code is None or pr.message_filter is None or pr.message_filter(tags_code)
            ):
                wake.append(pr)
            else:
                keep.append(pr)
        if not wake:
            return
        if keep:
            self.table[key] = keep
        else:
            del self.table[key]
        for pr in wake:
            if pr.timer is not None and pr.timer.active():
                pr.timer.cancel()
            self._run(pr)

    def channel_closed(self, channel: RemotingProtocol) -> None:
        for key, held in list(self.table.items()):
            for pr in [p for p in held if p.channel is channel]:
                if pr.timer is not None and pr.timer.active():
                    pr.timer.cancel()
                self._remove(key, pr)

    def shutdown(self) -> None:
        for held in self.table.values():
            for pr in held:
                if pr.timer is not None and pr.timer.active():
                    pr.timer.cancel()
        self.table.clear()
