"""``admin consumerProgress`` of a POP group against a real NameServer and Broker: offsets, diff and the
messages in flight (popped, neither acked nor revived) as pops and acks go."""

from __future__ import annotations

import pytest_twisted
from twisted.internet import reactor

from gateway.client import Producer, build_message
from gateway.client.api import MQClientAPI
from gateway.remoting.client import RemotingClient
from gateway.remoting.extra_info import PROPERTY_POP_CK
from tests.admin.test_cli import admin, admin_json
from tests.broker.test_pop import pop_header
from tests.client.conftest import Servers, group_name, servers  # noqa: F401


@pytest_twisted.ensureDeferred
async def test_pop_group_progress_shows_inflight(servers: Servers) -> None:  # noqa: F811
    topic = await servers.topic(1)
    group = group_name("admpop")
    producer = Producer(group_name("admpoppg"), servers.namesrv_addr)
    await producer.start()
    remoting = RemotingClient(reactor)
    api = MQClientAPI(remoting, [servers.namesrv_addr])
    try:
        for i in range(5):
            await producer.send(build_message(topic, b"p%d" % i))
        popped = await api.pop_message(
            servers.broker_addr, "broker-a", pop_header(topic, group, invisible_ms=60_000, max_nums=3), 10.0
        )
        assert len(popped.messages) == 3

        progress = await admin_json(servers, "consumerProgress", "-g", group, "-t", topic)
        (row,) = progress["offsetTable"]
        # The pop moved the group's offset past what it returned; those 3 are in flight until acked.
        assert (row["brokerOffset"], row["consumerOffset"], row["diff"], row["inflight"]) == (5, 3, 2, 3)
        assert (progress["diffTotal"], progress["inflightTotal"]) == (2, 3)
        _, out, _ = await admin(servers, "consumerProgress", "-g", group, "-t", topic)
        assert out.splitlines()[0].split() == [
            "topic",
            "brokerName",
            "queueId",
            "brokerOffset",
            "consumerOffset",
            "diff",
            "inflight",
            "lastTime",
        ]
        assert "Diff Total: 2" in out and "Inflight Total: 3" in out

        for msg in popped.messages[:2]:
            await api.ack_message(servers.broker_addr, group, topic, msg.properties[PROPERTY_POP_CK])
        (row,) = (await admin_json(servers, "consumerProgress", "-g", group, "-t", topic))["offsetTable"]
        assert (row["diff"], row["inflight"]) == (2, 1)
        await api.ack_message(servers.broker_addr, group, topic, popped.messages[2].properties[PROPERTY_POP_CK])
        progress = await admin_json(servers, "consumerProgress", "-g", group, "-t", topic)
        assert progress["offsetTable"][0]["inflight"] == 0 == progress["inflightTotal"]
    finally:
        await producer.shutdown()
        await remoting.close()
