"""Admin requests the broker forwards to a live consumer (Broker2Client): running info, consumer status, and
resetting offsets by time, which makes the consumer take its queues again from the new offsets."""

from __future__ import annotations

import pytest_twisted

from gateway.client import Producer
from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand

from .conftest import Servers, group_name, wait_until
from .test_push_consumer import Recorder, push_consumer, send_many


async def admin_call(servers: Servers, code: int, ext: dict[str, str]) -> RemotingCommand:
    request = RemotingCommand.request(code, ext)
    return await servers.admin.client.remoting.invoke(servers.broker_addr, request, 15.0)


@pytest_twisted.ensureDeferred
async def test_running_info_status_and_reset_offset(servers: Servers) -> None:
    topic = await servers.topic(2)
    group = group_name("b2c")
    producer = Producer(group_name("pg"), servers.namesrv_addr)
    await producer.start()
    recorder = Recorder()
    consumer = await push_consumer(servers, group, topic, recorder)
    try:
        ids = await send_many(producer, topic, 20)
        await wait_until(lambda: len(recorder.counts) >= 20, what="20 messages consumed")
        await wait_until(lambda: sum(servers.broker.offsets.query_offset(group, topic, q) for q in (0, 1)) == 20,
                         what="offsets committed")  # fmt: skip
        client_id = consumer.client.client_id

        resp = await admin_call(
            servers, RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": group, "clientId": client_id}
        )
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        info = fastjson.loads(resp.body)
        assert topic in {s["topic"] for s in info["subscriptionSet"]}
        assert info["properties"]["consumerGroup"] == group
        assert {k["queueId"] for k in info["mqTable"] if k["topic"] == topic} == {0, 1}
        # One stored message handed straight to this member's listener (by its offsetMsgId).
        first = recorder.messages[0]
        ext = {"consumerGroup": group, "clientId": client_id, "msgId": first.msg_id}
        resp = await admin_call(servers, RequestCode.CONSUME_MESSAGE_DIRECTLY, ext)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        direct = fastjson.loads(resp.body)
        assert (direct["consumeResult"], direct["order"], direct["autoCommit"]) == ("CR_SUCCESS", False, True)
        assert recorder.counts[first.uniq_key] == 2
        recorder.counts[first.uniq_key] = 1  # the reset below counts deliveries again

        resp = await admin_call(
            servers, RequestCode.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": group, "clientId": "127.0.0.1@nobody"}
        )
        assert (resp.code, resp.remark) == (
            ResponseCode.SYSTEM_ERROR,
            f"The Consumer <{group}> <127.0.0.1@nobody> not online",
        )

        resp = await admin_call(
            servers, RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, {"topic": topic, "group": group}
        )
        status = fastjson.loads(resp.body)["consumerTable"][client_id]
        assert sum(status.values()) == 20

        # Back to the start (timestamp 0, forced): every message comes again.
        ext = {"topic": topic, "group": group, "timestamp": "0", "isForce": "true"}
        resp = await admin_call(servers, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        table = fastjson.loads(resp.body)["offsetTable"]
        assert sorted(table.values()) == [0, 0]
        await wait_until(lambda: set(recorder.counts.values()) == {2}, what="every message consumed twice")
        assert set(recorder.counts) == set(ids)

        resp = await admin_call(servers, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {**ext, "group": "nobody_cg"})
        assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "THe consumer group <nobody_cg> not exist")
    finally:
        await consumer.shutdown()
        await producer.shutdown()
