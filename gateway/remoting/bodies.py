"""JSON bodies as typed dataclasses: ``to_json()`` gives the object fastjson would write (alphabetical
property order, nulls omitted), ``from_json()`` reads what Java or C++ peers send."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from .codes import PermName


def _enum(enum_cls: type[IntEnum], value: Any, default: IntEnum) -> Any:
    # Java writes enum names; the C++ client writes ordinals.
    if isinstance(value, str):
        try:
            return enum_cls[value]
        except KeyError:
            return default
    if isinstance(value, int):
        try:
            return enum_cls(value)
        except ValueError:
            return default
    return default


def _int(value: Any, default: int = 0) -> int:
    if value is None:
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


class ConsumeType(IntEnum):
    CONSUME_ACTIVELY = 0
    CONSUME_PASSIVELY = 1
    CONSUME_POP = 2


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
        obj = obj or {}
        return cls(timestamp=_int(obj.get("timestamp")), counter=_int(obj.get("counter")))


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
        return cls(
            topic_name=obj.get("topicName", ""),
            read_queue_nums=_int(obj.get("readQueueNums"), 16),
            write_queue_nums=_int(obj.get("writeQueueNums"), 16),
            perm=_int(obj.get("perm"), 6),
            topic_filter_type=obj.get("topicFilterType") or "SINGLE_TAG",
            topic_sys_flag=_int(obj.get("topicSysFlag")),
            order=bool(obj.get("order", False)),
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
        obj = obj or {}
        table = obj.get("topicConfigTable") or {}
        return cls(
            topic_config_table={str(k): TopicConfig.from_json(v) for k, v in table.items()},
            data_version=DataVersion.from_json(obj.get("dataVersion")),
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
        return cls(
            topic_config_serialize_wrapper=TopicConfigSerializeWrapper.from_json(
                obj.get("topicConfigSerializeWrapper")
            ),
            filter_server_list=list(obj.get("filterServerList") or []),
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
        return cls(
            broker_name=obj.get("brokerName", ""),
            read_queue_nums=_int(obj.get("readQueueNums")),
            write_queue_nums=_int(obj.get("writeQueueNums")),
            perm=_int(obj.get("perm")),
            topic_sys_flag=_int(obj.get("topicSysFlag")),
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
        return cls(
            cluster=obj.get("cluster", ""),
            broker_name=obj.get("brokerName", ""),
            broker_addrs={int(k): v for k, v in (obj.get("brokerAddrs") or {}).items()},
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
        return cls(
            queue_datas=[QueueData.from_json(q) for q in obj.get("queueDatas") or []],
            broker_datas=[BrokerData.from_json(b) for b in obj.get("brokerDatas") or []],
            order_topic_conf=obj.get("orderTopicConf"),
            filter_server_table=obj.get("filterServerTable") or {},
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
        return cls(
            broker_addr_table={k: BrokerData.from_json(v) for k, v in (obj.get("brokerAddrTable") or {}).items()},
            cluster_addr_table={k: list(v) for k, v in (obj.get("clusterAddrTable") or {}).items()},
        )


@dataclass(slots=True)
class KVTable:
    table: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> KVTable:
        return cls(table={str(k): str(v) for k, v in (obj.get("table") or {}).items()})


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
        return cls(topic_list=list(obj.get("topicList") or []), broker_addr=obj.get("brokerAddr"))


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> MessageQueue:
        return cls(topic=obj.get("topic", ""), broker_name=obj.get("brokerName", ""), queue_id=_int(obj.get("queueId")))


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
        return cls(
            topic=obj.get("topic", ""),
            sub_string=obj.get("subString") or "*",
            tags_set=[str(t) for t in obj.get("tagsSet") or []],
            code_set=[_int(c) for c in obj.get("codeSet") or []],
            sub_version=_int(obj.get("subVersion")),
            expression_type=obj.get("expressionType") or "TAG",
            class_filter_mode=bool(obj.get("classFilterMode", False)),
        )


@dataclass(slots=True)
class ProducerData:
    group_name: str

    def to_json(self) -> dict[str, Any]:
        return {"groupName": self.group_name}


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
        return cls(
            group_name=obj.get("groupName", ""),
            consume_type=_enum(ConsumeType, obj.get("consumeType"), ConsumeType.CONSUME_PASSIVELY),
            message_model=_enum(MessageModel, obj.get("messageModel"), MessageModel.CLUSTERING),
            consume_from_where=_enum(
                ConsumeFromWhere, obj.get("consumeFromWhere"), ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
            ),
            subscription_data_set=[SubscriptionData.from_json(s) for s in obj.get("subscriptionDataSet") or []],
            unit_mode=bool(obj.get("unitMode", False)),
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
        return cls(
            client_id=obj.get("clientID", ""),
            producer_data_set=[ProducerData(p.get("groupName", "")) for p in obj.get("producerDataSet") or []],
            consumer_data_set=[ConsumerData.from_json(c) for c in obj.get("consumerDataSet") or []],
        )


@dataclass(slots=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerId": self.broker_id,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
            "groupName": self.group_name,
            "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
            "retryMaxTimes": self.retry_max_times,
            "retryQueueNums": self.retry_queue_nums,
            "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SubscriptionGroupConfig:
        return cls(
            group_name=obj.get("groupName", ""),
            consume_enable=bool(obj.get("consumeEnable", True)),
            consume_from_min_enable=bool(obj.get("consumeFromMinEnable", True)),
            consume_broadcast_enable=bool(obj.get("consumeBroadcastEnable", True)),
            retry_queue_nums=_int(obj.get("retryQueueNums"), 1),
            retry_max_times=_int(obj.get("retryMaxTimes"), 16),
            broker_id=_int(obj.get("brokerId")),
            which_broker_when_consume_slowly=_int(obj.get("whichBrokerWhenConsumeSlowly"), 1),
            notify_consumer_ids_changed_enable=bool(obj.get("notifyConsumerIdsChangedEnable", True)),
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
        return cls(
            consumer_group=obj.get("consumerGroup") or "",
            client_id=obj.get("clientId") or "",
            mq_set=[MessageQueue.from_json(mq) for mq in obj.get("mqSet") or []],
        )


@dataclass(slots=True)
class LockBatchResponseBody:
    lock_ok_mq_set: list[MessageQueue] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"lockOKMQSet": [mq.to_json() for mq in self.lock_ok_mq_set]}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> LockBatchResponseBody:
        return cls([MessageQueue.from_json(mq) for mq in obj.get("lockOKMQSet") or []])
