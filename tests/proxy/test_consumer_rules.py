"""The consumer calls' rules that need no broker: long-polling time, invisible time, filters, names."""

from __future__ import annotations

import pytest
from google.protobuf.duration_pb2 import Duration

from gateway.proxy.config import ProxyConfig
from gateway.proxy.consumer import (
    FilterResult,
    build_subscription,
    filter_message,
    polling_time,
    validate_invisible_time,
    validate_topic_and_group,
)
from gateway.proxy.convert import ProxyError
from gateway.proxy.v2 import definition_pb2 as pb
from gateway.proxy.v2 import service_pb2 as spb
from gateway.remoting.message import MessageExt

CONFIG = ProxyConfig()


def _request(long_polling_ms: int | None) -> spb.ReceiveMessageRequest:
    r = spb.ReceiveMessageRequest()
    if long_polling_ms is not None:
        r.long_polling_timeout.CopyFrom(Duration(seconds=long_polling_ms // 1000, nanos=long_polling_ms % 1000 * 10**6))
    return r


def test_polling_time_is_the_clients_within_bounds_and_deadline():
    assert polling_time(_request(15_000), 3000, 60_000, "5.1.2", CONFIG) == 15_000
    assert polling_time(_request(2_000), 3000, 60_000, "5.1.2", CONFIG) == 5_000  # raised to the minimum
    assert polling_time(_request(30_000), 3000, 60_000, "5.1.2", CONFIG) == 20_000  # cut to the maximum
    assert polling_time(_request(15_000), 3000, 8_000, "5.1.2", CONFIG) == 8_000  # never past the deadline
    # Without a client value: the deadline less half a request timeout.
    assert polling_time(_request(None), 3000, 12_000, "5.1.2", CONFIG) == 10_500


def test_polling_time_refused_when_the_deadline_is_too_close():
    with pytest.raises(ProxyError) as e:
        polling_time(_request(15_000), 3000, 4_000, "5.1.2", CONFIG)
    assert e.value.code == pb.ILLEGAL_POLLING_TIME
    with pytest.raises(ProxyError) as e:
        polling_time(_request(15_000), 3000, 4_000, "5.0.2", CONFIG)
    assert e.value.code == pb.BAD_REQUEST  # a client too old to know ILLEGAL_POLLING_TIME


def test_invisible_time_bounds():
    validate_invisible_time(10_000, 10_000, CONFIG)
    with pytest.raises(ProxyError, match=r"too small\. min is 10000") as e:
        validate_invisible_time(9_999, 10_000, CONFIG)
    assert e.value.code == pb.ILLEGAL_INVISIBLE_TIME
    with pytest.raises(ProxyError, match=r"too large\. max is 43200000"):
        validate_invisible_time(43_200_001, 0, CONFIG)


def test_filter_expressions():
    tags = build_subscription("T", pb.FilterExpression(type=pb.TAG, expression="a || b"))
    assert tags.expression_type == "TAG" and tags.tags_set == ["a", "b"]
    everything = build_subscription("T", pb.FilterExpression(type=pb.TAG, expression=""))
    assert everything.sub_string == "*" and everything.tags_set == []
    sql = build_subscription("T", pb.FilterExpression(type=pb.SQL, expression="a > 1"))
    assert (sql.expression_type, sql.sub_string) == ("SQL92", "a > 1")
    with pytest.raises(ProxyError, match="Expression can't be null! SQL92") as e:
        build_subscription("T", pb.FilterExpression(type=pb.SQL, expression=""))
    assert e.value.code == pb.ILLEGAL_FILTER_EXPRESSION


def _msg(tags: str | None, reconsume: int) -> MessageExt:
    props = {"TAGS": tags} if tags is not None else {}
    return MessageExt("T", b"", 0, props, 0, 0, 0, 0, 0, "", 0, "", reconsume, 0, 0, 0, "")


def test_pop_result_filter():
    sub = build_subscription("T", pb.FilterExpression(type=pb.TAG, expression="a"))
    assert filter_message(sub, _msg("a", 0), 3) is FilterResult.MATCH
    assert filter_message(sub, _msg("b", 0), 3) is FilterResult.NO_MATCH  # a tag-hash collision
    assert filter_message(sub, _msg(None, 0), 3) is FilterResult.NO_MATCH
    assert filter_message(sub, _msg("a", 3), 3) is FilterResult.TO_DLQ
    everything = build_subscription("T", pb.FilterExpression(type=pb.TAG, expression="*"))
    assert filter_message(everything, _msg(None, 2), 3) is FilterResult.MATCH


@pytest.mark.parametrize(
    ("topic", "group", "code"),
    [
        ("T", "G", None),
        ("", "G", pb.ILLEGAL_TOPIC),
        ("bad topic", "G", pb.ILLEGAL_TOPIC),
        ("rmq_sys_REVIVE_LOG_X", "G", pb.ILLEGAL_TOPIC),
        ("T", "", pb.ILLEGAL_CONSUMER_GROUP),
        ("T", "CID_RMQ_SYS_REVIVE", pb.ILLEGAL_CONSUMER_GROUP),
    ],
)
def test_topic_and_group_names(topic, group, code):
    if code is None:
        assert validate_topic_and_group(pb.Resource(name=topic), pb.Resource(name=group)) == (topic, group)
        return
    with pytest.raises(ProxyError) as e:
        validate_topic_and_group(pb.Resource(name=topic), pb.Resource(name=group))
    assert e.value.code == code
