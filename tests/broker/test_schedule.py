"""Delay levels (SCHEDULE_TOPIC_XXXX, delayOffset.json) and 5.x timer messages, over real sockets, across restarts."""

from __future__ import annotations

import struct
import time

import pytest
import pytest_twisted

from gateway.broker.controller import BrokerController
from gateway.broker.timer import TIMER_TOPIC
from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.message import decode_records, properties_to_string
from gateway.remoting.names import SCHEDULE_TOPIC
from gateway.store.api import MessageExtBrokerInner

from .conftest import BrokerUnderTest, sleep
from .test_broker_server import create_topic, pull_request, send

# Level n waits n seconds (level 3, the first retry, 3 s).
FAST_LEVELS = " ".join(f"{n}s" for n in range(1, 19))


async def pull_all(broker: BrokerUnderTest, topic: str, queue_id: int = 0, group: str = "cg") -> list:
    resp = await broker.call(pull_request(topic, queue_id, 0, sub="*", group=group))
    return decode_records(resp.body) if resp.code == ResponseCode.SUCCESS else []


async def wait_for(broker: BrokerUnderTest, topic: str, n: int, timeout: float = 10.0, queue_id: int = 0) -> list:
    deadline = time.monotonic() + timeout
    while True:
        msgs = await pull_all(broker, topic, queue_id)
        if len(msgs) >= n or time.monotonic() > deadline:
            return msgs
        await sleep(0.05)


@pytest_twisted.ensureDeferred
async def test_delay_level_parks_then_delivers_on_time(make_broker) -> None:
    broker = make_broker(messageDelayLevel=FAST_LEVELS)
    broker.start()
    try:
        await create_topic(broker, "Delayed", 2)
        sent_at = time.time() * 1000
        resp = await send(broker, "Delayed", b"later", {"DELAY": "2", "TAGS": "t"}, queue_id=1)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        # The answer names the real queue; the offset is the schedule queue's.
        assert resp.ext_fields["queueId"] == "1" and resp.ext_fields["queueOffset"] == "0"
        assert await pull_all(broker, "Delayed", 1) == []
        (parked,) = await pull_all(broker, SCHEDULE_TOPIC, 1)
        assert parked.properties["REAL_TOPIC"] == "Delayed" and parked.properties["REAL_QID"] == "1"
        (msg,) = await wait_for(broker, "Delayed", 1, queue_id=1)
        assert msg.store_timestamp - sent_at >= 2000 - 50
        assert msg.body == b"later" and msg.tags == "t" and "DELAY" not in msg.properties
        await sleep(0.3)
        assert len(await pull_all(broker, "Delayed", 1)) == 1, "delivered twice"
    finally:
        await broker.stop()
    saved = fastjson.loads((broker.root / "store" / "config" / "delayOffset.json").read_bytes())
    assert saved["offsetTable"][2] == 1
    assert b"{2:1" in (broker.root / "store" / "config" / "delayOffset.json").read_bytes().replace(b" ", b"")


@pytest_twisted.ensureDeferred
async def test_delayed_messages_survive_restarts_and_are_delivered_once(make_broker) -> None:
    broker = make_broker(messageDelayLevel=FAST_LEVELS)
    broker.start()
    await create_topic(broker, "DelayRestart", 1)
    for i, level in enumerate((1, 3, 3)):
        resp = await send(broker, "DelayRestart", f"m{i}".encode(), {"DELAY": str(level)})
        assert resp.code == ResponseCode.SUCCESS
    assert len(await wait_for(broker, "DelayRestart", 1)) == 1  # level 1 is out, level 3 still parked
    await broker.stop()
    broker.start()
    try:
        msgs = await wait_for(broker, "DelayRestart", 3)
        assert sorted(m.body for m in msgs) == [b"m0", b"m1", b"m2"]
        await broker.stop()
        broker.start()
        await sleep(0.5)
        assert len(await pull_all(broker, "DelayRestart")) == 3, "a restart delivered again"
    finally:
        await broker.stop()


@pytest_twisted.ensureDeferred
async def test_delay_level_above_max_is_capped_and_get_all_delay_offset(make_broker) -> None:
    broker = make_broker(messageDelayLevel="1s 1s 1s")
    broker.start()
    try:
        await create_topic(broker, "Capped", 1)
        assert (await send(broker, "Capped", b"x", {"DELAY": "99"})).code == ResponseCode.SUCCESS
        (parked,) = await pull_all(broker, SCHEDULE_TOPIC, 2)
        assert parked.properties["DELAY"] == "3"
        await wait_for(broker, "Capped", 1)
        resp = await broker.call(RemotingCommand.request(RequestCode.GET_ALL_DELAY_OFFSET))
        assert fastjson.loads(resp.body)["offsetTable"] == {3: 1}
    finally:
        await broker.stop()


@pytest_twisted.ensureDeferred
async def test_timer_messages_deliver_at_their_time_in_any_order_across_a_restart(make_broker) -> None:
    broker = make_broker()
    broker.start()
    await create_topic(broker, "Timed", 1)
    now = int(time.time() * 1000)
    for body, props in (
        (b"late", {"TIMER_DELIVER_MS": str(now + 2500)}),
        (b"early", {"TIMER_DELAY_MS": "700"}),
        (b"middle", {"TIMER_DELAY_SEC": "2"}),
        (b"due", {"TIMER_DELIVER_MS": str(now - 10)}),  # already due: an ordinary message
    ):
        resp = await send(broker, "Timed", body, props)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert [m.body for m in await pull_all(broker, "Timed")] == [b"due"]
    assert len(await pull_all(broker, TIMER_TOPIC)) == 3
    msgs = await wait_for(broker, "Timed", 2)
    assert [m.body for m in msgs] == [b"due", b"early"]
    assert int(msgs[1].properties["TIMER_OUT_MS"]) <= msgs[1].store_timestamp
    await broker.stop()  # "middle" and "late" are still waiting
    broker.start()
    try:
        msgs = await wait_for(broker, "Timed", 4)
        assert [m.body for m in msgs] == [b"due", b"early", b"middle", b"late"]
        assert msgs[3].store_timestamp >= now + 2500
        assert "REAL_TOPIC" not in msgs[3].properties and "TIMER_DEQUEUE_MS" in msgs[3].properties
        await broker.stop()
        broker.start()
        await sleep(0.4)
        assert len(await pull_all(broker, "Timed")) == 4, "a restart delivered again"
    finally:
        await broker.stop()


@pytest_twisted.ensureDeferred
async def test_timer_message_too_far_away_is_refused_and_delay_level_wins(make_broker) -> None:
    broker = make_broker(messageDelayLevel=FAST_LEVELS, timerMaxDelaySec="60")
    broker.start()
    try:
        await create_topic(broker, "TimedBad", 1)
        resp = await send(broker, "TimedBad", b"x", {"TIMER_DELAY_SEC": "61"})
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL and "timer message illegal" in resp.remark
        resp = await send(broker, "TimedBad", b"x", {"TIMER_DELAY_MS": "soon"})
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL
        resp = await send(broker, "TimedBad", b"y", {"TIMER_DELAY_SEC": "61", "DELAY": "1"})
        assert resp.code == ResponseCode.SUCCESS
        (parked,) = await pull_all(broker, SCHEDULE_TOPIC, 0)
        assert "TIMER_DELAY_SEC" not in parked.properties
    finally:
        await broker.stop()


@pytest_twisted.ensureDeferred
async def test_delivery_time_beyond_the_level_delay_counts_as_due(make_broker) -> None:
    """A unit dated further ahead than its level's delay (the clock went back) is delivered at once."""
    broker = make_broker(messageDelayLevel=FAST_LEVELS)
    controller = broker.start()
    try:
        await create_topic(broker, "Skewed", 1)
        props = {"DELAY": "1", "REAL_TOPIC": "Skewed", "REAL_QID": "0"}
        parked = MessageExtBrokerInner(
            topic=SCHEDULE_TOPIC,
            queue_id=0,
            flag=0,
            body=b"skewed",
            properties=properties_to_string(props),
            tags_code=int(time.time() * 1000) + 3_600_000,
            sys_flag=0,
            born_timestamp=int(time.time() * 1000),
            born_host=controller.store_host,
            store_host=controller.store_host,
        )
        assert controller.store.put_message(parked).ok
        (msg,) = await wait_for(broker, "Skewed", 1, timeout=2.0)
        assert msg.body == b"skewed"
    finally:
        await broker.stop()


@pytest_twisted.ensureDeferred
async def test_timer_properties_are_ignored_when_the_timer_is_off(make_broker) -> None:
    broker = make_broker(timerWheelEnable="false")
    broker.start()
    try:
        await create_topic(broker, "TimerOff", 1)
        assert (await send(broker, "TimerOff", b"now", {"TIMER_DELAY_SEC": "60"})).code == ResponseCode.SUCCESS
        assert [m.body for m in await pull_all(broker, "TimerOff")] == [b"now"]
    finally:
        await broker.stop()


def park_three_blank_the_middle(controller: BrokerController, topic: str, queue_id: int, real_topic: str) -> None:
    """Park a, b, c (due in 1 s) in ``topic``'s queue, a first in the store; then blank b's unit, as recovery does
    when it skips b's record as damaged."""
    now = int(time.time() * 1000)
    props = {"REAL_TOPIC": real_topic, "REAL_QID": "0"}
    if topic == SCHEDULE_TOPIC:
        props["DELAY"] = "1"
    appended = []
    for body in (b"a", b"b", b"c"):
        parked = MessageExtBrokerInner(
            topic=topic,
            queue_id=queue_id,
            flag=0,
            body=body,
            properties=properties_to_string(props),
            tags_code=now + 1000,
            sys_flag=0,
            born_timestamp=now,
            born_host=controller.store_host,
            store_host=controller.store_host,
        )
        result = controller.store.put_message(parked)
        assert result.ok
        appended.append(result.append)
    assert appended[0].wrote_offset == 0  # what a blank unit used to be read as
    b = appended[1]
    cq = controller.store.consume_queue_table[(topic, queue_id)]
    assert cq.blank_units_in([(b.wrote_offset, b.wrote_offset + b.wrote_bytes)]) == 1


@pytest_twisted.ensureDeferred
async def test_delay_level_delivery_passes_over_a_blank_unit(make_broker) -> None:
    broker = make_broker(messageDelayLevel=FAST_LEVELS)
    controller = broker.start()
    try:
        await create_topic(broker, "Blanked", 1)
        park_three_blank_the_middle(controller, SCHEDULE_TOPIC, 0, "Blanked")
        await wait_for(broker, "Blanked", 3, timeout=2.5)
        assert [m.body for m in await pull_all(broker, "Blanked")] == [b"a", b"c"]
    finally:
        await broker.stop()
    saved = fastjson.loads((broker.root / "store" / "config" / "delayOffset.json").read_bytes())
    assert saved["offsetTable"][1] == 3


@pytest_twisted.ensureDeferred
async def test_timer_delivery_passes_over_a_blank_unit(make_broker) -> None:
    broker = make_broker()
    controller = broker.start()
    try:
        await create_topic(broker, "BlankedTimer", 1)
        park_three_blank_the_middle(controller, TIMER_TOPIC, 0, "BlankedTimer")
        await wait_for(broker, "BlankedTimer", 3, timeout=2.5)
        assert [m.body for m in await pull_all(broker, "BlankedTimer")] == [b"a", b"c"]
    finally:
        await broker.stop()


@pytest_twisted.ensureDeferred
async def test_timer_check_point_is_served_and_a_slave_marks_what_it_covers(make_broker) -> None:
    broker = make_broker()
    broker.start()
    try:
        await create_topic(broker, "TimedCk", 1)
        for body, delay_ms in ((b"soon", "300"), (b"later", "60000")):
            resp = await send(broker, "TimedCk", body, {"TIMER_DELAY_MS": delay_ms})
            assert resp.code == ResponseCode.SUCCESS, resp.remark
        await wait_for(broker, "TimedCk", 1)
        resp = await broker.call(RemotingCommand.request(RequestCode.GET_TIMER_CHECK_POINT))
        assert resp.code == ResponseCode.SUCCESS and len(resp.body) == 56  # TimerCheckpoint.encode
        last_read, _, queue_offset, master_offset = struct.unpack(">4q", resp.body[:32])
        # "soon" delivered, "later" not: every unit due before lastReadTimeMs is delivered, "later" is not.
        assert queue_offset == master_offset == 1 and time.time() * 1000 - 5000 < last_read < time.time() * 1000
        timer = broker.controller.timer
        # A slave that delivered nothing marks "soon" delivered, not "later"; an old checkpoint changes nothing.
        timer.commit_offset = timer.read_offset = 0
        assert timer.follow_master(resp.body) == last_read
        assert (timer.commit_offset, timer.read_offset, timer.pending) == (1, 1, [])
        assert b'"commitOffset":1' in timer.path.read_bytes()
        assert timer.follow_master(struct.pack(">7q", 0, 0, 0, 0, 0, 0, 0)) == 0 and timer.commit_offset == 1
        with pytest.raises(ValueError, match="timer checkpoint of 8 bytes"):
            timer.follow_master(b"\0" * 8)
        # A checkpoint past "later"'s time covers it too.
        timer.follow_master(struct.pack(">7q", int(time.time() * 1000) + 120_000, 0, 0, 0, 0, 0, 0))
        assert timer.commit_offset == 2
    finally:
        await broker.stop()
