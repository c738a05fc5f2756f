"""Reads in a 4.x pair: a master suggests the slave to a consumer far behind (slaveReadEnable), our Python
client follows the suggestion, and keeps reading from the slave, and committing offsets there, when the
master is gone."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_twisted

from gateway.broker.controller import BrokerController
from gateway.client.consumer import PullConsumer, PullStatus
from gateway.namesrv.service import NamesrvController
from gateway.remoting.bodies import MessageQueue
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import PullMessageResponseHeader
from tests.broker.conftest import BrokerUnderTest, remoting, sleep  # noqa: F401
from tests.broker.test_broker_server import create_topic, pull_request, send
from tests.ha.test_replication import TOPIC, caught_up
from tests.namesrv.conftest import namesrv, namesrv_config  # noqa: F401


class Pair:
    def __init__(self, master: BrokerUnderTest, slave: BrokerUnderTest) -> None:
        self.master, self.slave = master, slave

    @property
    def m(self) -> BrokerController:
        assert self.master.controller is not None
        return self.master.controller


@pytest_twisted.async_yield_fixture
async def pair(tmp_path: Path, remoting, namesrv: NamesrvController) -> AsyncIterator[Pair]:  # noqa: F811
    """A master that finds every consumer "far behind" (accessMessageInMemoryMaxRatio=0) and its slave,
    both with slaveReadEnable and registered with a NameServer; 40 messages in HaTopic, replicated."""
    common = {"brokerName": "broker-read", "namesrvAddr": f"127.0.0.1:{namesrv.port}", "slaveReadEnable": "true"}
    master = BrokerUnderTest(tmp_path / "master", remoting, accessMessageInMemoryMaxRatio="0", **common)
    m = master.start()
    await m.when_ready()
    slave = BrokerUnderTest(
        tmp_path / "slave",
        remoting,
        brokerRole="SLAVE",
        brokerId="1",
        haMasterAddress=f"127.0.0.1:{m.config.haListenPort}",
        **common,
    )
    try:
        await create_topic(master, TOPIC, queues=1)
        for i in range(40):
            assert (await send(master, TOPIC, b"r%d" % i, {})).code == ResponseCode.SUCCESS
        s = slave.start()
        await s.when_ready()
        await caught_up(m, s)
        await s.slave_sync.sync_all()  # the topic too, now rather than at the first periodic sync
        assert s.topics.select(TOPIC) is not None
        yield Pair(master, slave)
    finally:
        await slave.stop()
        await master.stop()


@pytest_twisted.ensureDeferred
async def test_a_consumer_far_behind_is_sent_to_the_slave_and_goes(pair: Pair, namesrv: NamesrvController) -> None:  # noqa: F811
    resp = await pair.master.call(pull_request(TOPIC, 0, 0, sub="*", timeout_ms=0))
    assert resp.code == ResponseCode.SUCCESS
    # whichBrokerWhenConsumeSlowly of a new group is 1: the slave.
    assert PullMessageResponseHeader.decode(resp.ext_fields).suggest_which_broker_id == 1
    slave = pair.slave.controller
    assert slave is not None
    consumer = PullConsumer("cg_slave_read", f"127.0.0.1:{namesrv.port}")
    await consumer.start()
    try:
        mq = MessageQueue(TOPIC, "broker-read", 0)
        for _ in range(100):  # until the NameServer routes the topic (registered a moment after its creation)
            try:
                if await consumer.fetch_subscribe_message_queues(TOPIC):
                    break
            except Exception:
                await sleep(0.05)
        first = await consumer.pull(mq, "*", 0, 10)  # to the master, which suggests the slave
        gets_before = slave.get_total
        second = await consumer.pull(mq, "*", first.next_begin_offset, 10)  # to the slave
        assert second.status is PullStatus.FOUND
        assert slave.get_total == gets_before + len(second.messages) > gets_before
        # The master goes; the client still reads the rest from the slave and commits its offset there.
        await pair.master.stop()
        # As every 30 s (pollNameServerInterval): the route now names only the slave.
        await consumer.client.update_topic_route_from_namesrv(TOPIC)
        got = [m.body for m in first.messages + second.messages]
        offset = second.next_begin_offset
        while offset < 40:
            more = await consumer.pull(mq, "*", offset, 32)
            got += [m.body for m in more.messages]
            offset = more.next_begin_offset
        assert got == [b"r%d" % i for i in range(40)]
        consumer.update_consume_offset(mq, offset)
        await consumer.persist_consumer_offset()
        query = RemotingCommand.request(
            RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "cg_slave_read", "topic": TOPIC, "queueId": "0"}
        )
        answer = await pair.slave.call(query)
        assert (answer.code, answer.ext_fields["offset"]) == (ResponseCode.SUCCESS, "40")
    finally:
        await consumer.shutdown()
