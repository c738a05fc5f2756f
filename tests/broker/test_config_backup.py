"""The broker's config files survive a torn write: each manager loads the ``.bak`` when its main file is corrupt."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.broker.config import BrokerConfig
from gateway.broker.managers import ConsumerOffsetManager, SubscriptionGroupManager, TopicConfigManager
from gateway.remoting.bodies import SubscriptionGroupConfig, TopicConfig


def _cfg() -> BrokerConfig:
    return BrokerConfig(brokerName="broker-a", brokerClusterName="DefaultCluster")


def _tear(path: Path) -> None:
    """What a crash in the middle of a non-atomic write leaves: the first half of the file."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("damage", [_tear, lambda p: p.write_bytes(b""), lambda p: p.unlink()])
def test_managers_fall_back_to_their_backup(tmp_path: Path, damage) -> None:
    topics = TopicConfigManager(_cfg(), tmp_path)
    offsets = ConsumerOffsetManager(tmp_path)
    groups = SubscriptionGroupManager(_cfg(), tmp_path)
    topics.update_topic_config(TopicConfig("Kept", read_queue_nums=3, write_queue_nums=3))
    offsets.commit_offset("cg", "Kept", 1, 42)
    offsets.persist()
    groups.update(SubscriptionGroupConfig("cg-kept", retry_max_times=5))
    # A second write moves the first into .bak; then the main files are damaged.
    topics.update_topic_config(TopicConfig("Newer", read_queue_nums=1, write_queue_nums=1))
    offsets.commit_offset("cg", "Kept", 1, 43)
    offsets.persist()
    groups.update(SubscriptionGroupConfig("cg-newer"))
    for name in ("topics.json", "consumerOffset.json", "subscriptionGroup.json"):
        assert (tmp_path / f"{name}.bak").exists()
        damage(tmp_path / name)

    topics2 = TopicConfigManager(_cfg(), tmp_path)
    offsets2 = ConsumerOffsetManager(tmp_path)
    groups2 = SubscriptionGroupManager(_cfg(), tmp_path)
    for manager in (topics2, offsets2, groups2):
        manager.load()
    kept = topics2.select("Kept")
    assert kept is not None and kept.read_queue_nums == 3
    assert topics2.select("Newer") is None  # only in the damaged file
    assert offsets2.query_offset("cg", "Kept", 1) == 42
    assert groups2.table["cg-kept"].retry_max_times == 5 and "cg-newer" not in groups2.table
