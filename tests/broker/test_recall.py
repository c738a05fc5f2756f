"""RECALL_MESSAGE (370, RocketMQ 5.3) over real sockets: the recall handle a delayed send answers, the broker's
refusals in Apache's words, and a recalled message never delivered, across a restart."""

from __future__ import annotations

import base64
import time

import pytest_twisted

from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import RecallMessageRequestHeader

from .conftest import sleep
from .test_broker_server import create_topic, send
from .test_schedule import pull_all, wait_for


def recall_request(topic: str, handle: str) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.RECALL_MESSAGE, RecallMessageRequestHeader(topic, handle).encode())


@pytest_twisted.ensureDeferred
async def test_recall_handle_refusals_and_a_recall_across_a_restart(make_broker) -> None:
    broker = make_broker(recallMessageEnable="true")
    broker.start()
    await create_topic(broker, "Recall", 1)
    due = int(time.time() * 1000) + 2500
    handles = {}
    for body in (b"recalled", b"kept"):
        props = {"TIMER_DELIVER_MS": str(due), "UNIQ_KEY": f"UNIQ-{body.decode()}"}
        resp = await send(broker, "Recall", body, props)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        handles[body] = resp.ext_fields["recallHandle"]
    # Apache's HandleV1: URL-safe base64 of "v1 topic brokerName (deliver ms + 1) uniqueId".
    raw = f"v1 Recall broker-a {due + 1} UNIQ-recalled"
    assert handles[b"recalled"] == base64.urlsafe_b64encode(raw.encode()).decode()
    plain = await send(broker, "Recall", b"now", {"UNIQ_KEY": "UNIQ-now"})
    assert "recallHandle" not in plain.ext_fields

    for topic, handle, code, remark in (
        ("Nope", handles[b"kept"], ResponseCode.TOPIC_NOT_EXIST, "recall failed, the topic[Nope] not exist"),
        ("Recall", "!!", ResponseCode.ILLEGAL_OPERATION, "recall handle is invalid"),
        ("Recall", base64.urlsafe_b64encode(b"v2 a b c d").decode(), ResponseCode.ILLEGAL_OPERATION, None),
        ("Recall", base64.urlsafe_b64encode(b"v1 Recall other-broker 9 X").decode(), ResponseCode.ILLEGAL_OPERATION,
         "recall failed, broker service not available"),
        ("Recall", base64.urlsafe_b64encode(b"v1 Recall broker-a 1 X").decode(), ResponseCode.ILLEGAL_OPERATION,
         "recall failed, timestamp invalid"),
    ):  # fmt: skip
        resp = await broker.call(recall_request(topic, handle))
        assert resp.code == code and (remark is None or resp.remark == remark), (resp.code, resp.remark)

    resp = await broker.call(recall_request("Recall", handles[b"recalled"]))
    assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["msgId"] == "UNIQ-recalled"
    await broker.stop()  # both still waiting: the marker is read again after the restart
    broker.start()
    try:
        msgs = await wait_for(broker, "Recall", 2)
        assert [m.body for m in msgs] == [b"now", b"kept"]
        await sleep(0.6)  # the marker's own time passes: it is dropped, not delivered
        assert [m.body for m in await pull_all(broker, "Recall")] == [b"now", b"kept"]
    finally:
        await broker.stop()


@pytest_twisted.ensureDeferred
async def test_recall_is_forbidden_unless_enabled(make_broker) -> None:
    broker = make_broker()
    broker.start()
    try:
        await create_topic(broker, "Recall", 1)
        resp = await broker.call(recall_request("Recall", "anything"))
        assert (resp.code, resp.remark) == (ResponseCode.NO_PERMISSION, "recall failed, operation is forbidden")
    finally:
        await broker.stop()
