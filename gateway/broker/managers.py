"""The broker's persisted tables: topics.json, consumerOffset.json, subscriptionGroup.json."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson
from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.threadpool import ThreadPool

from gateway.persist import SetAside, load_with_backup, write_atomically
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
    SYSTEM_GROUPS,
    group_problem,
    topic_problem,
)

from .coalesce import Coalescer
from .config import BrokerConfig

log = Logger()
T = TypeVar("T")


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def read_offsets(data: bytes) -> tuple[dict[str, dict[int, int]], SetAside]:
    """consumerOffset.json's table (or GET_ALL_CONSUMER_OFFSET's body), the entries whose ``topic@group``
    breaks the name rules set aside; an offset that is not an int raises (and the loader reports the file)."""
    table, aside = SetAside.split(fastjson.loads(data).get("offsetTable") or {}, _offset_key_problem)
    return {str(key): {_whole(q): _whole(o) for q, o in queues.items()} for key, queues in table.items()}, aside


def _offset_key_problem(key: Any, _queues: Any) -> str | None:
    topic, _, group = str(key).rpartition("@")
    return topic_problem(topic) or group_problem(group)


def _read_named_table(
    data: bytes, table_key: str, name_key: str, problem: Callable[[str], str | None], read: Callable[[Any], T]
) -> tuple[T, SetAside]:
    """A topics.json-like file read by ``read``, the entries under a name (map key or ``name_key``) that
    ``problem`` refuses set aside first."""
    obj = fastjson.loads(data)
    if not isinstance(obj, dict):
        return read(obj), SetAside()
    live, aside = SetAside.split_named(obj.get(table_key), name_key, problem)
    return read({**obj, table_key: live}), aside


def _whole(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError(f"not an integer: {v!r}")
    return int(v)


def _pretty(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2)


# Changes within this many seconds share one write of their file.
PERSIST_DELAY = 0.1


class ConfigFile:
    """One table's file, written as the table changes.

    Without a clock (tools, tests) every change is written at once. With one (the broker) a change only asks
    for a write within ``PERSIST_DELAY``, so a burst of changes (a flood of new groups or topics) costs one
    write, not one fsync each; writes never overlap and each renders the table when it starts, so the last
    state always reaches the disk. With a thread pool the write and its fsyncs run there, off the reactor.
    """

    def __init__(
        self,
        path: Path,
        render: Callable[[], bytes],
        clock: IReactorTime | None = None,
        threadpool: ThreadPool | None = None,
    ) -> None:
        self.path = path
        self.render = render
        self.clock = clock
        self.threadpool = threadpool
        self._writes = None if clock is None else Coalescer(clock, self._write, PERSIST_DELAY, f"writing {path}")

    def changed(self) -> None:
        """The table changed: write it now, or soon."""
        if self._writes is None:
            self.write_now()
        else:
            self._writes.request()

    def flush(self) -> defer.Deferred[None]:
        """Fires once every change so far is on disk (the write starts in the next reactor turn)."""
        if self._writes is None:
            return defer.succeed(None)
        return self._writes.flush()

    def cancel(self) -> None:
        """Forget a write asked for and not started (a start that failed leaves the file as it found it)."""
        if self._writes is not None:
            self._writes.cancel()

    def write_now(self) -> None:
        """Write on this thread (at start, before anything else can write)."""
        write_atomically(self.path, self.render())

    def _write(self) -> defer.Deferred[None] | None:
        data = self.render()
        if self.threadpool is None:
            write_atomically(self.path, data)
            return None
        return deferToThreadPool(self.clock, self.threadpool, write_atomically, self.path, data)


class _VersionedTable:
    """What the topic and group tables share: a change moves the data version and asks for a write."""

    table: dict[str, Any]
    data_version: DataVersion
    file: ConfigFile
    path: Path
    # Entries of the file under names this broker refuses (see gateway.persist.SetAside).
    set_aside: SetAside
    # The file's table property, the entries' name property, the rule their names follow, the file's shape.
    table_key: str
    name_key: str
    name_problem: Callable[[str], str | None]
    wrapper_type: Any

    def read(self, data: bytes) -> tuple[Any, SetAside]:
        """The file's (or its GET_ALL_* body's) wrapper of the legal entries, and the refused ones set aside."""
        return _read_named_table(data, self.table_key, self.name_key, self.name_problem, self.wrapper_type.from_json)

    def _load(self) -> Any:
        """The file's wrapper (None for a fresh start), its refused entries set aside."""
        loaded = load_with_backup(self.path, self.read)
        if loaded is None:
            return None
        wrapper, self.set_aside = loaded
        self.set_aside.warn(self.path)
        self.data_version = wrapper.data_version
        return wrapper

    def _render(self) -> bytes:
        body = self.wrapper_type(self.table, self.data_version).to_json()
        body[self.table_key] = self.set_aside.merged(body[self.table_key])
        return _pretty(body)

    def _set(self, name: str, value: Any) -> None:
        self.table[name] = value
        self.data_version.next_version()
        self.file.changed()

    def replace_all(self, table: dict[str, Any], version: DataVersion, set_aside: SetAside) -> defer.Deferred[bool]:
        """Take another broker's whole table, data version and entries set aside from it (a slave following its
        master: its file then holds what the master's does) unless the versions already match; fires True once
        it is on disk."""
        if self.data_version == version:
            return defer.succeed(False)
        self.data_version = version
        self.set_aside = set_aside
        self.table.clear()
        self.table.update(table)
        self.file.changed()
        return self.file.flush().addCallback(lambda _: True)

    def _remove(self, name: str) -> defer.Deferred[None]:
        """Forget ``name``; fires once the file no longer has it."""
        if self.table.pop(name, None) is not None:
            self.data_version.next_version()
            self.file.changed()
        return self.file.flush()


class TopicConfigManager(_VersionedTable):
    """topics.json: every topic this broker serves, with system topics created at start."""

    table_key = "topicConfigTable"
    name_key = "topicName"
    name_problem = staticmethod(topic_problem)
    wrapper_type = TopicConfigSerializeWrapper

    def __init__(
        self,
        config: BrokerConfig,
        config_dir: Path,
        on_change: Callable[[TopicConfig], None] | None = None,
        clock: IReactorTime | None = None,
        threadpool: ThreadPool | None = None,
    ) -> None:
        """``clock`` and ``threadpool``: see :class:`ConfigFile`."""
        self.config = config
        self.path = config_dir / "topics.json"
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()
        self.set_aside = SetAside()
        self.on_change = on_change
        self.file = ConfigFile(self.path, self._render, clock, threadpool)
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
        wrapper = self._load()
        if wrapper is not None:
            self.table.update(wrapper.topic_config_table)

    def persist(self) -> None:
        """Write topics.json now."""
        self.file.write_now()

    def wrapper(self) -> TopicConfigSerializeWrapper:
        return TopicConfigSerializeWrapper(dict(self.table), self.data_version)

    def select(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def _put(self, tc: TopicConfig) -> None:
        self._set(tc.topic_name, tc)
        if self.on_change is not None:
            self.on_change(tc)

    def update_topic_config(self, tc: TopicConfig) -> defer.Deferred[None]:
        """Create or replace a topic (UPDATE_AND_CREATE_TOPIC); fires once topics.json has it."""
        self._put(tc)
        return self.file.flush()

    def delete_topic_config(self, topic: str) -> defer.Deferred[None]:
        """Forget a topic; fires once topics.json no longer has it."""
        return self._remove(topic)

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
        self._put(tc)
        return tc

    def create_topic_in_send_message_back_method(
        self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int = 0
    ) -> TopicConfig:
        """Create a retry or DLQ topic if missing."""
        tc = self.table.get(topic)
        if tc is not None:
            return tc
        tc = TopicConfig(topic, queue_nums, queue_nums, perm, topic_sys_flag=topic_sys_flag)
        self._put(tc)
        return tc


class ConsumerOffsetManager:
    """consumerOffset.json: ``topic@group`` → queueId → committed offset (fastjson's unquoted int keys)."""

    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / "consumerOffset.json"
        self.offset_table: dict[str, dict[int, int]] = {}
        # Offsets under a topic@group that breaks the name rules (see gateway.persist.SetAside).
        self.set_aside = SetAside()
        self._dirty = False

    def load(self) -> None:
        loaded = load_with_backup(self.path, read_offsets)
        if loaded is not None:
            table, self.set_aside = loaded
            self.set_aside.warn(self.path)
            self.offset_table.update(table)

    def persist(self) -> None:
        write_atomically(self.path, fastjson.dumps({"offsetTable": self.set_aside.merged(self.offset_table)}))
        self._dirty = False

    def merge(self, table: dict[str, dict[int, int]], set_aside: SetAside) -> None:
        """Take another broker's offsets, and those it sets aside, over ours, keeping groups only we know (Java's
        putAll), and persist."""
        self.offset_table.update(table)
        self.set_aside.update(set_aside)
        self.persist()

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

    def clone_offset(self, src_group: str, dest_group: str, topic: str) -> None:
        """Give ``dest_group`` a copy of ``src_group``'s offsets on ``topic`` (cloneOffset)."""
        table = self.offset_table.get(f"{topic}@{src_group}")
        if table is not None:
            self.offset_table[f"{topic}@{dest_group}"] = dict(table)
            self._dirty = True

    def topics_of_group(self, group: str) -> set[str]:
        return {k.rsplit("@", 1)[0] for k in self.offset_table if k.rsplit("@", 1)[1] == group}

    def groups_of_topic(self, topic: str) -> set[str]:
        return {k.rsplit("@", 1)[1] for k in self.offset_table if k.rsplit("@", 1)[0] == topic}

    def remove_topic(self, topic: str) -> None:
        for key in [k for k in self.offset_table if k.rsplit("@", 1)[0] == topic]:
            del self.offset_table[key]
            self._dirty = True


class SubscriptionGroupManager(_VersionedTable):
    """subscriptionGroup.json: consumer group settings, auto-created on first use."""

    table_key = "subscriptionGroupTable"
    name_key = "groupName"
    name_problem = staticmethod(group_problem)
    wrapper_type = SubscriptionGroupWrapper

    def __init__(
        self,
        config: BrokerConfig,
        config_dir: Path,
        clock: IReactorTime | None = None,
        threadpool: ThreadPool | None = None,
    ) -> None:
        """``clock`` and ``threadpool``: see :class:`ConfigFile`."""
        self.config = config
        self.path = config_dir / "subscriptionGroup.json"
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self.data_version = DataVersion()
        self.set_aside = SetAside()
        self.file = ConfigFile(self.path, self._render, clock, threadpool)
        for group in SYSTEM_GROUPS:
            self.table[group] = SubscriptionGroupConfig(group)

    def load(self) -> None:
        wrapper = self._load()
        if wrapper is not None:
            self.table.update(wrapper.subscription_group_table)

    def persist(self) -> None:
        """Write subscriptionGroup.json now."""
        self.file.write_now()

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, auto-created when ``autoCreateSubscriptionGroup`` is on."""
        cfg = self.table.get(group)
        if cfg is None and self.config.autoCreateSubscriptionGroup:
            cfg = SubscriptionGroupConfig(group)
            self._set(group, cfg)
        return cfg

    def update(self, cfg: SubscriptionGroupConfig) -> defer.Deferred[None]:
        """Create or replace a group (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP); fires once the file has it."""
        self._set(cfg.group_name, cfg)
        return self.file.flush()

    def delete(self, group: str) -> defer.Deferred[None]:
        """Forget a group (DELETE_SUBSCRIPTIONGROUP); fires once the file no longer has it."""
        return self._remove(group)
