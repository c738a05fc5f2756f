"""QUERY_MESSAGE, VIEW_MESSAGE_BY_ID and the lookups mqadmin builds on them; compressed bodies kept as sent;
the disk guard and retention as clients see them."""

from __future__ import annotations

import os
import time
import zlib

import pytest_twisted
from twisted.internet.error import ConnectError

from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import QueryMessageRequestHeader, TopicQueueRequestHeader, ViewMessageRequestHeader
from gateway.remoting.message import MessageExt, MessageSysFlag, decode_offset_message_id, decode_records

from .conftest import BrokerUnderTest
from .test_broker_server import create_topic, pull_request, send, send_header

FOREVER = 1 << 62


def query(topic: str, key: str, max_num: int = 32, unique: bool = False, begin: int = 0, end: int = FOREVER):
    ext = QueryMessageRequestHeader(
        topic=topic, key=key, max_num=max_num, begin_timestamp=begin, end_timestamp=end
    ).encode()
    if unique:
        ext["_UNIQUE_KEY_QUERY"] = "true"
    return RemotingCommand.request(RequestCode.QUERY_MESSAGE, ext)


def view(offset: int) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(offset).encode())


async def query_msg_by_id(remoting: RemotingClient, broker: BrokerUnderTest, topic: str, msg_id: str) -> MessageExt:
    """mqadmin queryMsgById: VIEW at the address inside an offsetMsgId, else a unique-key QUERY (earliest match)."""
    try:
        addr, offset = decode_offset_message_id(msg_id)
        resp = await remoting.invoke(addr, view(offset), 5.0)
        if resp.code == ResponseCode.SUCCESS:
            (msg,) = decode_records(resp.body)
            return msg
    except (ValueError, ConnectError):
        pass  # not an offset id, or no broker at its address: the id must be a UNIQ_KEY
    resp = await broker.call(query(topic, msg_id, max_num=1, unique=True))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    found = [m for m in decode_records(resp.body) if m.uniq_key == msg_id]
    return min(found, key=lambda m: m.store_timestamp)


@pytest_twisted.ensureDeferred
async def test_query_by_key(broker: BrokerUnderTest) -> None:
    await create_topic(broker, "Orders", 2)
    sent = []
    for i in range(5):
        resp = await send(broker, "Orders", b"%d" % i, {"KEYS": f"order-{i % 2} shared", "UNIQ_KEY": f"U{i}"}, i % 2)
        assert resp.code == ResponseCode.SUCCESS
        sent.append(resp.ext_fields["msgId"])
    resp = await broker.call(query("Orders", "order-1"))
    assert resp.code == ResponseCode.SUCCESS and resp.remark is None
    assert [m.body for m in decode_records(resp.body)] == [b"1", b"3"]
    last_offset = decode_offset_message_id(sent[-1])[1]
    assert int(resp.ext_fields["indexLastUpdatePhyoffset"]) == last_offset
    assert abs(int(resp.ext_fields["indexLastUpdateTimestamp"]) - time.time() * 1000) < 60_000
    resp = await broker.call(query("Orders", "shared", max_num=2))
    assert [m.body for m in decode_records(resp.body)] == [b"3", b"4"]  # the newest two, oldest first
    resp = await broker.call(query("Orders", "order-1", end=int(time.time() * 1000) - 3_600_000))
    assert resp.code == ResponseCode.QUERY_NOT_FOUND


@pytest_twisted.ensureDeferred
async def test_query_not_found_answers_22_with_the_header(broker: BrokerUnderTest) -> None:
    resp = await broker.call(query("Nothing", "nope"))
    assert (resp.code, resp.remark) == (
        ResponseCode.QUERY_NOT_FOUND,
        "can not find message, maybe time range not correct",
    )
    assert resp.ext_fields["indexLastUpdateTimestamp"] == resp.ext_fields["indexLastUpdatePhyoffset"] == "0"
    assert resp.body in (b"", None)
    resp = await broker.call(RemotingCommand.request(RequestCode.QUERY_MESSAGE, {"topic": "T"}))
    assert resp.code == ResponseCode.SYSTEM_ERROR  # required fields missing


@pytest_twisted.ensureDeferred
async def test_unique_key_query_ignores_max_num(broker: BrokerUnderTest) -> None:
    await create_topic(broker, "Retried", 1)
    for body in (b"first", b"retry"):  # a producer retry stores the same UNIQ_KEY twice
        assert (await send(broker, "Retried", body, {"UNIQ_KEY": "AB12"})).code == ResponseCode.SUCCESS
    resp = await broker.call(query("Retried", "AB12", max_num=1))
    assert [m.body for m in decode_records(resp.body)] == [b"retry"]
    resp = await broker.call(query("Retried", "AB12", max_num=1, unique=True))
    assert [m.body for m in decode_records(resp.body)] == [b"first", b"retry"]  # defaultQueryMaxNum instead


@pytest_twisted.ensureDeferred
async def test_view_message_by_offset_id(broker: BrokerUnderTest) -> None:
    await create_topic(broker, "Viewed", 1)
    resp = await send(broker, "Viewed", b"a", {})
    resp = await send(broker, "Viewed", b"b", {"TAGS": "t"})
    addr, offset = decode_offset_message_id(resp.ext_fields["msgId"])
    assert addr == broker.addr
    got = await broker.call(view(offset))
    assert got.code == ResponseCode.SUCCESS
    (msg,) = decode_records(got.body)
    assert (msg.body, msg.tags, msg.msg_id) == (b"b", "t", resp.ext_fields["msgId"])
    for bad in (offset + 1, offset + 10_000, -1):
        got = await broker.call(view(bad))
        assert (got.code, got.remark) == (ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {bad}")


@pytest_twisted.ensureDeferred
async def test_mqadmin_query_msg_by_id_both_ways(broker: BrokerUnderTest, remoting: RemotingClient) -> None:
    await create_topic(broker, "Admin", 1)
    uniq = "7F000001" + "00000001" + "0000000000001234"  # also parses as an offset id, of 127.0.0.1:1 (refused)
    resp = await send(broker, "Admin", b"payload", {"UNIQ_KEY": uniq})
    by_offset_id = await query_msg_by_id(remoting, broker, "Admin", resp.ext_fields["msgId"])
    by_uniq_key = await query_msg_by_id(remoting, broker, "Admin", uniq)
    assert by_offset_id.body == by_uniq_key.body == b"payload"
    assert by_offset_id.commitlog_offset == by_uniq_key.commitlog_offset


@pytest_twisted.ensureDeferred
async def test_compressed_body_is_stored_and_returned_as_sent(broker: BrokerUnderTest) -> None:
    await create_topic(broker, "Zipped", 1)
    original = os.urandom(200) * 50
    compressed = zlib.compress(original)
    header = send_header("Zipped", {"KEYS": "z"})
    header["f"] = str(MessageSysFlag.COMPRESSED_FLAG)  # sysFlag
    resp = await broker.call(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, compressed))
    assert resp.code == ResponseCode.SUCCESS
    offset = decode_offset_message_id(resp.ext_fields["msgId"])[1]
    pulled = await broker.call(pull_request("Zipped", 0, 0, sub="*"))
    viewed = await broker.call(view(offset))
    queried = await broker.call(query("Zipped", "z"))
    for body in (pulled.body, viewed.body, queried.body):
        (raw,) = decode_records(body, decompress=False)
        assert raw.body == compressed and raw.sys_flag & MessageSysFlag.COMPRESSED_FLAG
        assert raw.body_crc == zlib.crc32(compressed) & 0x7FFFFFFF
        (msg,) = decode_records(body)
        assert msg.body == original


class Disk:
    def __init__(self, ratio: float) -> None:
        self.ratio = ratio

    def __call__(self, path: str) -> float:
        return self.ratio


@pytest_twisted.ensureDeferred
async def test_full_disk_refuses_sends_with_14_until_space_returns(broker: BrokerUnderTest) -> None:
    await create_topic(broker, "Guarded", 1)
    clean = broker.controller.clean_service
    disk = Disk(0.93)
    clean.commit_log.disk_used_ratio = disk
    await clean.run()
    resp = await send(broker, "Guarded", b"x", {})
    assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE and "disk is full" in resp.remark
    disk.ratio = 0.6
    await clean.run()
    assert (await send(broker, "Guarded", b"x", {})).code == ResponseCode.SUCCESS


@pytest_twisted.ensureDeferred
async def test_retention_moves_min_offset_and_old_pulls_get_21(make_broker) -> None:
    b = make_broker(mappedFileSizeCommitLog="4096", mappedFileSizeConsumeQueue="200", maxIndexNum="64")
    b.start()
    try:
        await create_topic(b, "Old", 1)
        for i in range(80):
            assert (await send(b, "Old", os.urandom(150), {"KEYS": f"k{i}"})).code == ResponseCode.SUCCESS
        store = b.controller.store
        segments = len(store.commit_log.queue.files)
        assert segments >= 5
        clean = b.controller.clean_service
        clean.commit_log.disk_used_ratio = Disk(0.87)  # above diskSpaceCleanForciblyRatio: any age goes
        await clean.run()
        assert len(store.commit_log.queue.files) == 1
        min_offset = await b.call(
            RemotingCommand.request(RequestCode.GET_MIN_OFFSET, TopicQueueRequestHeader("Old", 0).encode())
        )
        new_min = int(min_offset.ext_fields["offset"])
        assert 0 < new_min < 80
        resp = await b.call(pull_request("Old", 0, 0, sub="*"))
        assert resp.code == ResponseCode.PULL_OFFSET_MOVED
        assert int(resp.ext_fields["nextBeginOffset"]) == new_min
        resp = await b.call(pull_request("Old", 0, new_min, sub="*"))
        assert resp.code == ResponseCode.SUCCESS
        assert (await b.call(query("Old", "k0"))).code == ResponseCode.QUERY_NOT_FOUND
        assert (await b.call(query("Old", "k79"))).code == ResponseCode.SUCCESS
    finally:
        await b.stop()
