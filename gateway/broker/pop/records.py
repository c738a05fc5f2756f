"""The records of POP consumption as Apache 5.3.3 writes them: PopCheckPoint, AckMsg and BatchAckMsg (fastjson
bodies of revive-topic messages) and the revive topic's names (PopAckConstants)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.remoting import fastjson
from gateway.remoting.extra_info import PopRecordError
from gateway.remoting.names import RETRY_GROUP_TOPIC_PREFIX, SYSTEM_TOPIC_PREFIX

REVIVE_TOPIC_PREFIX = SYSTEM_TOPIC_PREFIX + "REVIVE_LOG_"
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
CK_TAG = "ck"
ACK_TAG = "ack"
BATCH_ACK_TAG = "bAck"
SPLIT = "@"
# The revive "queue" of orderly pops: they write no checkpoint.
POP_ORDER_REVIVE_QUEUE = 999
# PopAckConstants.ackTimeInterval: a checkpoint is delivered this long before its revive time.
ACK_TIME_INTERVAL = 1000
SECOND = 1000
# PopAckConstants.retryQueueNum
RETRY_QUEUE_NUM = 1
# MessageConst properties of pop.
PROPERTY_FIRST_POP_TIME = "1ST_POP_TIME"
# A checkpoint covers at most one pop of one queue (32 messages); more in a record is not ours.
_MAX_CK_MESSAGES = 127


def revive_topic(cluster: str) -> str:
    """PopAckConstants.buildClusterReviveTopic."""
    return REVIVE_TOPIC_PREFIX + cluster


def parse_normal_topic(topic: str, group: str) -> str:
    """KeyBuilder.parseNormalTopic(topic, cid): the topic a pop retry topic stands for."""
    if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return topic
    v2 = f"{RETRY_GROUP_TOPIC_PREFIX}{group}+"
    if topic.startswith(v2):
        return topic[len(v2) :]
    return topic[len(f"{RETRY_GROUP_TOPIC_PREFIX}{group}_") :]


# ---------------------------------------------------------------------------- revive-topic bodies


def _get(obj: dict[str, Any], short: str, long: str | None = None) -> Any:
    v = obj.get(short)
    if v is None and long is not None:
        v = obj.get(long)
    return v


def _int(obj: dict[str, Any], short: str, long: str | None = None, default: int = 0) -> int:
    v = _get(obj, short, long)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise PopRecordError(f"'{short}' is not a number")
    try:
        return int(v)
    except ValueError:
        raise PopRecordError(f"'{short}' is not a number") from None


def _str(obj: dict[str, Any], short: str, long: str | None = None) -> str | None:
    v = _get(obj, short, long)
    return None if v is None else str(v)


def _object(body: bytes) -> dict[str, Any]:
    try:
        obj = fastjson.loads(body)
    except ValueError as e:
        raise PopRecordError(f"not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise PopRecordError("not a JSON object")
    return obj


@dataclass(slots=True)
class PopCheckPoint:
    """One pop of one queue: the messages at ``start_offset`` + each of ``queue_offset_diff``; ``bit_map`` marks
    the acked ones; due again at ``pop_time`` + ``invisible_time``."""

    start_offset: int
    pop_time: int
    invisible_time: int
    bit_map: int
    num: int
    queue_id: int
    topic: str
    cid: str
    revive_offset: int = 0
    queue_offset_diff: list[int] | None = None
    broker_name: str | None = None
    re_put_times: str | None = None

    @property
    def revive_time(self) -> int:
        return self.pop_time + self.invisible_time

    def index_of_ack(self, ack_offset: int) -> int:
        """The message's index in this checkpoint, or -1."""
        if ack_offset < self.start_offset:
            return -1
        diff = ack_offset - self.start_offset
        if not self.queue_offset_diff:  # old checkpoints: consecutive offsets
            return diff if diff < self.num else -1
        try:
            return self.queue_offset_diff.index(diff)
        except ValueError:
            return -1

    def ack_offset_by_index(self, index: int) -> int:
        if not self.queue_offset_diff:
            return self.start_offset + index
        return self.start_offset + self.queue_offset_diff[index]

    def parse_re_put_times(self) -> int:
        if self.re_put_times is None:
            return 0
        try:
            return int(self.re_put_times)
        except ValueError:
            return 127  # Byte.MAX_VALUE, as Java

    @property
    def merge_key(self) -> str:
        """The key acks find their checkpoint by (PopReviveService's mergeKey)."""
        return f"{self.topic}{self.cid}{self.queue_id}{self.start_offset}{self.pop_time}{self.broker_name}"

    @property
    def unique_id(self) -> str:
        """genCkUniqueId: the UNIQ_KEY of the checkpoint's message."""
        return SPLIT.join(
            map(str, (self.topic, self.queue_id, self.start_offset, self.cid, self.pop_time, self.broker_name, CK_TAG))
        )

    def to_json(self) -> dict[str, Any]:
        # fastjson's order (sorted names, nulls left out), with the getter-only "reviveTime".
        return {
            "bm": self.bit_map,
            "bn": self.broker_name,
            "c": self.cid,
            "d": self.queue_offset_diff,
            "it": self.invisible_time,
            "n": self.num,
            "pt": self.pop_time,
            "q": self.queue_id,
            "reviveTime": self.revive_time,
            "ro": self.revive_offset,
            "rp": self.re_put_times,
            "so": self.start_offset,
            "t": self.topic,
        }

    def encode(self) -> bytes:
        return fastjson.dumps(self.to_json())

    @classmethod
    def decode(cls, body: bytes) -> PopCheckPoint:
        obj = _object(body)
        diff = obj.get("d")
        if diff is not None:
            if not isinstance(diff, list) or len(diff) > _MAX_CK_MESSAGES:
                raise PopRecordError("'d' is not a list of offsets")
            diff = [_int({"d": d}, "d") for d in diff]
        num = _int(obj, "n")
        if not 0 <= num <= _MAX_CK_MESSAGES:
            raise PopRecordError(f"'n' {num} out of range")
        return cls(
            start_offset=_int(obj, "so"),
            pop_time=_int(obj, "pt"),
            invisible_time=_int(obj, "it"),
            bit_map=_int(obj, "bm"),
            num=num,
            queue_id=_int(obj, "q"),
            topic=_str(obj, "t") or "",
            cid=_str(obj, "c") or "",
            revive_offset=_int(obj, "ro"),
            queue_offset_diff=diff,
            broker_name=_str(obj, "bn"),
            re_put_times=_str(obj, "rp"),
        )


@dataclass(slots=True)
class AckMsg:
    """An ack of one message (``ack_offset``), or, with ``ack_offset_list``, a BatchAckMsg of several."""

    ack_offset: int
    start_offset: int
    consumer_group: str
    topic: str
    queue_id: int
    pop_time: int
    broker_name: str | None = None
    ack_offset_list: list[int] | None = field(default=None)

    @property
    def is_batch(self) -> bool:
        return self.ack_offset_list is not None

    @property
    def tag(self) -> str:
        return BATCH_ACK_TAG if self.is_batch else ACK_TAG

    def merge_key(self, default_broker_name: str) -> str:
        broker_name = self.broker_name if self.broker_name and self.broker_name.strip() else default_broker_name
        return f"{self.topic}{self.consumer_group}{self.queue_id}{self.start_offset}{self.pop_time}{broker_name}"

    @property
    def unique_id(self) -> str:
        """genAckUniqueId / genBatchAckUniqueId: the UNIQ_KEY of the ack's message."""
        if self.ack_offset_list is not None:
            offsets = "[" + ", ".join(map(str, self.ack_offset_list)) + "]"  # Java's List.toString
            parts: tuple[Any, ...] = (
                self.topic,
                self.queue_id,
                offsets,
                self.consumer_group,
                self.pop_time,
                BATCH_ACK_TAG,
            )
        else:
            parts = (
                self.topic,
                self.queue_id,
                self.ack_offset,
                self.consumer_group,
                self.pop_time,
                self.broker_name,
                ACK_TAG,
            )
        return SPLIT.join(map(str, parts))

    def to_json(self) -> dict[str, Any]:
        return {
            "ao": self.ack_offset,
            "aol": self.ack_offset_list,
            "bn": self.broker_name,
            "c": self.consumer_group,
            "pt": self.pop_time,
            "q": self.queue_id,
            "so": self.start_offset,
            "t": self.topic,
        }

    def encode(self) -> bytes:
        return fastjson.dumps(self.to_json())

    @classmethod
    def decode(cls, body: bytes, batch: bool = False) -> AckMsg:
        obj = _object(body)
        offsets = None
        if batch:
            raw = _get(obj, "aol", "ackOffsetList") or []
            if not isinstance(raw, list) or len(raw) > _MAX_CK_MESSAGES * 512:
                raise PopRecordError("'aol' is not a list of offsets")
            offsets = [_int({"o": o}, "o") for o in raw]
        return cls(
            ack_offset=_int(obj, "ao", "ackOffset"),
            start_offset=_int(obj, "so", "startOffset"),
            consumer_group=_str(obj, "c", "consumerGroup") or "",
            topic=_str(obj, "t", "topic") or "",
            queue_id=_int(obj, "q", "queueId"),
            pop_time=_int(obj, "pt", "popTime"),
            broker_name=_str(obj, "bn", "brokerName"),
            ack_offset_list=offsets,
        )
