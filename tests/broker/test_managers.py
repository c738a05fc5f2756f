"""topics.json, consumerOffset.json, subscriptionGroup.json: RocketMQ's rules and file formats."""

from __future__ import annotations

from pathlib import Path

from gateway.broker.config import BrokerConfig
from gateway.broker.managers import (
    ConsumerOffsetManager,
    SubscriptionGroupManager,
    TopicConfigManager,
)
from gateway.remoting import fastjson


def _cfg(**kw: object) -> BrokerConfig:
    return BrokerConfig(brokerName="broker-a", brokerClusterName="DefaultCluster", **kw)


def test_system_topics_and_tbw102(tmp_path: Path) -> None:
    topics = TopicConfigManager(_cfg(), tmp_path)
    tbw = topics.select("TBW102")
    assert tbw is not None and (tbw.perm, tbw.read_queue_nums) == (7, 8)
    assert topics.select("SCHEDULE_TOPIC_XXXX").read_queue_nums == 18
    assert topics.select("DefaultCluster").perm == 7
    assert TopicConfigManager(_cfg(autoCreateTopicEnable=False), tmp_path).select("TBW102") is None


def test_auto_create_from_tbw102(tmp_path: Path) -> None:
    changed = []
    topics = TopicConfigManager(_cfg(), tmp_path, on_change=changed.append)
    tc = topics.create_topic_in_send_message_method("NewTopic", "TBW102", 4)
    assert tc is not None and (tc.read_queue_nums, tc.write_queue_nums, tc.perm) == (4, 4, 6)
    assert changed == [tc]
    assert topics.create_topic_in_send_message_method("Other", "NoSuchDefault", 4) is None
    reloaded = TopicConfigManager(_cfg(), tmp_path)
    reloaded.load()
    assert reloaded.select("NewTopic") == tc
    assert reloaded.data_version.counter == topics.data_version.counter


def test_offsets_file_uses_unquoted_int_keys(tmp_path: Path) -> None:
    offsets = ConsumerOffsetManager(tmp_path)
    offsets.commit_offset("g1", "TopicTest", 0, 120)
    offsets.commit_offset("g1", "TopicTest", 3, 7)
    offsets.persist()
    raw = (tmp_path / "consumerOffset.json").read_bytes()
    assert b'"TopicTest@g1":{0:120,3:7}' in raw
    again = ConsumerOffsetManager(tmp_path)
    again.load()
    assert again.query_offset("g1", "TopicTest", 3) == 7
    assert again.query_offset("g1", "TopicTest", 1) == -1
    assert again.topics_of_group("g1") == {"TopicTest"}


def test_java_written_offsets_load(tmp_path: Path) -> None:
    (tmp_path / "consumerOffset.json").write_text(
        '{"offsetTable":{"TopicTest@cg1":{0:120,1:118},"%RETRY%cg1@cg1":{0:3}}}'
    )
    offsets = ConsumerOffsetManager(tmp_path)
    offsets.load()
    assert offsets.query_offset("cg1", "%RETRY%cg1", 0) == 3


def test_subscription_groups_auto_create_and_persist(tmp_path: Path) -> None:
    groups = SubscriptionGroupManager(_cfg(), tmp_path)
    cfg = groups.find("cg1")
    assert cfg is not None and cfg.retry_max_times == 16
    data = fastjson.loads((tmp_path / "subscriptionGroup.json").read_bytes())
    assert data["subscriptionGroupTable"]["cg1"]["retryQueueNums"] == 1
    assert SubscriptionGroupManager(_cfg(autoCreateSubscriptionGroup=False), tmp_path / "x").find("cg2") is None
