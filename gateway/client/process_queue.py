"""ProcessQueue: the messages of one queue pulled but not yet consumed, which bound the committable offset;
PullRequest: a queue being pulled and where its next pull starts.

Orderly consumption takes messages out in offset order (``take_messages``) and commits them as a whole
(``commit``) or puts them back (``make_messages_to_consume_again``); ``locked`` says the broker granted
this member the queue (always True for queues of BROADCASTING consumers, which take no locks).
"""

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
    locked: bool = False
    last_lock_timestamp: float = 0.0  # reactor seconds of the last lock granted
    # Taken by an orderly listener and not committed yet (consumingMsgOrderlyTreeMap).
    consuming_msgs: dict[int, MessageExt] = field(default_factory=dict)

    @property
    def msg_count(self) -> int:
        return len(self.msgs) + len(self.consuming_msgs)

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

    def take_messages(self, batch_size: int) -> list[MessageExt]:
        """The next ``batch_size`` messages in offset order, kept aside until :meth:`commit`."""
        taken = []
        for offset in list(self.msgs)[:batch_size]:
            m = self.consuming_msgs[offset] = self.msgs.pop(offset)
            taken.append(m)
        return taken

    def commit(self) -> int:
        """Forget the taken messages; the offset after the last of them, or -1 when none was taken."""
        if not self.consuming_msgs:
            return -1
        self.msg_size -= sum(len(m.body) for m in self.consuming_msgs.values())
        offset = next(reversed(self.consuming_msgs)) + 1
        self.consuming_msgs.clear()
        return offset

    def make_messages_to_consume_again(self, msgs: list[MessageExt]) -> None:
        """Put taken messages back in front, to be taken again in the same order."""
        for m in msgs:
            self.consuming_msgs.pop(m.queue_offset, None)
        self.msgs = dict(sorted({**self.msgs, **{m.queue_offset: m for m in msgs}}.items()))

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
    # Orderly: the first pull after the lock re-reads the committed offset (the previous owner's last commit).
    previously_locked: bool = False
