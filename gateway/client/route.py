"""What a topic route means to clients: writable queues for producers (TopicPublishInfo), readable ones for
consumers, and the TBW102 template route producers use for topics the name servers do not know yet."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from gateway.remoting.bodies import MessageQueue, TopicRouteData
from gateway.remoting.codes import PermName


def publish_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """Writable queues of brokers that have a master, brokers in name order (topicRouteData2TopicPublishInfo)."""
    masters = {bd.broker_name for bd in route.broker_datas if bd.master_addr() is not None}
    return [
        MessageQueue(topic, qd.broker_name, i)
        for qd in sorted(route.queue_datas, key=lambda q: q.broker_name)
        if qd.perm & PermName.PERM_WRITE and qd.broker_name in masters
        for i in range(qd.write_queue_nums)
    ]


def subscribe_queues(topic: str, route: TopicRouteData) -> set[MessageQueue]:
    """Readable queues (topicRouteData2TopicSubscribeInfo)."""
    return {
        MessageQueue(topic, qd.broker_name, i)
        for qd in route.queue_datas
        if qd.perm & PermName.PERM_READ
        for i in range(qd.read_queue_nums)
    }


def default_topic_route(template: TopicRouteData, queue_nums: int) -> TopicRouteData:
    """The TBW102 route with at most ``queue_nums`` queues per broker, standing in for a topic to be auto-created."""
    queue_datas = []
    for qd in template.queue_datas:
        n = min(queue_nums, qd.read_queue_nums)
        queue_datas.append(replace(qd, read_queue_nums=n, write_queue_nums=n))
    return replace(template, queue_datas=queue_datas)


@dataclass(slots=True)
class TopicPublishInfo:
    """A producer's view of a topic: its writable queues and a round-robin cursor."""

    message_queues: list[MessageQueue] = field(default_factory=list)
    # Java starts every cursor at a random value so producers do not all hit queue 0 first.
    send_which_queue: int = field(default_factory=lambda: random.randrange(1 << 16))

    def ok(self) -> bool:
        return bool(self.message_queues)

    def _next(self) -> MessageQueue:
        self.send_which_queue += 1
        return self.message_queues[self.send_which_queue % len(self.message_queues)]

    def select_one_message_queue(self, last_broker_name: str | None = None) -> MessageQueue:
        """The next queue round-robin, avoiding the broker that just failed when another one exists."""
        if last_broker_name is not None:
            for _ in range(len(self.message_queues)):
                mq = self._next()
                if mq.broker_name != last_broker_name:
                    return mq
        return self._next()
