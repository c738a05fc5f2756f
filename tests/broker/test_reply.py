"""SEND_REPLY_MESSAGE_V2: the reply is pushed to the requester's connection and stored in the reply topic."""

from __future__ import annotations

import time

import pytest_twisted
from twisted.internet import reactor

from gateway.remoting import fastjson
from gateway.remoting.bodies import HeartbeatData, ProducerData
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.dispatch import RequestDispatcher
from gateway.remoting.headers import ReplyMessageRequestHeader, SendMessageRequestHeader
from gateway.remoting.message import properties_to_string, string_to_properties

from .conftest import BrokerUnderTest
from .test_schedule import pull_all

REPLY_TOPIC = "DefaultCluster_REPLY_TOPIC"


def reply_request(props: dict[str, str]) -> RemotingCommand:
    header = SendMessageRequestHeader(
        producer_group="replier",
        topic=REPLY_TOPIC,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=0,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000),
        flag=3,
        properties=properties_to_string(props),
        reconsume_times=0,
    )
    return RemotingCommand.request(RequestCode.SEND_REPLY_MESSAGE_V2, header.encode_v2(), b"the answer")


@pytest_twisted.ensureDeferred
async def test_reply_is_pushed_to_the_requester_and_stored(broker: BrokerUnderTest) -> None:
    pushed: list[RemotingCommand] = []

    def on_push(channel: object, request: RemotingCommand) -> RemotingCommand:
        pushed.append(request)
        return request.response(ResponseCode.SUCCESS)

    dispatcher = RequestDispatcher()
    dispatcher.register(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, on_push)
    requester = RemotingClient(reactor, dispatcher)
    try:
        body = fastjson.dumps(HeartbeatData(client_id="10.0.0.9@req", producer_data_set=[ProducerData("rg")]))
        await requester.invoke(broker.addr, RemotingCommand.request(RequestCode.HEART_BEAT, body=body))
        props = {"CORRELATION_ID": "c-1", "REPLY_TO_CLIENT": "10.0.0.9@req", "MSG_TYPE": "reply", "TTL": "3000"}
        resp = await broker.call(reply_request(props))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        (push,) = pushed
        header = ReplyMessageRequestHeader.decode(push.ext_fields)
        assert push.body == b"the answer" and header.topic == REPLY_TOPIC and header.flag == 3
        assert header.store_host == broker.addr and header.born_host.startswith("127.0.0.1:")
        pushed_props = string_to_properties(header.properties)
        assert pushed_props["CORRELATION_ID"] == "c-1" and "PUSH_REPLY_TIME" in pushed_props
        (stored,) = await pull_all(broker, REPLY_TOPIC)
        assert resp.ext_fields["msgId"] == stored.msg_id and stored.body == b"the answer"

        resp = await broker.call(reply_request({**props, "REPLY_TO_CLIENT": "10.0.0.9@gone"}))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "channel of <10.0.0.9@gone> not found" in resp.remark
        resp = await broker.call(reply_request({"CORRELATION_ID": "c-2"}))
        assert resp.code == ResponseCode.SYSTEM_ERROR and "REPLY_TO_CLIENT" in resp.remark
    finally:
        await requester.close()
