"""Orderly push consumers with broker locks, SQL92 subscriptions, and what a bad expression does at start."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.task import deferLater

from gateway.client import (
    ClientInstance,
    ConsumeOrderlyStatus,
    MessageExt,
    MessageQueue,
    MessageSelector,
    MQBrokerError,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    build_message,
)
from gateway.remoting.codes import ResponseCode

from .conftest import Servers, group_name, sleep, wait_until

KEYS = 12


def by_key(queues: list[MessageQueue], msg: Any, key: int) -> MessageQueue:
    """Ordered sends: every message of one key goes to one queue (a MessageQueueSelector)."""
    return queues[key % len(queues)]


class OrderChecker:
    """Listeners of several members share it: records per-key order and catches a queue consumed by two
    members at once (the listener yields to the reactor mid-batch, so an overlap would be seen)."""

    def __init__(self) -> None:
        self.active: dict[int, str] = {}
        self.overlaps: list[str] = []
        self.seen: dict[int, list[int]] = defaultdict(list)
        self.owners: dict[int, list[str]] = defaultdict(list)
        self.suspend_once: set[str] = set()

    def listener(self, member: str) -> Any:
        async def consume(msgs: list[MessageExt]) -> ConsumeOrderlyStatus:
            queue = msgs[0].queue_id
            if queue in self.active:
                self.overlaps.append(f"queue {queue}: {member} while {self.active[queue]}")
            self.active[queue] = member
            try:
                await deferLater(reactor, 0.002, lambda: None)
                for m in msgs:
                    if m.keys in self.suspend_once:
                        self.suspend_once.discard(m.keys)
                        return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                for m in msgs:
                    key, seq = map(int, m.body.split(b":"))
                    self.seen[key].append(seq)
                if not self.owners[queue] or self.owners[queue][-1] != member:
                    self.owners[queue].append(member)
                return ConsumeOrderlyStatus.SUCCESS
            finally:
                del self.active[queue]

        return consume

    def count(self) -> int:
        return sum(map(len, self.seen.values()))


async def orderly_member(servers: Servers, group: str, topic: str, checker: OrderChecker, name: str) -> PushConsumer:
    client = ClientInstance(servers.namesrv_addr, instance_name=f"{group}-{name}", rebalance_interval=0.5)
    consumer = PushConsumer(group, client=client, pull_batch_size=8, consume_message_batch_max_size=3)
    consumer.subscribe(topic, "*")
    consumer.register_message_listener_orderly(
        checker.listener(name), lock_interval=0.5, suspend_current_queue_time=0.05
    )
    await consumer.start()
    return consumer


async def send_ordered(producer: Producer, topic: str, seqs: range) -> None:
    for seq in seqs:
        for key in range(KEYS):
            await producer.send(
                build_message(topic, b"%d:%d" % (key, seq), keys=f"k{key}-{seq}"), selector=by_key, arg=key
            )


@pytest_twisted.ensureDeferred
async def test_two_orderly_members_keep_per_key_order(servers: Servers) -> None:
    topic = await servers.topic(4)
    group = group_name("orderly")
    producer = Producer(group_name("opg"), servers.namesrv_addr)
    await producer.start()
    checker = OrderChecker()
    checker.suspend_once = {"k3-5", "k7-20"}  # suspended once: the same batch comes again, still in order
    first = await orderly_member(servers, group, topic, checker, "A")
    second = None
    try:
        await send_ordered(producer, topic, range(0, 20))
        # A second member joins while A consumes: queues move over under the broker's locks.
        second = await orderly_member(servers, group, topic, checker, "B")
        await send_ordered(producer, topic, range(20, 40))
        await wait_until(lambda: checker.count() >= KEYS * 40, timeout=30, what="all ordered messages")
        await wait_until(
            lambda: (
                first.assigned_queues().isdisjoint(second.assigned_queues())
                and len(first.assigned_queues() | second.assigned_queues()) >= 4
            ),
            what="queues split between the members",
        )
        await send_ordered(producer, topic, range(40, 45))
        await wait_until(lambda: checker.count() >= KEYS * 45, timeout=30, what="messages after the split")
        await sleep(0.3)
        assert checker.overlaps == []
        assert {k: v for k, v in checker.seen.items()} == {k: list(range(45)) for k in range(KEYS)}
        assert any(owners[-1] == "B" for owners in checker.owners.values())
        locks = servers.broker.rebalance_locks.table[group]
        assert {mq.queue_id for mq, e in locks.items() if e.client_id == second.client.client_id} == {
            mq.queue_id for mq in second.assigned_queues() if mq.topic == topic
        }
    finally:
        await first.shutdown()
        if second is not None:
            await second.shutdown()
        await producer.shutdown()
    # Shutdown released every lock.
    assert not servers.broker.rebalance_locks.table.get(group)


@pytest_twisted.ensureDeferred
async def test_a_queue_locked_elsewhere_is_not_consumed(servers: Servers) -> None:
    topic = await servers.topic(1)
    group = group_name("locked")
    mq = MessageQueue(topic, "broker-a", 0)
    # Another member of the group holds the only queue.
    assert servers.broker.rebalance_locks.try_lock_batch(group, [mq], "someone-else") == {mq}
    checker = OrderChecker()
    consumer = await orderly_member(servers, group, topic, checker, "A")
    producer = Producer(group_name("opg"), servers.namesrv_addr)
    await producer.start()
    try:
        await send_ordered(producer, topic, range(3))
        await sleep(1.5)
        assert checker.count() == 0 and mq not in consumer.assigned_queues()
        servers.broker.rebalance_locks.unlock_batch(group, [mq], "someone-else")
        await wait_until(lambda: checker.count() == KEYS * 3, what="consumption once the lock is free")
    finally:
        await consumer.shutdown()
        await producer.shutdown()


@pytest_twisted.ensureDeferred
async def test_sql92_subscription(servers: Servers) -> None:
    topic = await servers.topic(2)
    producer = Producer(group_name("spg"), servers.namesrv_addr)
    await producer.start()
    got: list[MessageExt] = []
    consumer = PushConsumer(group_name("sql"), servers.namesrv_addr)
    consumer.subscribe(topic, MessageSelector.by_sql("amount > 100 AND region IN ('eu', 'apac') OR TAGS = 'vip'"))
    consumer.register_message_listener(lambda msgs: got.extend(msgs) or ConsumeOrderlyStatus.SUCCESS)
    await consumer.start()
    try:
        wanted = set()
        for i in range(40):
            props = {"amount": str(i * 10), "region": ["eu", "us", "apac"][i % 3]}
            tag = "vip" if i == 3 else "std"
            result = await producer.send(build_message(topic, b"%d" % i, tags=tag, properties=props))
            if (i * 10 > 100 and i % 3 != 1) or i == 3:
                wanted.add(result.msg_id)
        await wait_until(lambda: len(got) >= len(wanted), what="the matching messages")
        await sleep(0.3)
        assert {m.uniq_key for m in got} == wanted and len(got) == len(wanted)
    finally:
        await consumer.shutdown()

    # The pull consumer sends the expression with each pull.
    reader = PullConsumer(group_name("sqlpull"), servers.namesrv_addr)
    await reader.start()
    try:
        amounts = []
        for queue_id in (0, 1):
            mq = MessageQueue(topic, "broker-a", queue_id)
            result = await reader.pull(mq, MessageSelector.by_sql("amount >= 300"), 0, 32)
            assert result.status is PullStatus.FOUND and result.next_begin_offset == 20
            amounts += [int(m.properties["amount"]) for m in result.messages]
        assert sorted(amounts) == list(range(300, 400, 10))
    finally:
        await reader.shutdown()
        await producer.shutdown()


@pytest_twisted.ensureDeferred
async def test_bad_sql92_fails_the_start(servers: Servers) -> None:
    topic = await servers.topic(1)
    consumer = PushConsumer(group_name("badsql"), servers.namesrv_addr)
    consumer.subscribe(topic, MessageSelector.by_sql("amount >> 1"))
    consumer.register_message_listener(lambda msgs: None)
    with pytest.raises(MQBrokerError) as failure:
        await consumer.start()
    assert failure.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert not consumer.client.started
