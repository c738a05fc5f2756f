"""POP handles as Apache 5.3.3's ExtraInfoUtil writes and reads them, and the pop retry topic (KeyBuilder).

A popped message's POP_CK property (its "extraInfo", the receipt handle's core) is
``ckQueueOffset popTime invisibleTime reviveQid retry brokerName queueId queueOffset``, ``retry`` "0" for the
topic itself, "1" for its pop retry topic ``%RETRY%group_topic`` (and "2" for 5.x's V2 form ``group+topic``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .names import RETRY_GROUP_TOPIC_PREFIX

PROPERTY_POP_CK = "POP_CK"
# ExtraInfoUtil's topic kinds.
NORMAL_TOPIC = "0"
RETRY_TOPIC = "1"
RETRY_TOPIC_V2 = "2"


class PopRecordError(ValueError):
    """An extraInfo string or a revive-topic record that does not parse."""


def pop_retry_topic(topic: str, group: str) -> str:
    """KeyBuilder.buildPopRetryTopicV1 (the default, enableRetryTopicV2=false): ``%RETRY%group_topic``."""
    return f"{RETRY_GROUP_TOPIC_PREFIX}{group}_{topic}"


def is_pop_retry_topic_v2(topic: str) -> bool:
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX) and "+" in topic


def retry_kind(topic: str) -> str:
    """ExtraInfoUtil.getRetry(topic): "2", "1" or "0"."""
    if is_pop_retry_topic_v2(topic):
        return RETRY_TOPIC_V2
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return RETRY_TOPIC
    return NORMAL_TOPIC


def real_topic(topic: str, group: str, retry: str) -> str:
    """ExtraInfoUtil.getRealTopic(topic, cid, retry)."""
    if retry == NORMAL_TOPIC:
        return topic
    if retry == RETRY_TOPIC:
        return pop_retry_topic(topic, group)
    if retry == RETRY_TOPIC_V2:
        return f"{RETRY_GROUP_TOPIC_PREFIX}{group}+{topic}"
    raise PopRecordError("getRetry fail, format is wrong")


# ---------------------------------------------------------------------------- ExtraInfoUtil


def build_extra_info(
    ck_offset: int,
    pop_time: int,
    invisible_time: int,
    revive_qid: int,
    topic: str,
    broker_name: str,
    queue_id: int,
    msg_offset: int,
) -> str:
    """The POP_CK property of a popped message (ExtraInfoUtil.buildExtraInfo, the eight-field form)."""
    return (
        f"{ck_offset} {pop_time} {invisible_time} {revive_qid} {retry_kind(topic)} {broker_name} {queue_id} "
        f"{msg_offset}"
    )


def append_offset_info(out: list[str], topic: str, queue_id: int, value: int | list[int]) -> None:
    """One ``;``-separated item of startOffsetInfo (a start offset) or msgOffsetInfo (the queue offsets popped)."""
    shown = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    out.append(f"{retry_kind(topic)} {queue_id} {shown}")


@dataclass(slots=True, frozen=True)
class ExtraInfo:
    """An extraInfo string split as ExtraInfoUtil reads it; each getter raises with Apache's message."""

    parts: tuple[str, ...]

    @classmethod
    def parse(cls, extra_info: str) -> ExtraInfo:
        # Java's String.split(" ") drops trailing empty strings.
        parts = extra_info.split(" ")
        while parts and parts[-1] == "":
            parts.pop()
        return cls(tuple(parts))

    def _field(self, index: int, name: str) -> str:
        if len(self.parts) <= index:
            raise PopRecordError(f"{name} fail, extraInfoStrs length {len(self.parts)}")
        return self.parts[index]

    def _number(self, index: int, name: str) -> int:
        text = self._field(index, name)
        try:
            value = int(text)
        except ValueError:
            raise PopRecordError(f'For input string: "{text}"') from None
        if not -(1 << 63) <= value < (1 << 63):
            raise PopRecordError(f'For input string: "{text}"')
        return value

    @property
    def ck_queue_offset(self) -> int:
        return self._number(0, "getCkQueueOffset")

    @property
    def pop_time(self) -> int:
        return self._number(1, "getPopTime")

    @property
    def invisible_time(self) -> int:
        return self._number(2, "getInvisibleTime")

    @property
    def revive_qid(self) -> int:
        return self._number(3, "getReviveQid")

    @property
    def retry(self) -> str:
        return self._field(4, "getRetry")

    @property
    def broker_name(self) -> str:
        return self._field(5, "getBrokerName")

    @property
    def queue_id(self) -> int:
        return self._number(6, "getQueueId")

    @property
    def queue_offset(self) -> int:
        return self._number(7, "getQueueOffset")
