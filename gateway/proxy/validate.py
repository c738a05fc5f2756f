"""GrpcValidator: names and message fields checked as Apache's proxy checks them, with its codes and words."""

from __future__ import annotations

import unicodedata

from gateway.remoting.names import group_problem, is_system_topic, topic_problem

from .convert import ProxyError
from .v2 import definition_pb2 as pb

# MixAll.isSysConsumerGroup: the CID_RMQ_SYS_ prefix.
SYS_CONSUMER_GROUP_PREFIX = "CID_RMQ_SYS_"


def has_control_character(text: str) -> bool:
    """CharMatcher.javaIsoControl: U+0000..U+001F and U+007F..U+009F."""
    return any(unicodedata.category(c) == "Cc" for c in text)


def validate_topic(topic: pb.Resource | str) -> str:
    """The topic's name, or ProxyError ILLEGAL_TOPIC."""
    name = topic if isinstance(topic, str) else topic.name
    problem = topic_problem(name)
    if problem is not None:
        raise ProxyError(pb.Code.ILLEGAL_TOPIC, problem)
    if is_system_topic(name):
        raise ProxyError(pb.Code.ILLEGAL_TOPIC, "cannot access system topic")
    return name


def validate_consumer_group(group: pb.Resource | str) -> str:
    """The group's name, or ProxyError ILLEGAL_CONSUMER_GROUP."""
    name = group if isinstance(group, str) else group.name
    problem = group_problem(name)
    if problem is not None:
        raise ProxyError(pb.Code.ILLEGAL_CONSUMER_GROUP, problem)
    if name.startswith(SYS_CONSUMER_GROUP_PREFIX):
        raise ProxyError(pb.Code.ILLEGAL_CONSUMER_GROUP, "cannot use system consumer group")
    return name


def validate_tag(tag: str) -> None:
    if not tag:
        return
    if tag.isspace():
        raise ProxyError(pb.Code.ILLEGAL_MESSAGE_TAG, "tag cannot be the char sequence of whitespace")
    if "|" in tag:
        raise ProxyError(pb.Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain '|'")
    if has_control_character(tag):
        raise ProxyError(pb.Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain control character")
