"""Receipt handles: what a 5.x consumer gets with each popped message and gives back to ack it.

The format is Apache's (``ReceiptHandle``): the broker's pop checkpoint info (``ExtraInfoUtil``: start offset,
pop time, invisible time, revive queue id, topic type, broker name, queue id, queue offset) followed by the
message's commitlog offset, joined by single spaces. Apache's own proxy and broker accept the handles we make,
and a handle coming back from a client is hostile: every field is checked before it reaches a broker.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from gateway.remoting.extra_info import NORMAL_TOPIC, RETRY_TOPIC, RETRY_TOPIC_V2, real_topic

SEPARATOR = " "  # MessageConst.KEY_SEPARATOR
TOPIC_TYPES = frozenset({NORMAL_TOPIC, RETRY_TOPIC, RETRY_TOPIC_V2})

# A handle is about 100 characters; anything much longer is not one.
MAX_LENGTH = 512
BROKER_NAME_MAX_LENGTH = 255

_INT64_MAX = (1 << 63) - 1
_INT32_MAX = (1 << 31) - 1
# Java's Long.parseLong takes a sign; a handle of ours never has one, and -1 is Apache's "no commitlog offset".
_NUMBER = re.compile(r"-?[0-9]{1,19}").fullmatch
_BROKER_NAME = re.compile(r"[!-~]+").fullmatch  # printable ASCII without spaces


class InvalidReceiptHandle(ValueError):
    """A receipt handle that is not one of ours (answered with Code.INVALID_RECEIPT_HANDLE)."""


def _number(text: str, what: str, low: int, high: int) -> int:
    if _NUMBER(text) is None:
        raise InvalidReceiptHandle(f"receipt handle has a bad {what}: {text[:32]!r}")
    value = int(text)
    if not low <= value <= high:
        raise InvalidReceiptHandle(f"receipt handle has a {what} out of range: {value}")
    return value


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    """One decoded receipt handle; ``handle`` is the string as the client sent it (the broker's extraInfo)."""

    start_offset: int
    retrieve_time: int  # the pop time, ms
    invisible_time: int  # ms
    revive_queue_id: int
    topic_type: str
    broker_name: str
    queue_id: int
    offset: int  # the message's queue offset
    commit_log_offset: int  # -1 when the handle has only the broker's eight fields
    handle: str

    @property
    def next_visible_time(self) -> int:
        """When the message comes back if not acked (ms since the epoch)."""
        return self.retrieve_time + self.invisible_time

    def is_expired(self, now_ms: int | None = None) -> bool:
        """ReceiptHandle.isExpired: the invisible time has passed, so the broker may have redelivered it."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return self.next_visible_time <= now

    def real_topic(self, topic: str, group: str) -> str:
        """ReceiptHandle.getRealTopic: the topic the broker popped the message from (a retry topic or ``topic``)."""
        return real_topic(topic, group, self.topic_type)

    @property
    def is_retry_topic(self) -> bool:
        return self.topic_type != NORMAL_TOPIC

    @classmethod
    def decode(cls, handle: str) -> ReceiptHandle:
        """Parse and check a handle from a client; raises :class:`InvalidReceiptHandle` saying what is wrong."""
        if not handle:
            raise InvalidReceiptHandle("receipt handle is empty")
        if len(handle) > MAX_LENGTH:
            raise InvalidReceiptHandle(f"receipt handle is too long: {len(handle)} characters")
        fields = handle.split(SEPARATOR)
        if len(fields) not in (8, 9):
            raise InvalidReceiptHandle(f"receipt handle has {len(fields)} fields, not 8 or 9")
        topic_type, broker_name = fields[4], fields[5]
        if topic_type not in TOPIC_TYPES:
            raise InvalidReceiptHandle(f"receipt handle has an unknown topic type: {topic_type[:8]!r}")
        if _BROKER_NAME(broker_name) is None or len(broker_name) > BROKER_NAME_MAX_LENGTH:
            raise InvalidReceiptHandle(f"receipt handle has a bad broker name: {broker_name[:64]!r}")
        return cls(
            start_offset=_number(fields[0], "start offset", 0, _INT64_MAX),
            retrieve_time=_number(fields[1], "pop time", 0, _INT64_MAX),
            invisible_time=_number(fields[2], "invisible time", 0, _INT64_MAX),
            revive_queue_id=_number(fields[3], "revive queue id", 0, _INT32_MAX),
            topic_type=topic_type,
            broker_name=broker_name,
            queue_id=_number(fields[6], "queue id", 0, _INT32_MAX),
            offset=_number(fields[7], "queue offset", 0, _INT64_MAX),
            commit_log_offset=_number(fields[8], "commitlog offset", -1, _INT64_MAX) if len(fields) == 9 else -1,
            handle=handle,
        )


def create_handle(extra_info: str, commit_log_offset: int) -> str:
    """ConsumerProcessor.createHandle: the broker's POP_CK extraInfo plus the message's commitlog offset."""
    return f"{extra_info}{SEPARATOR}{commit_log_offset}"
