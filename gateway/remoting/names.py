"""Topic and group names: RocketMQ's character set, length limits and reserved system names.

Names are checked where they are decoded (custom headers and bodies), before any processor, table,
config file or store path sees them. The rules and remarks are those of 5.x's ``TopicValidator``:
``^[%|a-zA-Z0-9_-]+$``, topics up to 127 characters (retry and DLQ topics up to 255), groups up to 120
(a group becomes part of ``%RETRY%group`` and ``%DLQ%group``).
"""

from __future__ import annotations

import re

from .codes import ResponseCode

TOPIC_MAX_LENGTH = 127
RETRY_OR_DLQ_TOPIC_MAX_LENGTH = 255
GROUP_MAX_LENGTH = 120

# TopicValidator / MixAll names.
AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
BENCHMARK_TOPIC = "BenchmarkTest"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
REPLY_TOPIC_POSTFIX = "REPLY_TOPIC"

SYSTEM_TOPICS = frozenset(
    {
        AUTO_CREATE_TOPIC_KEY_TOPIC,
        SCHEDULE_TOPIC,
        BENCHMARK_TOPIC,
        TRANS_HALF_TOPIC,
        TRACE_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)
# Topics no client may send to.
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)

_LEGAL = re.compile(r"[%|a-zA-Z0-9_-]+").fullmatch


class InvalidNameError(ValueError):
    """A topic or group name that breaks RocketMQ's rules; answered with INVALID_PARAMETER and the reason."""

    code = ResponseCode.INVALID_PARAMETER


def topic_problem(topic: str) -> str | None:
    """TopicValidator.validateTopic: None when ``topic`` is a legal name, else Apache's remark."""
    if not topic or topic.isspace():
        return "The specified topic is blank."
    if _LEGAL(topic) is None:
        return f"The specified topic: {_shown(topic)}, contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
        if len(topic) > RETRY_OR_DLQ_TOPIC_MAX_LENGTH:
            return (
                f"The specified topic is DLQ or Retry topic: {_shown(topic)}, and it's longer than topic max "
                f"length: {RETRY_OR_DLQ_TOPIC_MAX_LENGTH}"
            )
    elif len(topic) > TOPIC_MAX_LENGTH:
        return f"The specified topic: {_shown(topic)}, is longer than topic max length: {TOPIC_MAX_LENGTH}"
    return None


def group_problem(group: str) -> str | None:
    """TopicValidator.validateGroup: None when ``group`` is a legal name, else Apache's remark."""
    if not group or group.isspace():
        return "The specified group is blank."
    if _LEGAL(group) is None:
        return f"The specified group: {_shown(group)}, contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if len(group) > GROUP_MAX_LENGTH:
        return f"The specified group: {_shown(group)}, is longer than group max length: {GROUP_MAX_LENGTH}"
    return None


def check_topic(topic: str) -> str:
    """``topic`` itself if legal; else raise :class:`InvalidNameError`."""
    problem = topic_problem(topic)
    if problem is not None:
        raise InvalidNameError(problem)
    return topic


def check_group(group: str) -> str:
    """``group`` itself if legal; else raise :class:`InvalidNameError`."""
    problem = group_problem(group)
    if problem is not None:
        raise InvalidNameError(problem)
    return group


def is_system_topic(topic: str) -> bool:
    """TopicValidator.isSystemTopic: reserved names and the ``rmq_sys_`` prefix."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


# The groups every broker has from the start (SubscriptionGroupManager.init): MixAll's groups of the tools and of
# ONS, and CID_SYS_RMQ_TRANS (the transaction check-back group), in Apache's order.
SYSTEM_GROUPS = (
    "TOOLS_CONSUMER",
    "FILTERSRV_CONSUMER",
    "SELF_TEST_C_GROUP",
    "CID_ONS-HTTP-PROXY",
    "CID_ONSAPI_PULL",
    "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER",
    "CID_RMQ_SYS_TRANS",
)
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"


def is_system_group(group: str) -> bool:
    """MixAll.isSysConsumerGroup, and the fixed groups Dashboard lists as system groups."""
    return group in SYSTEM_GROUPS or group.startswith(SYSTEM_GROUP_PREFIX)


def _shown(name: str) -> str:
    # A remark echoes the name, but never a huge one nor raw control characters.
    text = name if len(name) <= 300 else name[:300] + "..."
    return text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text
