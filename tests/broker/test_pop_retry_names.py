"""Pop retry topics (``%RETRY%<group>_<topic>``) of long names. Apache 5.3.3 creates them without TopicValidator's
127-character limit and stores their messages in v2 records; this broker stores v1 records (topics up to 127
characters), so a non-orderly pop whose retry topic would be longer is refused up front with a clear remark (nothing
is popped that could not come back); a retry topic within the limit is created on revive and survives a restart."""

from __future__ import annotations

import pytest_twisted

from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.extra_info import pop_retry_topic
from gateway.remoting.message import decode_records

from .conftest import BrokerUnderTest
from .test_pop import POP_CONFIG, fill, pop_header, pop_until


@pytest_twisted.ensureDeferred
async def test_a_pop_whose_retry_topic_would_be_too_long_is_refused_cleanly(make_broker) -> None:  # type: ignore[no-untyped-def]
    b: BrokerUnderTest = make_broker(**POP_CONFIG)
    b.start()
    try:
        group, topic = "g" * 60, "T" * 70  # %RETRY% + 60 + _ + 70 = 138 characters
        await fill(b, topic, [b"kept"])
        resp = await b.call(RemotingCommand.request(RequestCode.POP_MESSAGE, pop_header(topic, group).encode()))
        assert resp.code == ResponseCode.INVALID_PARAMETER
        assert resp.remark == (
            f"the pop retry topic of group {group} and topic {topic} would be 138 characters, longer than the 127 "
            "this broker stores: use a shorter group or topic name, or orderly pops"
        )
        assert b.controller is not None and b.controller.inflight(group, topic, 0) == (0, 0)
        # Orderly pops need no retry topic: the same group consumes the message that way.
        header = pop_header(topic, group)
        header.order = True
        resp = await b.call(RemotingCommand.request(RequestCode.POP_MESSAGE, header.encode()))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert [m.body for m in decode_records(resp.body)] == [b"kept"]
    finally:
        await b.stop()


@pytest_twisted.ensureDeferred
async def test_a_retry_topic_at_the_limit_is_made_on_revive_and_kept_at_restart(
    make_broker,
    remoting: RemotingClient,  # type: ignore[no-untyped-def]
) -> None:
    group, topic = "g" * 50, "T" * 69  # exactly 127 characters
    retry = pop_retry_topic(topic, group)
    assert len(retry) == 127
    b: BrokerUnderTest = make_broker(**POP_CONFIG)
    b.start()
    try:
        await fill(b, topic, [b"again"])
        first = await pop_until(remoting, b, topic, 5, group=group, invisible_ms=1000)
        assert [m.body for m in first.messages] == [b"again"]
        back = await pop_until(remoting, b, topic, 10, group=group, invisible_ms=60000)
        assert [(m.body, m.reconsume_times) for m in back.messages] == [(b"again", 1)]
        assert b.controller is not None and b.controller.topics.select(retry) is not None
    finally:
        await b.stop()
    b.start()  # the startup check of topics.json keeps it
    try:
        assert b.controller is not None and b.controller.topics.select(retry) is not None
    finally:
        await b.stop()
