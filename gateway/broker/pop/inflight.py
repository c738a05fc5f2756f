"""PopInflightMessageCounter: per topic, group and queue, the messages popped and neither acked nor revived
yet, kept in memory as Apache keeps it (it starts at 0 after a restart, and acks of pops made before the
broker started are not counted off)."""

from __future__ import annotations

from collections.abc import Iterator


class PopInflightCounter:
    """Counts go up as pops return messages and down as acks and revivals take them; a count that would fall to
    0 or below is dropped, so the table only holds queues with messages in flight."""

    def __init__(self, start_time: int) -> None:
        # Acks and revivals of pops before this time (the broker's start) found nothing counted.
        self.start_time = start_time
        self._table: dict[tuple[str, str], dict[int, int]] = {}

    def increment(self, topic: str, group: str, queue_id: int, num: int) -> None:
        if num <= 0:
            return
        queues = self._table.setdefault((topic, group), {})
        queues[queue_id] = queues.get(queue_id, 0) + num

    def decrement(self, topic: str, group: str, pop_time: int, queue_id: int, delta: int) -> None:
        """``delta`` messages of a pop made at ``pop_time`` acked or revived."""
        if pop_time < self.start_time:
            return
        queues = self._table.get((topic, group))
        if queues is None or queue_id not in queues:
            return
        left = queues[queue_id] - delta
        if left > 0:
            queues[queue_id] = left
            return
        del queues[queue_id]
        if not queues:
            del self._table[(topic, group)]

    def clear(self, topic: str, group: str, queue_id: int) -> None:
        """An orderly pop of the queue returns its unacked batch again (or its offset was reset)."""
        queues = self._table.get((topic, group))
        if queues is not None:
            queues.pop(queue_id, None)
            if not queues:
                del self._table[(topic, group)]

    def clear_topic(self, topic: str) -> None:
        for key in [k for k in self._table if k[0] == topic]:
            del self._table[key]

    def clear_group(self, group: str) -> None:
        for key in [k for k in self._table if k[1] == group]:
            del self._table[key]

    def get(self, topic: str, group: str, queue_id: int) -> int:
        queues = self._table.get((topic, group))
        return queues.get(queue_id, 0) if queues is not None else 0

    def items(self) -> Iterator[tuple[tuple[str, str, int], int]]:
        """((topic, group, queue id), count) of every queue with messages in flight, from a copy of the table."""
        for (topic, group), queues in list(self._table.items()):
            for queue_id, n in list(queues.items()):
                yield (topic, group, queue_id), n
