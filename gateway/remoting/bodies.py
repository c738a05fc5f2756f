"""JSON bodies as typed dataclasses: ``to_json()`` gives the object fastjson would write (alphabetical
property order, nulls omitted), ``from_json()`` reads what Java or C++ peers send.

``from_json()`` reads each property as fastjson reads it into the Java field's type, or refuses the body
with :class:`BodyError`: a String field takes a string, or the text of a number or boolean (``5`` -> ``"5"``);
int and long fields take integers, decimal strings (``"12"``), booleans (1/0) and numbers with a fraction
(truncated), within 32 or 64 bits; boolean fields take ``true``/``false``, 1/0 and those as strings (any case);
arrays and objects must be arrays and objects; enums are names or ordinals (unknown ones read as the default).
Missing or null properties keep the Java default. Topic and group names are checked as they are read
(:mod:`gateway.remoting.names`), and queue counts and queue ids must not be negative.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, TypeVar

from .codes import PermName, ResponseCode
from .names import check_group, check_topic

T = TypeVar("T")
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


class BodyError(ValueError):
    """A body property that fastjson could not read into its Java type (answered with SYSTEM_ERROR, as Java answers
    a JSONException), or a value of the right type outside its range (answered with INVALID_PARAMETER)."""

    def __init__(self, message: str, code: int = ResponseCode.SYSTEM_ERROR) -> None:
        super().__init__(message)
        self.code = code


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "a number"
    if isinstance(value, float):
        return "a number" if math.isfinite(value) else "a non-finite number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "an array"
    return type(value).__name__


def _bad(key: str, expected: str, value: Any) -> BodyError:
    where = f"body field '{key}'" if key else "body"
    return BodyError(f"{where}: expected {expected}, got {_kind(value)}")


# The typed readers. ``key`` names the property in errors; the common case returns at the first test (HEART_BEAT
# and LOCK_BATCH_MQ bodies are read on every call).


def _text(value: Any, key: str) -> str:
    """StringCodec: a string, or the literal text of an integer or boolean."""
    if isinstance(value, str):
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    # fastjson would write an object's or array's JSON text into the String: no legitimate peer sends one.
    raise _bad(key, "a string", value)


_DECIMAL = re.compile(r"[+-]?[0-9]+").fullmatch
_JAVA_RANGE = {"int": (INT32_MIN, INT32_MAX), "long": (INT64_MIN, INT64_MAX)}


def _whole(value: Any, key: str, java_type: str, non_negative: bool = False) -> int:
    """IntegerCodec/LongCodec with TypeUtils.castToInt/castToLong: an integer within the Java type."""
    if value.__class__ is int:
        n = value
    elif isinstance(value, bool):
        n = int(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise _bad(key, f"a Java {java_type}", value)
        n = int(value)  # BigDecimal.intValue(): the fraction is dropped
    elif isinstance(value, str):
        if _DECIMAL(value) is None:
            raise BodyError(
                f"body field '{key}': expected a Java {java_type}, got a string that is not a decimal integer"
            )
        # int() refuses thousands of digits; anything past 40 is out of range for Java anyway.
        n = int(value) if len(value) <= 40 else math.inf
    else:
        raise _bad(key, f"a Java {java_type}", value)
    low, high = _JAVA_RANGE[java_type]
    if not low <= n <= high:
        shown = n if n != math.inf else f"a {len(value)}-character number"
        raise BodyError(f"body field '{key}': {shown} is out of range for a Java {java_type}")
    if non_negative and n < 0:
        raise BodyError(f"body field '{key}': {n} must not be negative", ResponseCode.INVALID_PARAMETER)
    return n


def _int32(obj: dict[str, Any], key: str, default: int = 0, non_negative: bool = False) -> int:
    """A Java ``int`` property."""
    v = obj.get(key)
    if v.__class__ is int and (0 if non_negative else INT32_MIN) <= v <= INT32_MAX:
        return v
    if v is None or v == "":  # castToInt("") is null: the field keeps its default
        return default
    return _whole(v, key, "int", non_negative)


def _int64(obj: dict[str, Any], key: str, default: int = 0) -> int:
    """A Java ``long`` property."""
    v = obj.get(key)
    if v.__class__ is int and INT64_MIN <= v <= INT64_MAX:
        return v
    if v is None or v == "":
        return default
    return _whole(v, key, "long")


_FLAGS = {"true": True, "1": True, "false": False, "0": False}


def _bool(obj: dict[str, Any], key: str, default: bool) -> bool:
    """A Java ``boolean`` property: BooleanCodec and TypeUtils.castToBoolean, without its Y/T/F/N letters."""
    v = obj.get(key)
    if v is True or v is False:
        return v
    if v is None or v == "":
        return default
    if v.__class__ is int and (v == 0 or v == 1):
        return v == 1
    if isinstance(v, str):
        flag = _FLAGS.get(v.lower())
        if flag is not None:
            return flag
    raise _bad(key, "a boolean", v)


def _str(obj: dict[str, Any], key: str, default: str = "") -> str:
    """A Java ``String`` property."""
    v = obj.get(key)
    if v.__class__ is str:
        return v
    if v is None:
        return default
    return _text(v, key)


def _opt_str(obj: dict[str, Any], key: str) -> str | None:
    """A Java ``String`` property that stays null when absent."""
    v = obj.get(key)
    return None if v is None else _text(v, key)


def _list(value: Any, key: str) -> list[Any]:
    """A JSON array (a Java List or Set); null reads as empty."""
    if value.__class__ is list:
        return value
    if value is None:
        return []
    raise _bad(key, "an array", value)


def _map(value: Any, key: str = "") -> dict[Any, Any]:
    """A JSON object (a Java Map, or a bean: ``key`` empty for the body itself); null reads as empty."""
    if isinstance(value, dict):
        return value
    if value is None:
        return {}
    raise _bad(key, "an object", value)


def _strings(value: Any, key: str) -> list[str]:
    """A JSON array of strings (a Java List or Set of String)."""
    return [_text(item, key) for item in _list(value, key)]


def _objects(value: Any, key: str) -> list[dict[str, Any]]:
    """A JSON array of objects (a Java List or Set of beans)."""
    return [_map(item, key) for item in _list(value, key)]


def _table(
    value: Any, key: str, read: Callable[[dict[str, Any]], T], check: Callable[[str], str] = str
) -> dict[str, T]:
    """A JSON object of beans keyed by name (a Java Map<String, bean>); ``check`` vets each key."""
    return {check(_key(k, key)): read(_map(v, key)) for k, v in _map(value, key).items()}


def _key(k: Any, key: str) -> str:
    """A String map key: fastjson also reads an unquoted number as its text."""
    if k.__class__ is str:
        return k
    if isinstance(k, int) and not isinstance(k, bool):
        return str(k)
    raise BodyError(f"body field '{key}': expected string keys, got {_kind(k)}")


def _enum(enum_cls: type[IntEnum], obj: dict[str, Any], key: str, default: Any) -> Any:
    # Java writes enum names; the C++ client writes ordinals. Unknown ones read as the default.
    v = obj.get(key)
    if v is None:
        return default
    if isinstance(v, str):
        return enum_cls.__members__.get(v, default)
    if v.__class__ is int:
        try:
            return enum_cls(v)
        except ValueError:
            return default
    raise _bad(key, f"a {enum_cls.__name__} name or ordinal", v)


class ConsumeType(IntEnum):
    CONSUME_ACTIVELY = 0
    CONSUME_PASSIVELY = 1
    CONSUME_POP = 2

    @property
    def shown(self) -> str:
        """The name mqadmin's consumerProgress and the Dashboard show: PULL, PUSH or POP."""
        return ("PULL", "PUSH", "POP")[self]


class MessageModel(IntEnum):
    BROADCASTING = 0
    CLUSTERING = 1


class ConsumeFromWhere(IntEnum):
    CONSUME_FROM_LAST_OFFSET = 0
    CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST = 1
    CONSUME_FROM_MIN_OFFSET = 2
    CONSUME_FROM_MAX_OFFSET = 3
    CONSUME_FROM_FIRST_OFFSET = 4
    CONSUME_FROM_TIMESTAMP = 5


class TopicFilterType(IntEnum):
    SINGLE_TAG = 0
    MULTI_TAG = 1


@dataclass(slots=True)
class DataVersion:
    timestamp: int = field(default_factory=lambda: int(time.time() * 1000))
    counter: int = 0

    def next_version(self) -> None:
        self.timestamp = int(time.time() * 1000)
        self.counter += 1

    def to_json(self) -> dict[str, Any]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, obj: dict[str, Any] | None) -> DataVersion:
        obj = _map(obj)
        return cls(timestamp=_int64(obj, "timestamp"), counter=_int64(obj, "counter"))


@dataclass(slots=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PermName.PERM_READ | PermName.PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TopicConfig:
        obj = _map(obj)
        return cls(
            topic_name=check_topic(_str(obj, "topicName")),
            read_queue_nums=_int32(obj, "readQueueNums", 16, non_negative=True),
            write_queue_nums=_int32(obj, "writeQueueNums", 16, non_negative=True),
            perm=_int32(obj, "perm", 6),
            topic_filter_type=_enum(TopicFilterType, obj, "topicFilterType", TopicFilterType.SINGLE_TAG).name,
            topic_sys_flag=_int32(obj, "topicSysFlag"),
            order=_bool(obj, "order", False),
        )


@dataclass(slots=True)
class TopicConfigSerializeWrapper:
    topic_config_table: dict[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)

    def to_json(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_json(),
            "topicConfigTable": {k: v.to_json() for k, v in self.topic_config_table.items()},
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any] | None) -> TopicConfigSerializeWrapper:
        obj = _map(obj)
        return cls(
            topic_config_table=_table(
                obj.get("topicConfigTable"), "topicConfigTable", TopicConfig.from_json, check_topic
            ),
            data_version=DataVersion.from_json(_map(obj.get("dataVersion"), "dataVersion")),
        )


@dataclass(slots=True)
class RegisterBrokerBody:
    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = field(default_factory=TopicConfigSerializeWrapper)
    filter_server_list: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "filterServerList": self.filter_server_list,
            "topicConfigSerializeWrapper": self.topic_config_serialize_wrapper.to_json(),
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> RegisterBrokerBody:
        obj = _map(obj)
        return cls(
            topic_config_serialize_wrapper=TopicConfigSerializeWrapper.from_json(
                _map(obj.get("topicConfigSerializeWrapper"), "topicConfigSerializeWrapper")
            ),
            filter_server_list=_strings(obj.get("filterServerList"), "filterServerList"),
        )


@dataclass(slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> QueueData:
        obj = _map(obj)
        return cls(
            broker_name=_str(obj, "brokerName"),
            read_queue_nums=_int32(obj, "readQueueNums", non_negative=True),
            write_queue_nums=_int32(obj, "writeQueueNums", non_negative=True),
            perm=_int32(obj, "perm"),
            topic_sys_flag=_int32(obj, "topicSysFlag"),
        )


@dataclass(slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)

    def master_addr(self) -> str | None:
        return self.broker_addrs.get(0)

    def to_json(self) -> dict[str, Any]:
        return {"brokerAddrs": dict(self.broker_addrs), "brokerName": self.broker_name, "cluster": self.cluster}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> BrokerData:
        obj = _map(obj)
        addrs = _map(obj.get("brokerAddrs"), "brokerAddrs")
        return cls(
            cluster=_str(obj, "cluster"),
            broker_name=_str(obj, "brokerName"),
            # HashMap<Long, String>: fastjson reads quoted and unquoted numeric keys alike.
            broker_addrs={_whole(k, "brokerAddrs", "long"): _text(v, "brokerAddrs") for k, v in addrs.items()},
        )


@dataclass(slots=True)
class TopicRouteData:
    queue_datas: list[QueueData] = field(default_factory=list)
    broker_datas: list[BrokerData] = field(default_factory=list)
    order_topic_conf: str | None = None
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "brokerDatas": [b.to_json() for b in self.broker_datas],
            "filterServerTable": self.filter_server_table,
        }
        if self.order_topic_conf is not None:
            out["orderTopicConf"] = self.order_topic_conf
        out["queueDatas"] = [q.to_json() for q in self.queue_datas]
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TopicRouteData:
        obj = _map(obj)
        servers = _map(obj.get("filterServerTable"), "filterServerTable")
        return cls(
            queue_datas=[QueueData.from_json(q) for q in _objects(obj.get("queueDatas"), "queueDatas")],
            broker_datas=[BrokerData.from_json(b) for b in _objects(obj.get("brokerDatas"), "brokerDatas")],
            order_topic_conf=_opt_str(obj, "orderTopicConf"),
            filter_server_table={
                _key(k, "filterServerTable"): _strings(v, "filterServerTable") for k, v in servers.items()
            },
        )


@dataclass(slots=True)
class ClusterInfo:
    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {k: v.to_json() for k, v in self.broker_addr_table.items()},
            "clusterAddrTable": {k: sorted(v) for k, v in self.cluster_addr_table.items()},
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ClusterInfo:
        obj = _map(obj)
        clusters = _map(obj.get("clusterAddrTable"), "clusterAddrTable")
        return cls(
            broker_addr_table=_table(obj.get("brokerAddrTable"), "brokerAddrTable", BrokerData.from_json),
            cluster_addr_table={
                _key(k, "clusterAddrTable"): _strings(v, "clusterAddrTable") for k, v in clusters.items()
            },
        )


@dataclass(slots=True)
class KVTable:
    table: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> KVTable:
        table = _map(_map(obj).get("table"), "table")
        return cls(table={_key(k, "table"): _text(v, "table") for k, v in table.items()})


@dataclass(slots=True)
class TopicList:
    topic_list: list[str] = field(default_factory=list)
    broker_addr: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.broker_addr is not None:
            out["brokerAddr"] = self.broker_addr
        out["topicList"] = self.topic_list
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TopicList:
        obj = _map(obj)
        return cls(
            topic_list=_strings(obj.get("topicList"), "topicList"),
            broker_addr=_opt_str(obj, "brokerAddr"),
        )


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> MessageQueue:
        obj = _map(obj)
        return cls(
            topic=check_topic(_str(obj, "topic")),
            broker_name=_str(obj, "brokerName"),
            queue_id=_int32(obj, "queueId", non_negative=True),
        )


@dataclass(slots=True)
class SubscriptionData:
    topic: str
    sub_string: str = "*"
    tags_set: list[str] = field(default_factory=list)
    code_set: list[int] = field(default_factory=list)
    sub_version: int = 0
    expression_type: str = "TAG"
    class_filter_mode: bool = False

    SUB_ALL = "*"

    @classmethod
    def build(cls, topic: str, expression: str | None, expression_type: str | None = None) -> SubscriptionData:
        """FilterAPI.buildSubscriptionData: split tags on ``||``, hash each."""
        from .message import java_string_hash

        expr = (expression or "").strip() or cls.SUB_ALL
        etype = expression_type or "TAG"
        sub = cls(topic=topic, sub_string=expr, sub_version=int(time.time() * 1000), expression_type=etype)
        if etype == "TAG" and expr != cls.SUB_ALL:
            for tag in expr.split("||"):
                tag = tag.strip()
                if tag:
                    sub.tags_set.append(tag)
                    sub.code_set.append(java_string_hash(tag))
        return sub

    def to_json(self) -> dict[str, Any]:
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": self.code_set,
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": self.tags_set,
            "topic": self.topic,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SubscriptionData:
        obj = _map(obj)
        return cls(
            topic=check_topic(_str(obj, "topic")),
            sub_string=_str(obj, "subString") or "*",
            tags_set=_strings(obj.get("tagsSet"), "tagsSet"),
            code_set=[_whole(c, "codeSet", "int") for c in _list(obj.get("codeSet"), "codeSet")],
            sub_version=_int64(obj, "subVersion"),  # the C++ client sends it as a string
            expression_type=_str(obj, "expressionType") or "TAG",
            class_filter_mode=_bool(obj, "classFilterMode", False),
        )


@dataclass(slots=True)
class ProducerData:
    group_name: str

    def to_json(self) -> dict[str, Any]:
        return {"groupName": self.group_name}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ProducerData:
        return cls(check_group(_str(_map(obj), "groupName")))


@dataclass(slots=True)
class ConsumerData:
    group_name: str
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    subscription_data_set: list[SubscriptionData] = field(default_factory=list)
    unit_mode: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "consumeFromWhere": self.consume_from_where.name,
            "consumeType": self.consume_type.name,
            "groupName": self.group_name,
            "messageModel": self.message_model.name,
            "subscriptionDataSet": [s.to_json() for s in self.subscription_data_set],
            "unitMode": self.unit_mode,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ConsumerData:
        obj = _map(obj)
        subscriptions = _objects(obj.get("subscriptionDataSet"), "subscriptionDataSet")
        return cls(
            group_name=check_group(_str(obj, "groupName")),
            consume_type=_enum(ConsumeType, obj, "consumeType", ConsumeType.CONSUME_PASSIVELY),
            message_model=_enum(MessageModel, obj, "messageModel", MessageModel.CLUSTERING),
            consume_from_where=_enum(
                ConsumeFromWhere, obj, "consumeFromWhere", ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
            ),
            subscription_data_set=[SubscriptionData.from_json(s) for s in subscriptions],
            unit_mode=_bool(obj, "unitMode", False),
        )


@dataclass(slots=True)
class HeartbeatData:
    client_id: str
    producer_data_set: list[ProducerData] = field(default_factory=list)
    consumer_data_set: list[ConsumerData] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "clientID": self.client_id,
            "consumerDataSet": [c.to_json() for c in self.consumer_data_set],
            "producerDataSet": [p.to_json() for p in self.producer_data_set],
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> HeartbeatData:
        obj = _map(obj)
        return cls(
            client_id=_str(obj, "clientID"),
            producer_data_set=[
                ProducerData.from_json(p) for p in _objects(obj.get("producerDataSet"), "producerDataSet")
            ],
            consumer_data_set=[
                ConsumerData.from_json(c) for c in _objects(obj.get("consumerDataSet"), "consumerDataSet")
            ],
        )


@dataclass(slots=True)
class CheckClientRequestBody:
    """CHECK_CLIENT_CONFIG (46): a consumer about to start asks whether its subscription works here."""

    client_id: str = ""
    group: str = ""
    subscription_data: SubscriptionData | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"clientId": self.client_id, "group": self.group}
        if self.subscription_data is not None:
            out["subscriptionData"] = self.subscription_data.to_json()
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> CheckClientRequestBody:
        obj = _map(obj)
        group = _str(obj, "group")
        subscription = obj.get("subscriptionData")
        return cls(
            client_id=_str(obj, "clientId"),
            group=check_group(group) if group else group,
            subscription_data=SubscriptionData.from_json(_map(subscription, "subscriptionData"))
            if subscription
            else None,
        )


class GroupRetryPolicyType(IntEnum):
    EXPONENTIAL = 0
    CUSTOMIZED = 1


# CustomizedRetryPolicy's default steps: 1s 5s 10s 30s 1m..10m 20m 30m 1h 2h (the broker's delay levels).
DEFAULT_RETRY_STEPS_MS = (
    1000,
    5000,
    10000,
    30000,
    *(m * 60_000 for m in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 30)),
    3_600_000,
    7_200_000,
)
MAX_RETRY_STEPS = 1024  # a customized policy's steps; Apache's default has 18


def _millis(obj: dict[str, Any], key: str, default: int) -> int:
    """A Java ``long`` of milliseconds (or a multiplier), not negative: the SDKs would sleep a negative time."""
    v = obj.get(key)
    if v is None or v == "":
        return default
    return _whole(v, key, "long", non_negative=True)


@dataclass(frozen=True, slots=True)
class ExponentialRetryPolicy:
    """initial * multiplier^reconsumeTimes ms, at most ``max`` ms."""

    initial: int = 5000
    max: int = 7_200_000
    multiplier: int = 2

    def to_json(self) -> dict[str, Any]:
        return {"initial": self.initial, "max": self.max, "multiplier": self.multiplier}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ExponentialRetryPolicy:
        return cls(
            initial=_millis(obj, "initial", 5000),
            max=_millis(obj, "max", 7_200_000),
            multiplier=_millis(obj, "multiplier", 2),
        )


@dataclass(frozen=True, slots=True)
class CustomizedRetryPolicy:
    """The delay of each retry in ms, the last one repeated."""

    next: tuple[int, ...] = DEFAULT_RETRY_STEPS_MS

    def to_json(self) -> dict[str, Any]:
        return {"next": list(self.next)}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> CustomizedRetryPolicy:
        if "next" not in obj or obj["next"] is None:
            return cls()
        steps = _list(obj["next"], "next")
        if len(steps) > MAX_RETRY_STEPS:
            raise BodyError(
                f"body field 'next': {len(steps)} steps, at most {MAX_RETRY_STEPS}", ResponseCode.INVALID_PARAMETER
            )
        return cls(tuple(_whole(v, "next", "long", non_negative=True) for v in steps))


@dataclass(frozen=True, slots=True)
class GroupRetryPolicy:
    """5.x SubscriptionGroupConfig.groupRetryPolicy: the backoff a 5.x consumer of the group is told to use."""

    type: GroupRetryPolicyType = GroupRetryPolicyType.CUSTOMIZED
    exponential_retry_policy: ExponentialRetryPolicy | None = None
    customized_retry_policy: CustomizedRetryPolicy | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}  # fastjson's order; null policies are left out
        if self.customized_retry_policy is not None:
            out["customizedRetryPolicy"] = self.customized_retry_policy.to_json()
        if self.exponential_retry_policy is not None:
            out["exponentialRetryPolicy"] = self.exponential_retry_policy.to_json()
        out["type"] = self.type.name
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> GroupRetryPolicy:
        obj = _map(obj, "groupRetryPolicy")
        exponential = obj.get("exponentialRetryPolicy")
        customized = obj.get("customizedRetryPolicy")
        return cls(
            type=_enum(GroupRetryPolicyType, obj, "type", GroupRetryPolicyType.CUSTOMIZED),
            exponential_retry_policy=None
            if exponential is None
            else ExponentialRetryPolicy.from_json(_map(exponential, "exponentialRetryPolicy")),
            customized_retry_policy=None
            if customized is None
            else CustomizedRetryPolicy.from_json(_map(customized, "customizedRetryPolicy")),
        )


@dataclass(slots=True)
class SubscriptionGroupConfig:
    """A subscription group (subscriptionGroup.json, UPDATE_AND_CREATE_SUBSCRIPTIONGROUP). The 5.x fields
    (consumeMessageOrderly, groupRetryPolicy) are written only when set, so a 4.x group reads as 4.9.8 writes it."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    consume_message_orderly: bool = False
    group_retry_policy: GroupRetryPolicy = field(default_factory=GroupRetryPolicy)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {  # fastjson's (alphabetical) order
            "brokerId": self.broker_id,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
        }
        if self.consume_message_orderly:
            out["consumeMessageOrderly"] = True
        out["groupName"] = self.group_name
        if self.group_retry_policy != GroupRetryPolicy():
            out["groupRetryPolicy"] = self.group_retry_policy.to_json()
        out["notifyConsumerIdsChangedEnable"] = self.notify_consumer_ids_changed_enable
        out["retryMaxTimes"] = self.retry_max_times
        out["retryQueueNums"] = self.retry_queue_nums
        out["whichBrokerWhenConsumeSlowly"] = self.which_broker_when_consume_slowly
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SubscriptionGroupConfig:
        obj = _map(obj)
        policy = obj.get("groupRetryPolicy")
        return cls(
            group_name=check_group(_str(obj, "groupName")),
            consume_enable=_bool(obj, "consumeEnable", True),
            consume_from_min_enable=_bool(obj, "consumeFromMinEnable", True),
            consume_broadcast_enable=_bool(obj, "consumeBroadcastEnable", True),
            retry_queue_nums=_int32(obj, "retryQueueNums", 1, non_negative=True),
            retry_max_times=_int32(obj, "retryMaxTimes", 16),
            broker_id=_int64(obj, "brokerId"),
            which_broker_when_consume_slowly=_int64(obj, "whichBrokerWhenConsumeSlowly", 1),
            notify_consumer_ids_changed_enable=_bool(obj, "notifyConsumerIdsChangedEnable", True),
            consume_message_orderly=_bool(obj, "consumeMessageOrderly", False),
            group_retry_policy=GroupRetryPolicy() if policy is None else GroupRetryPolicy.from_json(policy),
        )


@dataclass(slots=True)
class SubscriptionGroupWrapper:
    """GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) body, and subscriptionGroup.json."""

    subscription_group_table: dict[str, SubscriptionGroupConfig] = field(default_factory=dict)
    data_version: DataVersion = field(default_factory=DataVersion)

    def to_json(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version.to_json(),
            "subscriptionGroupTable": {k: v.to_json() for k, v in self.subscription_group_table.items()},
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any] | None) -> SubscriptionGroupWrapper:
        obj = _map(obj)
        table = obj.get("subscriptionGroupTable")
        return cls(
            subscription_group_table=_table(
                table, "subscriptionGroupTable", SubscriptionGroupConfig.from_json, check_group
            ),
            data_version=DataVersion.from_json(_map(obj.get("dataVersion"), "dataVersion")),
        )


@dataclass(slots=True)
class LockBatchRequestBody:
    """LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42) bodies (Java's Lock/UnlockBatchRequestBody are alike);
    5.x's ``onlyThisBroker`` is accepted and ignored: a broker only ever answers for itself."""

    consumer_group: str
    client_id: str
    mq_set: list[MessageQueue] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "clientId": self.client_id,
            "consumerGroup": self.consumer_group,
            "mqSet": [mq.to_json() for mq in self.mq_set],
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> LockBatchRequestBody:
        obj = _map(obj)
        return cls(
            consumer_group=check_group(_str(obj, "consumerGroup")),
            client_id=_str(obj, "clientId"),
            mq_set=[MessageQueue.from_json(mq) for mq in _objects(obj.get("mqSet"), "mqSet")],
        )


@dataclass(slots=True)
class LockBatchResponseBody:
    lock_ok_mq_set: list[MessageQueue] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"lockOKMQSet": [mq.to_json() for mq in self.lock_ok_mq_set]}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> LockBatchResponseBody:
        return cls([MessageQueue.from_json(mq) for mq in _objects(_map(obj).get("lockOKMQSet"), "lockOKMQSet")])


class MessageRequestMode(IntEnum):
    """How a group consumes a topic: PULL (the client pulls its queues) or POP (the broker hands out messages)."""

    PULL = 0
    POP = 1


@dataclass(slots=True)
class SetMessageRequestModeRequestBody:
    """SET_MESSAGE_REQUEST_MODE (401) body, also the value of messageRequestMode.json's entries."""

    topic: str
    consumer_group: str
    mode: MessageRequestMode = MessageRequestMode.PULL
    # A POP member also takes the queues of this many members following it (0: only its own; <0: all).
    pop_share_queue_num: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "consumerGroup": self.consumer_group,
            "mode": self.mode.name,
            "popShareQueueNum": self.pop_share_queue_num,
            "topic": self.topic,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SetMessageRequestModeRequestBody:
        obj = _map(obj)
        return cls(
            topic=check_topic(_str(obj, "topic")),
            consumer_group=check_group(_str(obj, "consumerGroup")),
            mode=_enum(MessageRequestMode, obj, "mode", MessageRequestMode.PULL),
            pop_share_queue_num=_int32(obj, "popShareQueueNum"),
        )


@dataclass(slots=True)
class MessageRequestModeSerializeWrapper:
    """GET_ALL_MESSAGE_REQUEST_MODE (402) body and messageRequestMode.json: topic → group → mode."""

    message_request_mode_map: dict[str, dict[str, SetMessageRequestModeRequestBody]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "messageRequestModeMap": {
                topic: {group: body.to_json() for group, body in groups.items()}
                for topic, groups in self.message_request_mode_map.items()
            }
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> MessageRequestModeSerializeWrapper:
        table = _map(_map(obj).get("messageRequestModeMap"), "messageRequestModeMap")
        return cls(
            {
                check_topic(_key(topic, "messageRequestModeMap")): _table(
                    groups, "messageRequestModeMap", SetMessageRequestModeRequestBody.from_json, check_group
                )
                for topic, groups in table.items()
            }
        )


@dataclass(slots=True)
class QueryAssignmentRequestBody:
    """QUERY_ASSIGNMENT (400) body: which queues of ``topic`` this member of ``consumer_group`` should consume."""

    topic: str
    consumer_group: str
    client_id: str
    strategy_name: str = ""
    message_model: MessageModel = MessageModel.CLUSTERING

    def to_json(self) -> dict[str, Any]:
        return {
            "clientId": self.client_id,
            "consumerGroup": self.consumer_group,
            "messageModel": self.message_model.name,
            "strategyName": self.strategy_name,
            "topic": self.topic,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> QueryAssignmentRequestBody:
        obj = _map(obj)
        return cls(
            topic=check_topic(_str(obj, "topic")),
            consumer_group=check_group(_str(obj, "consumerGroup")),
            client_id=_str(obj, "clientId"),
            strategy_name=_str(obj, "strategyName"),
            message_model=_enum(MessageModel, obj, "messageModel", MessageModel.CLUSTERING),
        )


@dataclass(slots=True, frozen=True)
class MessageQueueAssignment:
    """One assigned queue and how to consume it; a POP queue id of -1 means "any queue of this broker"."""

    message_queue: MessageQueue
    mode: MessageRequestMode = MessageRequestMode.PULL

    def to_json(self) -> dict[str, Any]:
        return {"messageQueue": self.message_queue.to_json(), "mode": self.mode.name}


@dataclass(slots=True)
class QueryAssignmentResponseBody:
    """QUERY_ASSIGNMENT's answer; None (no property) tells the client to keep its current assignment."""

    message_queue_assignments: list[MessageQueueAssignment] | None = None

    def to_json(self) -> dict[str, Any]:
        if self.message_queue_assignments is None:
            return {}
        return {"messageQueueAssignments": [a.to_json() for a in self.message_queue_assignments]}


# A batch ack's bit set covers one checkpoint's messages (at most a pop's 32, spread over filtered offsets): 64 Ki
# offsets is far beyond any real one and keeps a hostile body from making the broker walk millions of bits.
BATCH_ACK_MAX_BITSET_BYTES = 8192


def _alias(obj: dict[str, Any], short: str, long: str) -> str:
    """The key fastjson would read for a field written as ``short`` with ``long`` among its alternateNames."""
    return short if short in obj else long


@dataclass(slots=True)
class BatchAck:
    """One checkpoint's acks in a BATCH_ACK_MESSAGE body: ``bit_set`` holds the acked offsets less ``start_offset``
    (Java's BitSet, written by fastjson as the base64 of ``toByteArray()``, little-endian)."""

    consumer_group: str
    topic: str
    retry: str  # "0" the topic itself, "1" its pop retry topic (ExtraInfoUtil's codes)
    start_offset: int
    queue_id: int
    revive_queue_id: int
    pop_time: int
    invisible_time: int
    bit_set: frozenset[int] = frozenset()

    def to_json(self) -> dict[str, Any]:
        return {
            "b": base64.b64encode(_bits_to_bytes(self.bit_set)).decode(),
            "c": self.consumer_group,
            "it": self.invisible_time,
            "pt": self.pop_time,
            "q": self.queue_id,
            "r": self.retry,
            "rq": self.revive_queue_id,
            "so": self.start_offset,
            "t": self.topic,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> BatchAck:
        obj = _map(obj, "acks")
        b = _alias(obj, "b", "bitSet")
        raw = obj.get(b)
        if raw is None:
            bits: frozenset[int] = frozenset()
        else:
            if not isinstance(raw, str):
                raise _bad(b, "a base64 string", raw)
            if len(raw) > BATCH_ACK_MAX_BITSET_BYTES * 4 // 3 + 4:
                raise BodyError(f"body field '{b}': a bit set over {BATCH_ACK_MAX_BITSET_BYTES} bytes")
            try:
                bits = _bytes_to_bits(base64.b64decode(raw, validate=True))
            except binascii.Error:
                raise BodyError(f"body field '{b}': not base64") from None
        return cls(
            consumer_group=check_group(_str(obj, _alias(obj, "c", "consumerGroup"))),
            topic=check_topic(_str(obj, _alias(obj, "t", "topic"))),
            retry=_str(obj, _alias(obj, "r", "retry"), "0"),
            start_offset=_int64(obj, _alias(obj, "so", "startOffset")),
            queue_id=_int32(obj, _alias(obj, "q", "queueId"), non_negative=True),
            revive_queue_id=_int32(obj, _alias(obj, "rq", "reviveQueueId"), non_negative=True),
            pop_time=_int64(obj, _alias(obj, "pt", "popTime")),
            invisible_time=_int64(obj, _alias(obj, "it", "invisibleTime")),
            bit_set=bits,
        )


def _bits_to_bytes(bits: frozenset[int]) -> bytes:
    n = 0
    for i in bits:
        n |= 1 << i
    return n.to_bytes((n.bit_length() + 7) // 8, "little")


def _bytes_to_bits(data: bytes) -> frozenset[int]:
    n = int.from_bytes(data, "little")
    out = []
    while n:
        low = n & -n
        out.append(low.bit_length() - 1)
        n ^= low
    return frozenset(out)


@dataclass(slots=True)
class BatchAckMessageRequestBody:
    """BATCH_ACK_MESSAGE (200151) body."""

    broker_name: str | None = None
    acks: list[BatchAck] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"acks": [a.to_json() for a in self.acks], "brokerName": self.broker_name}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> BatchAckMessageRequestBody:
        obj = _map(obj)
        return cls(
            broker_name=_opt_str(obj, "brokerName"),
            acks=[BatchAck.from_json(a) for a in _objects(obj.get("acks"), "acks")],
        )
