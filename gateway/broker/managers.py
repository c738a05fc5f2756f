"""The broker's persisted tables: topics.json, consumerOffset.json, subscriptionGroup.json."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from twisted.logger import Logger

from gateway.persist import load_with_backup, write_atomically
from gateway.remoting import fastjson
from gateway.remoting.bodies import (
    DataVersion,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from gateway.remoting.codes import PermName
from gateway.remoting.names import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    BENCHMARK_TOPIC,
    OFFSET_MOVED_EVENT,
    REPLY_TOPIC_POSTFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    check_group,
    check_topic,
)

from .config import BrokerConfig

log = Logger()

def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def _parse_offsets(data: bytes) -> dict[str, dict[int, int]]:
    """consumerOffset.json's table, every key a legal ``topic@group`` and every offset an int (else it raises,
    and the loader reports the file)."""
    table = {}
    for key, queues in (fastjson.loads(data).get("offsetTable") or {}).items():
        topic, _, group = str(key).rpartition("@")
        check_topic(topic)
        check_group(group)
        table[f"{topic}@{group}"] = {_whole(q): _whole(o) for q, o in queues.items()}
    return table


def _whole(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError(f"not an integer: {v!r}")
    return int(v)


def _pretty(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2)


class TopicConfigManager:
    """topics.json: every topic this broker serves, with system topics created at start."""

    def __init__(self, config: BrokerConfig, config_dir: Path, on_change: Callable[[TopicConfig], None] | None = None):
        self.config = config
        self.path = config_dir / "topics.json"
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()
        self.on_change = on_change
        self._add_system_topics()

    def _add_system_topics(self) -> None:
        c = self.config
        rw = PermName.PERM_READ | PermName.PERM_WRITE
        self.table[SELF_TEST_TOPIC] = TopicConfig(SELF_TEST_TOPIC, 1, 1)
        if c.autoCreateTopicEnable:
            self.table[AUTO_CREATE_TOPIC_KEY_TOPIC] = TopicConfig(
                AUTO_CREATE_TOPIC_KEY_TOPIC,
                c.defaultTopicQueueNums,
                c.defaultTopicQueueNums,
                rw | PermName.PERM_INHERIT,
            )
        self.table[BENCHMARK_TOPIC] = TopicConfig(BENCHMARK_TOPIC, 1024, 1024)
        cluster_perm = PermName.PERM_INHERIT | (rw if c.clusterTopicEnable else 0)
        self.table[c.brokerClusterName] = TopicConfig(c.brokerClusterName, 16, 16, cluster_perm)
        broker_perm = PermName.PERM_INHERIT | (rw if c.brokerTopicEnable else 0)
        self.table[c.brokerName] = TopicConfig(c.brokerName, 1, 1, broker_perm)
        self.table[OFFSET_MOVED_EVENT] = TopicConfig(OFFSET_MOVED_EVENT, 1, 1)
        self.table[SCHEDULE_TOPIC] = TopicConfig(SCHEDULE_TOPIC, 18, 18)
        if c.traceTopicEnable:
            self.table[c.msgTraceTopicName] = TopicConfig(c.msgTraceTopicName, 1, 1)
        reply = f"{c.brokerClusterName}_{REPLY_TOPIC_POSTFIX}"
        self.table[reply] = TopicConfig(reply, 1, 1)

    def load(self) -> None:
        wrapper = load_with_backup(self.path, lambda b: TopicConfigSerializeWrapper.from_json(fastjson.loads(b)))
        if wrapper is not None:
            self.table.update(wrapper.topic_config_table)
            self.data_version = wrapper.data_version

    def persist(self) -> None:
        write_atomically(self.path, _pretty(self.wrapper().to_json()))

    def wrapper(self) -> TopicConfigSerializeWrapper:
        return TopicConfigSerializeWrapper(dict(self.table), self.data_version)

    def select(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def _changed(self, tc: TopicConfig) -> None:
        self.data_version.next_version()
        self.persist()
        if self.on_change is not None:
            self.on_change(tc)

    def update_topic_config(self, tc: TopicConfig) -> None:
        """Create or replace a topic (UPDATE_AND_CREATE_TOPIC)."""
        self.table[tc.topic_name] = tc
        self._changed(tc)

    def delete_topic_config(self, topic: str) -> bool:
        if self.table.pop(topic, None) is None:
            return False
        self.data_version.next_version()
        self.persist()
        return True

    def create_topic_in_send_message_method(
        self, topic: str, default_topic: str, queue_nums: int, topic_sys_flag: int = 0
    ) -> TopicConfig | None:
        """Auto-create ``topic`` from ``default_topic`` when that one has PERM_INHERIT (TBW102)."""
        tc = self.table.get(topic)
        if tc is not None:
            return tc
        default = self.table.get(default_topic)
        if default is None or not default.perm & PermName.PERM_INHERIT:
            return None
        if default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC and not self.config.autoCreateTopicEnable:
            return None
        n = max(1, min(queue_nums, default.write_queue_nums))
        tc = TopicConfig(
            topic,
            read_queue_nums=n,
            write_queue_nums=n,
            perm=default.perm & ~PermName.PERM_INHERIT,
            topic_filter_type=default.topic_filter_type,
            topic_sys_flag=topic_sys_flag,
        )
        log.info("create new topic {topic} from {default}", topic=topic, default=default_topic)
        self.update_topic_config(tc)
        return tc

    def create_topic_in_send_message_back_method(
        self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int = 0
    ) -> TopicConfig:
        """Create a retry or DLQ topic if missing."""
        tc = self.table.get(topic)
        if tc is not None:
            return tc
        tc = TopicConfig(topic, queue_nums, queue_nums, perm, topic_sys_flag=topic_sys_flag)
        self.update_topic_config(tc)
        return tc


class ConsumerOffsetManager:
    """consumerOffset.json: ``topic@group`` → queueId → committed offset (fastjson's unquoted int keys)."""

    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / "consumerOffset.json"
        self.offset_table: dict[str, dict[int, int]] = {}
        self._dirty = False

    def load(self) -> None:
        table = load_with_backup(self.path, _parse_offsets)
        if table:
            self.offset_table.update(table)

    def persist(self) -> None:
        write_atomically(self.path, fastjson.dumps({"offsetTable": self.offset_table}))
        self._dirty = False

    def persist_if_dirty(self) -> None:
        if self._dirty:
            self.persist()

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = f"{topic}@{group}"
        table = self.offset_table.get(key)
        if table is None:
            table = self.offset_table[key] = {}
        table[queue_id] = offset
        self._dirty = True

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """Committed offset, or -1 when the group never committed for this queue."""
        table = self.offset_table.get(f"{topic}@{group}")
        if table is None:
            return -1
        return table.get(queue_id, -1)

    def topics_of_group(self, group: str) -> set[str]:
        return {k.rsplit("@", 1)[0] for k in self.offset_table if k.rsplit("@", 1)[1] == group}

    def groups_of_topic(self, topic: str) -> set[str]:
        return {k.rsplit("@", 1)[1] for k in self.offset_table if k.rsplit("@", 1)[0] == topic}

    def remove_topic(self, topic: str) -> None:
        for key in [k for k in self.offset_table if k.rsplit("@", 1)[0] == topic]:
            del self.offset_table[key]
            self._dirty = True


class SubscriptionGroupManager:
    """subscriptionGroup.json: consumer group settings, auto-created on first use."""

    def __init__(self, config: BrokerConfig, config_dir: Path) -> None:
        self.config = config
        self.path = config_dir / "subscriptionGroup.json"
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion()
        for group in (
            "TOOLS_CONSUMER",
            "FILTERSRV_CONSUMER",
            "SELF_TEST_C_GROUP",
            "CID_ONS-HTTP-PROXY",
            "CID_ONSAPI_PULL",
            "CID_ONSAPI_PERMISSION",
            "CID_ONSAPI_OWNER",
            "CID_RMQ_SYS_TRANS",
        ):
            self.table[group] = SubscriptionGroupConfig(group)

    def load(self) -> None:
        wrapper = load_with_backup(self.path, lambda b: SubscriptionGroupWrapper.from_json(fastjson.loads(b)))
        if wrapper is not None:
            self.table.update(wrapper.subscription_group_table)
            self.data_version = wrapper.data_version

    def persist(self) -> None:
        write_atomically(
            self.path,
            _pretty(
                {
                    "dataVersion": self.data_version.to_json(),
                    "subscriptionGroupTable": {k: v.to_json() for k, v in self.table.items()},
                }
            ),
        )

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, auto-created when ``autoCreateSubscriptionGroup`` is on."""
        cfg = self.table.get(group)
        if cfg is None and self.config.autoCreateSubscriptionGroup:
            cfg = SubscriptionGroupConfig(group)
            self.update(cfg)
        return cfg

    def update(self, cfg: SubscriptionGroupConfig) -> None:
        self.table[cfg.group_name] = cfg
        self.data_version.next_version()
        self.persist()

    def delete(self, group: str) -> bool:
        if self.table.pop(group, None) is None:
            return False
        self.data_version.next_version()
        self.persist()
        return True
