"""Topic and group names: 5.x TopicValidator's rules and remarks, and their check in every header that carries one."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.remoting import headers
from gateway.remoting.headers import CommandHeader, Group, Topic
from gateway.remoting.names import (
    InvalidNameError,
    check_group,
    check_topic,
    group_problem,
    is_system_topic,
    topic_problem,
)

LEGAL = st.from_regex(r"[%|a-zA-Z0-9_-]{1,100}", fullmatch=True)


def test_legal_names() -> None:
    assert topic_problem("Topic_A-1%|x") is None
    assert topic_problem("x" * 127) is None
    assert topic_problem("%RETRY%" + "g" * 120) is None
    assert topic_problem("%DLQ%" + "g" * 250) is None
    assert group_problem("g" * 120) is None
    assert check_topic("T") == "T" and check_group("G") == "G"


@pytest.mark.parametrize(
    ("topic", "remark"),
    [
        ("", "The specified topic is blank."),
        ("   ", "The specified topic is blank."),
        ("bad topic", "contains illegal characters"),
        ("abc\n", "contains illegal characters"),  # a regex `$` would accept this one
        ("../../x", "contains illegal characters"),
        ("a/b", "contains illegal characters"),
        ("a\x00b", "contains illegal characters"),
        ("tópico", "contains illegal characters"),
        ("x" * 128, "is longer than topic max length: 127"),
        ("%RETRY%" + "g" * 249, "longer than topic max length: 255"),
    ],
)
def test_illegal_topics(topic: str, remark: str) -> None:
    assert remark in topic_problem(topic)
    with pytest.raises(InvalidNameError, match="topic"):
        check_topic(topic)


@pytest.mark.parametrize(
    ("group", "remark"),
    [
        ("", "The specified group is blank."),
        ("../../../../outside/x", "contains illegal characters"),
        ("g\n", "contains illegal characters"),
        ("g" * 121, "is longer than group max length: 120"),
    ],
)
def test_illegal_groups(group: str, remark: str) -> None:
    assert remark in group_problem(group)
    with pytest.raises(InvalidNameError, match="group"):
        check_group(group)


def test_remark_never_echoes_control_characters_or_huge_names() -> None:
    remark = topic_problem("a\nb" + "x" * 5000)
    assert "\n" not in remark and len(remark) < 500


def test_system_topics() -> None:
    for topic in ("TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRACE_TOPIC", "rmq_sys_wheel_timer", "BenchmarkTest"):
        assert is_system_topic(topic)
    assert not is_system_topic("%RETRY%g")


def _header_fields() -> list[tuple[type[CommandHeader], dataclasses.Field]]:
    """Every field of every header class."""
    return [
        (obj, f)
        for obj in vars(headers).values()
        if isinstance(obj, type) and issubclass(obj, CommandHeader) and dataclasses.is_dataclass(obj)
        for f in dataclasses.fields(obj)
    ]


def _name_fields() -> list[tuple[type[CommandHeader], dataclasses.Field, type]]:
    return [(cls, f, f.metadata["kind"]) for cls, f in _header_fields() if f.metadata["kind"] in (Topic, Group)]


def test_every_topic_and_group_field_is_declared_as_a_name() -> None:
    for cls, f in _header_fields():
        wire_key = f.metadata["wire"]
        if wire_key in ("topic", "defaultTopic", "originTopic"):
            assert f.metadata["kind"] is Topic, (cls.__name__, wire_key)
        if wire_key in ("producerGroup", "consumerGroup", "group", "groupName"):
            assert f.metadata["kind"] is Group, (cls.__name__, wire_key)


# Ids by name: a Field's repr holds addresses, which would differ between parallel workers.
@pytest.mark.parametrize(
    ("cls", "f", "kind"), _name_fields(), ids=lambda v: v.name if isinstance(v, dataclasses.Field) else v.__name__
)
def test_headers_refuse_illegal_names_at_decode(cls: type[CommandHeader], f: dataclasses.Field, kind: type) -> None:
    # Every other field gets a legal value, so only the bad name can be what fails.
    ext = {}
    for other in dataclasses.fields(cls):
        k = other.metadata["kind"]
        ext[other.metadata["wire"]] = "1" if k is int else "true" if k is bool else "Name_1"
    for bad in ("../../x", "abc\n", "a b", "x" * 300):
        ext[f.metadata["wire"]] = bad
        with pytest.raises(InvalidNameError):
            cls.decode(ext)
    ext[f.metadata["wire"]] = "Name_2"
    assert getattr(cls.decode(ext), f.name) == "Name_2"


@given(LEGAL, LEGAL)
def test_send_header_accepts_every_legal_name(topic: str, group: str) -> None:
    ext = {
        "producerGroup": group[:120],
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "0",
        "sysFlag": "0",
        "bornTimestamp": "1",
        "flag": "0",
    }
    h = headers.SendMessageRequestHeader.decode(ext)
    assert (h.topic, h.producer_group) == (topic, group[:120])
