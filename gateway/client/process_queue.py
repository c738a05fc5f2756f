"""ProcessQueue: the messages of one queue pulled but not yet consumed, which bound the committable offset;
PullRequest: a queue being pulled and where its next pull starts."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.remoting.bodies import MessageQueue
from gateway.remoting.message import MessageExt


@dataclass(eq=False, slots=True)
class ProcessQueue:
    """Messages by queue offset. Pulls of a queue return increasing offsets, so insertion order is offset order."""

    msgs: dict[int, MessageExt] = field(default_factory=dict)
    msg_size: int = 0
    queue_offset_max: int = 0
    dropped: bool = False

    @property
    def msg_count(self) -> int:
        return len(self.msgs)

    def put_messages(self, msgs: list[MessageExt]) -> None:
        for m in msgs:
            if m.queue_offset not in self.msgs:
                self.msgs[m.queue_offset] = m
                self.msg_size += len(m.body)
        if msgs:
            self.queue_offset_max = max(self.queue_offset_max, msgs[-1].queue_offset)

    def remove_messages(self, msgs: list[MessageExt]) -> int:
        """Forget consumed messages; the offset to commit (the lowest still held, else one past the highest),
        or -1 when nothing was held."""
        if not self.msgs:
            return -1
        for m in msgs:
            if self.msgs.pop(m.queue_offset, None) is not None:
                self.msg_size -= len(m.body)
        return next(iter(self.msgs)) if self.msgs else self.queue_offset_max + 1

    def max_span(self) -> int:
        """Offset distance between the oldest and newest held message."""
        if not self.msgs:
            return 0
        return next(reversed(self.msgs)) - next(iter(self.msgs))


@dataclass(eq=False, slots=True)
class PullRequest:
    mq: MessageQueue
    process_queue: ProcessQueue
    next_offset: int
