"""Custom headers declared as data: Java's conversion rules in both directions (§1.8)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.remoting.headers import (
    GetRouteInfoRequestHeader,
    HeaderError,
    QueryConsumerOffsetRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    TopicRequestHeader,
    UnregisterClientRequestHeader,
)
from gateway.remoting.names import InvalidNameError

SETTINGS = settings(max_examples=200, deadline=None, database=None)

SEND_EXT = {
    "producerGroup": "pg",
    "topic": "TopicTest",
    "defaultTopic": "TBW102",
    "defaultTopicQueueNums": "4",
    "queueId": "2",
    "sysFlag": "0",
    "bornTimestamp": "1700000000000",
    "flag": "0",
}


@pytest.mark.parametrize("missing", sorted(SEND_EXT))
def test_missing_required_field_raises(missing: str) -> None:
    ext = {k: v for k, v in SEND_EXT.items() if k != missing}
    with pytest.raises(HeaderError, match=r"is null"):
        SendMessageRequestHeader.decode(ext)


def test_no_ext_fields_at_all() -> None:
    with pytest.raises(HeaderError):
        TopicRequestHeader.decode(None)
    with pytest.raises(HeaderError):
        TopicRequestHeader.decode({})
    # A header without required fields decodes from nothing, fields at their defaults.
    h = GetRouteInfoRequestHeader.decode({"topic": "t"})
    assert h.accept_standard_json_only is False


def test_optional_fields_default_and_unknown_keys_ignored() -> None:
    h = SendMessageRequestHeader.decode({**SEND_EXT, "AccessKey": "ak", "Signature": "sig", "whatever": "1"})
    assert h.properties is None
    assert h.reconsume_times is None
    assert h.max_reconsume_times is None
    assert h.unit_mode is False
    assert h.batch is False
    assert h.bname is None
    assert h.queue_id == 2
    assert h.born_timestamp == 1700000000000
    assert h.default_topic_queue_nums == 4


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("true", True),
        ("TRUE", True),
        ("True", True),
        ("tRuE", True),
        ("false", False),
        ("0", False),
        ("1", False),  # Boolean.parseBoolean: only "true", any case
        ("yes", False),
        ("", False),
        (" true", False),
    ],
)
def test_bool_parses_like_java(raw: str, value: bool) -> None:
    h = GetRouteInfoRequestHeader.decode({"topic": "t", "acceptStandardJsonOnly": raw})
    assert h.accept_standard_json_only is value
    q = QueryConsumerOffsetRequestHeader.decode(
        {"consumerGroup": "g", "topic": "t", "queueId": "0", "setZeroIfNotFound": raw}
    )
    assert q.set_zero_if_not_found is value


@pytest.mark.parametrize(
    ("raw", "value"),
    [("0", 0), ("-1", -1), ("+7", 7), ("2147483647", 2147483647), ("9223372036854775807", 2**63 - 1)],
)
def test_int_parses_like_java(raw: str, value: int) -> None:
    h = RegisterBrokerRequestHeader.decode(
        {
            "brokerName": "b",
            "brokerAddr": "a:1",
            "clusterName": "c",
            "haServerAddr": "a:2",
            "brokerId": "0",
            "bodyCrc32": raw,
        }
    )
    assert h.body_crc32 == value


@pytest.mark.parametrize("raw", ["abc", "", "1.5", "0x10", "1e3", "--1"])
def test_bad_int_leaves_default(raw: str) -> None:
    base = {"brokerName": "b", "brokerAddr": "a:1", "clusterName": "c", "haServerAddr": "a:2", "brokerId": "0"}
    h = RegisterBrokerRequestHeader.decode({**base, "bodyCrc32": raw})
    assert h.body_crc32 == 0  # the declared default
    q = QueryConsumerOffsetRequestHeader.decode({"consumerGroup": "g", "topic": "t", "queueId": "1"})
    assert q.set_zero_if_not_found is None
    # A bad value in a required int field leaves it null, which is then an error.
    with pytest.raises(HeaderError):
        RegisterBrokerRequestHeader.decode({**base, "brokerId": raw})


@pytest.mark.parametrize("raw", [" 5", "5 ", "1_000", "99999999999999999999"])
def test_int_rejects_what_java_rejects(raw: str) -> None:
    base = {"brokerName": "b", "brokerAddr": "a:1", "clusterName": "c", "haServerAddr": "a:2", "brokerId": "0"}
    assert RegisterBrokerRequestHeader.decode({**base, "bodyCrc32": raw}).body_crc32 == 0


def test_required_bool_response_header() -> None:
    assert QueryDataVersionResponseHeader.decode({"changed": "true"}).changed is True
    assert QueryDataVersionResponseHeader.decode({"changed": "nope"}).changed is False
    with pytest.raises(HeaderError):
        QueryDataVersionResponseHeader.decode({})


def test_java_field_names_kept() -> None:
    h = UnregisterClientRequestHeader.decode({"clientID": "192.0.2.2@1", "producerGroup": "pg"})
    assert h.client_id == "192.0.2.2@1"
    assert h.consumer_group is None
    assert h.encode() == {"clientID": "192.0.2.2@1", "producerGroup": "pg"}


def test_encode_gives_strings_and_omits_none() -> None:
    h = SendMessageRequestHeader(
        producer_group="pg",
        topic="t",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=1,
        sys_flag=0,
        born_timestamp=1700000000000,
        flag=0,
        properties="WAIT\x01true",
        reconsume_times=None,
        unit_mode=False,
        max_reconsume_times=None,
        batch=True,
        bname=None,
    )
    ext = h.encode()
    assert ext == {
        "producerGroup": "pg",
        "topic": "t",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "1",
        "sysFlag": "0",
        "bornTimestamp": "1700000000000",
        "flag": "0",
        "properties": "WAIT\x01true",
        "unitMode": "false",
        "batch": "true",
    }
    assert all(type(v) is str for v in ext.values())


def test_response_header_encode() -> None:
    ext = SendMessageResponseHeader(msg_id="7F00000100002A9F0000000000034B52", queue_id=1, queue_offset=250).encode()
    assert ext == {"msgId": "7F00000100002A9F0000000000034B52", "queueId": "1", "queueOffset": "250"}


# ---------------------------------------------------------------------------- V2 one-letter names

V2_LETTERS = dict(zip("abcdefghijklmn", [
    "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp",
    "flag", "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes", "batch", "bname",
], strict=True))  # fmt: skip


def test_v2_letters_map_to_v1_names() -> None:
    """SendMessageRequestHeaderV2: a..n stand for the V1 fields in declaration order."""
    v2 = {
        "a": "pg",
        "b": "t",
        "c": "TBW102",
        "d": "4",
        "e": "3",
        "f": "1",
        "g": "17",
        "h": "8",
        "i": "TAGS\x01x",
        "j": "2",
        "k": "true",
        "l": "16",
        "m": "true",
        "n": "broker-a",
    }
    h = SendMessageRequestHeader.decode_v2(v2)
    assert h == SendMessageRequestHeader.decode({V2_LETTERS[k]: v for k, v in v2.items()})
    assert h.queue_id == 3
    assert h.max_reconsume_times == 16
    assert h.unit_mode is True
    assert h.bname == "broker-a"
    assert h.encode_v2() == v2


def test_v2_missing_required_letter() -> None:
    with pytest.raises(HeaderError):
        SendMessageRequestHeader.decode_v2({"a": "pg", "b": "t"})
    # V1 names are not read by the V2 decoder.
    with pytest.raises(HeaderError):
        SendMessageRequestHeader.decode_v2(SEND_EXT)


INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def send_headers(draw: st.DrawFn) -> SendMessageRequestHeader:
    text = st.text(max_size=20)
    name = st.from_regex(r"[%|a-zA-Z0-9_-]{1,20}", fullmatch=True)
    return SendMessageRequestHeader(
        producer_group=draw(name),
        topic=draw(name),
        default_topic=draw(name),
        default_topic_queue_nums=draw(INT32),
        queue_id=draw(INT32),
        sys_flag=draw(INT32),
        born_timestamp=draw(INT64),
        flag=draw(INT32),
        properties=draw(st.none() | text),
        reconsume_times=draw(st.none() | INT32),
        unit_mode=draw(st.booleans()),
        max_reconsume_times=draw(st.none() | INT32),
        batch=draw(st.booleans()),
        bname=draw(st.none() | text),
    )


@SETTINGS
@given(send_headers())
def test_send_header_round_trips(h: SendMessageRequestHeader) -> None:
    v1 = h.encode()
    v2 = h.encode_v2()
    assert all(type(v) is str for v in [*v1.values(), *v2.values()])
    assert set(v2) <= set("abcdefghijklmn")
    assert {V2_LETTERS[k] for k in v2} == set(v1)
    assert SendMessageRequestHeader.decode(v1) == h
    assert SendMessageRequestHeader.decode_v2(v2) == h


@SETTINGS
@given(
    st.dictionaries(
        st.sampled_from([*SEND_EXT, "properties", "unitMode", "batch", "reconsumeTimes", "x"]),
        st.text(max_size=12) | INT64.map(str) | st.sampled_from(["true", "TRUE", "false"]),
    )
)
def test_decode_raises_only_header_error(ext: dict[str, str]) -> None:
    try:
        h = SendMessageRequestHeader.decode(ext)
    except InvalidNameError:
        assert any(k in ext and ext[k] and not _LEGAL.fullmatch(ext[k]) for k in _NAMES) or any(
            k in ext and not ext[k] for k in _NAMES
        )
        return
    except HeaderError:
        assert not set(SEND_EXT) <= set(ext) or any(not _is_java_long(ext[k]) for k in SEND_EXT if k in _INTS)
        return
    for attr in ("queue_id", "sys_flag", "flag", "born_timestamp", "default_topic_queue_nums"):
        assert type(getattr(h, attr)) is int
    assert type(h.unit_mode) is bool
    assert type(h.batch) is bool
    for attr in ("producer_group", "topic", "default_topic"):
        assert _LEGAL.fullmatch(getattr(h, attr))
    assert h.reconsume_times is None or type(h.reconsume_times) is int


_INTS = {"defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp", "flag"}
_NAMES = ("producerGroup", "topic", "defaultTopic")
_LEGAL = re.compile(r"[%|a-zA-Z0-9_-]+")


def _is_java_long(s: str) -> bool:
    try:
        int(s)
    except ValueError:
        return False
    return True
