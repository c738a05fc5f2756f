"""POP frames as Apache 5.3.3's Java client writes them (PullAPIWrapper.popAsync, DefaultMQPushConsumerImpl's
ack and changePopInvisibleTime: RemotingCommand JSON headers, every extField a string, the header classes'
field names), and the records of pop as Apache writes and reads them (ExtraInfoUtil, PopCheckPoint, AckMsg,
BatchAckMessageRequestBody)."""

from __future__ import annotations

import json
import struct
import time

import pytest
import pytest_twisted

from gateway.acl.permission import SUB
from gateway.acl.plain_access_validator import PlainAccessValidator
from gateway.broker.pop.records import AckMsg, PopCheckPoint
from gateway.remoting import fastjson
from gateway.remoting.bodies import BatchAckMessageRequestBody, BodyError
from gateway.remoting.codec import FrameDecoder
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.extra_info import ExtraInfo, PopRecordError, build_extra_info, real_topic, retry_kind
from gateway.remoting.headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
)
from gateway.remoting.message import decode_records

from .conftest import BrokerUnderTest
from .test_broker_server import create_topic, send

V5_3_3 = 479  # MQVersion.Version.V5_3_3.ordinal()


def java_frame(code: int, ext: dict[str, str], opaque: int = 7, body: bytes = b"") -> bytes:
    """A request frame as Java's RemotingCommand.encode writes it with JSON headers."""
    header = json.dumps(
        {
            "code": code,
            "extFields": ext,
            "flag": 0,
            "language": "JAVA",
            "opaque": opaque,
            "serializeTypeCurrentRPC": "JSON",
            "version": V5_3_3,
        },
        separators=(",", ":"),
    ).encode()
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def java_request(code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
    (cmd,) = FrameDecoder().feed(java_frame(code, ext, body=body))
    return cmd


def java_pop_ext(topic: str, group: str, *, poll: bool) -> dict[str, str]:
    """PullAPIWrapper.popAsync's header: pollTime/bornTime stay 0 when it does not poll."""
    return {
        "consumerGroup": group,
        "topic": topic,
        "queueId": "-1",
        "maxMsgNums": "32",
        "invisibleTime": "60000",
        "pollTime": "2000" if poll else "0",
        "bornTime": str(int(time.time() * 1000)) if poll else "0",
        "initMode": "0",
        "expType": "TAG",
        "exp": "*",
        "order": "false",
        "bname": "broker-a",
    }


def test_java_pop_header_decodes() -> None:
    header = PopMessageRequestHeader.decode(
        java_request(RequestCode.POP_MESSAGE, java_pop_ext("T", "G", poll=True)).ext_fields
    )
    assert (header.consumer_group, header.topic, header.queue_id, header.max_msg_nums) == ("G", "T", -1, 32)
    assert (header.invisible_time, header.poll_time, header.init_mode) == (60000, 2000, 0)
    assert (header.exp_type, header.exp, header.order, header.bname) == ("TAG", "*", False, "broker-a")
    out = PopMessageResponseHeader(1, 2, 3, 4, "0 1 5", "0 1 5,6").encode()
    assert out == {
        "popTime": "1",
        "invisibleTime": "2",
        "reviveQid": "3",
        "restNum": "4",
        "startOffsetInfo": "0 1 5",
        "msgOffsetInfo": "0 1 5,6",
    }
    assert ChangeInvisibleTimeResponseHeader(1, 2, 3).encode() == {
        "popTime": "1",
        "invisibleTime": "2",
        "reviveQid": "3",
    }


def test_extra_info_as_apache_reads_it() -> None:
    text = build_extra_info(5, 1700000000000, 30000, 3, "%RETRY%G_T", "broker-a", 0, 7)
    assert text == "5 1700000000000 30000 3 1 broker-a 0 7"
    info = ExtraInfo.parse(text)
    assert (info.ck_queue_offset, info.pop_time, info.invisible_time, info.revive_qid) == (5, 1700000000000, 30000, 3)
    assert (info.retry, info.broker_name, info.queue_id, info.queue_offset) == ("1", "broker-a", 0, 7)
    assert real_topic("T", "G", info.retry) == "%RETRY%G_T" and real_topic("T", "G", "0") == "T"
    assert real_topic("T", "G", "2") == "%RETRY%G+T"
    assert [retry_kind(t) for t in ("T", "%RETRY%G_T", "%RETRY%G+T")] == ["0", "1", "2"]
    # The seven-field form (no queue offset), trailing separators dropped as String.split does.
    short = ExtraInfo.parse("5 1 2 3 0 b 1  ")
    assert short.queue_id == 1
    with pytest.raises(PopRecordError, match=r"^getQueueOffset fail, extraInfoStrs length 7$"):
        _ = short.queue_offset
    with pytest.raises(PopRecordError, match=r'^For input string: "x"$'):
        _ = ExtraInfo.parse("x 1").ck_queue_offset
    with pytest.raises(PopRecordError, match=r"^getRetry fail, format is wrong$"):
        real_topic("T", "G", "9")


def test_revive_records_as_apache_writes_them() -> None:
    # fastjson: sorted names, nulls left out, the getter-only reviveTime written too.
    ck = PopCheckPoint(5, 1000, 2000, 0, 2, 1, "T", "G", 0, [0, 3], "broker-a")
    assert ck.encode() == (
        b'{"bm":0,"bn":"broker-a","c":"G","d":[0,3],"it":2000,"n":2,"pt":1000,"q":1,"reviveTime":3000,'
        b'"ro":0,"so":5,"t":"T"}'
    )
    assert ck.unique_id == "T@1@5@G@1000@broker-a@ck"
    assert [ck.index_of_ack(o) for o in (5, 6, 8, 4)] == [0, -1, 1, -1]
    old = PopCheckPoint.decode(b'{"so":5,"pt":1,"it":2,"bm":0,"n":3,"q":0,"t":"T","c":"G","ro":9}')
    assert [old.index_of_ack(o) for o in (5, 7, 8)] == [0, 2, -1] and old.ack_offset_by_index(2) == 7
    ack = AckMsg.decode(b'{"ackOffset":8,"startOffset":5,"consumerGroup":"G","topic":"T","queueId":1,"popTime":1000}')
    assert ack.merge_key("broker-a") == ck.merge_key and ack.unique_id == "T@1@8@G@1000@None@ack"
    batch = AckMsg(-1, 5, "G", "T", 1, 1000, "broker-a", [5, 8])
    assert batch.encode() == b'{"ao":-1,"aol":[5,8],"bn":"broker-a","c":"G","pt":1000,"q":1,"so":5,"t":"T"}'
    assert batch.unique_id == "T@1@[5, 8]@G@1000@bAck"
    with pytest.raises(PopRecordError):
        PopCheckPoint.decode(b'{"n":200}')


def test_batch_ack_body_as_fastjson_writes_it() -> None:
    # BitSet {0, 3, 9}: toByteArray() is 09 02, written as base64; fastjson reads the long names too.
    body = b'{"acks":[{"b":"CQI=","c":"G","it":60000,"pt":1000,"q":1,"r":"1","rq":2,"so":5,"t":"T"}],"brokerName":"b"}'
    parsed = BatchAckMessageRequestBody.from_json(fastjson.loads(body))
    (ack,) = parsed.acks
    assert ack.bit_set == frozenset({0, 3, 9}) and (ack.retry, ack.revive_queue_id, ack.start_offset) == ("1", 2, 5)
    assert fastjson.dumps(parsed) == body
    long_names = {"consumerGroup": "G", "topic": "T", "retry": "0", "startOffset": 1, "queueId": 0, "bitSet": "AQ=="}
    assert BatchAckMessageRequestBody.from_json({"acks": [long_names]}).acks[0].bit_set == frozenset({0})
    with pytest.raises(BodyError):
        BatchAckMessageRequestBody.from_json({"acks": [{**long_names, "bitSet": "A" * 20000}]})


@pytest_twisted.ensureDeferred
async def test_java_frames_pop_ack_change(broker: BrokerUnderTest) -> None:
    await create_topic(broker, "JavaPop", 1)
    for body in (b"one", b"two"):
        assert (await send(broker, "JavaPop", body, {"TAGS": "a"})).code == ResponseCode.SUCCESS
    popped = await broker.call(java_request(RequestCode.POP_MESSAGE, java_pop_ext("JavaPop", "JavaGroup", poll=False)))
    assert popped.code == ResponseCode.SUCCESS, popped.remark
    answer = PopMessageResponseHeader.decode(popped.ext_fields)
    assert answer.start_offset_info == "0 0 0" and answer.msg_offset_info == "0 0 0,1"
    one, two = decode_records(popped.body)
    extra = build_extra_info(0, answer.pop_time, 60000, answer.revive_qid, "JavaPop", "broker-a", 0, one.queue_offset)
    ack_ext = {
        "consumerGroup": "JavaGroup",
        "topic": "JavaPop",
        "queueId": "0",
        "extraInfo": extra,
        "offset": str(one.queue_offset),
        "bname": "broker-a",
    }
    assert AckMessageRequestHeader.decode(java_request(RequestCode.ACK_MESSAGE, ack_ext).ext_fields).offset == 0
    acked = await broker.call(java_request(RequestCode.ACK_MESSAGE, ack_ext))
    assert acked.code == ResponseCode.SUCCESS, acked.remark
    extra_two = build_extra_info(0, answer.pop_time, 60000, answer.revive_qid, "JavaPop", "broker-a", 0, 1)
    change_ext = {**ack_ext, "extraInfo": extra_two, "offset": "1", "invisibleTime": "5000"}
    changed = await broker.call(java_request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, change_ext))
    assert changed.code == ResponseCode.SUCCESS, changed.remark
    new = ChangeInvisibleTimeResponseHeader.decode(changed.ext_fields)
    assert new.invisible_time == 5000 and new.revive_qid == answer.revive_qid and new.pop_time >= answer.pop_time
    # An offset past the queue's end: NO_MESSAGE, as ChangeInvisibleTimeProcessor says (no remark).
    past = await broker.call(java_request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, {**change_ext, "offset": "2"}))
    assert (past.code, past.remark) == (ResponseCode.NO_MESSAGE, None)
    assert two.body == b"two"


def test_acl_resources_of_pop_requests() -> None:
    """With aclEnable, pops, acks and invisible-time changes need SUB on their group and topic (an ack of a
    message popped from the pop retry topic names that topic: it stands for the topic)."""
    pop = java_request(RequestCode.POP_MESSAGE, java_pop_ext("T", "G", poll=False))
    assert PlainAccessValidator.needed_resources(pop) == {"%RETRY%G": SUB, "T": SUB}
    ack_ext = {"consumerGroup": "G", "topic": "%RETRY%G_T", "queueId": "0", "extraInfo": "x", "offset": "0"}
    for code in (RequestCode.ACK_MESSAGE, RequestCode.CHANGE_MESSAGE_INVISIBLETIME):
        assert PlainAccessValidator.needed_resources(java_request(code, ack_ext)) == {"%RETRY%G": SUB, "T": SUB}
    body = b'{"acks":[{"b":"AQ==","c":"G","it":1,"pt":1,"q":0,"r":"0","rq":0,"so":0,"t":"U"}],"brokerName":"b"}'
    batch = java_request(RequestCode.BATCH_ACK_MESSAGE, {"AccessKey": "k"}, body)
    assert PlainAccessValidator.needed_resources(batch) == {"%RETRY%G": SUB, "U": SUB}
