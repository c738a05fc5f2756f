"""The store's second line against path traversal: a topic never becomes a path outside the store, whatever the
broker lets through (issue 8, items 2 and 3)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.store import DefaultMessageStore, PutMessageStatus, StoreConfig, StorePathError
from gateway.store.consume_queue import ConsumeQueue
from tests.store.conftest import crash, make_msg, small_config

BAD_TOPICS = ["../../x", "../x", "..", ".", "", "a/b", "/abs", "a\\b", "a\x00b", "x/../../y"]


@pytest.fixture
def config(tmp_path: Path) -> StoreConfig:
    return small_config(str(tmp_path / "store"))


@pytest.fixture
def store(config: StoreConfig) -> Iterator[DefaultMessageStore]:
    store = DefaultMessageStore(config)
    store.start()
    yield store
    store.shutdown()


@pytest.fixture
def sentinels(tmp_path: Path, config: StoreConfig) -> list[Path]:
    """Empty directories where the bad topics lead (an rmdir would take them), plus one beside the store."""
    paths = [tmp_path / "x", Path(config.storePathRootDir) / "x", tmp_path / "y", tmp_path / "beside"]
    for p in paths:
        p.mkdir(parents=True, exist_ok=True)
    return paths


def outside(tmp_path: Path, config: StoreConfig) -> list[Path]:
    """Everything under tmp_path that is not the store's own files."""
    cq_root = Path(config.consume_queue_root)
    return sorted(p for p in tmp_path.rglob("*") if cq_root not in (p, *p.parents) and "commitlog" not in p.parts)


@pytest.mark.parametrize("topic", BAD_TOPICS)
def test_delete_topics_refuses_traversal(
    store: DefaultMessageStore, config: StoreConfig, sentinels: list[Path], tmp_path: Path, topic: str
) -> None:
    assert store.put_message(make_msg("Kept", 0)).ok
    before = outside(tmp_path, config)
    with pytest.raises(StorePathError):
        store.delete_topics({topic})
    with pytest.raises(StorePathError):  # checked before anything is deleted
        store.delete_topics(["Kept", topic])
    assert all(p.is_dir() for p in sentinels)
    assert outside(tmp_path, config) == before
    assert store.get_max_offset_in_queue("Kept", 0) == 1


@pytest.mark.parametrize("topic", BAD_TOPICS)
def test_consume_queue_refuses_a_topic_that_is_not_one_plain_name(
    config: StoreConfig, sentinels: list[Path], tmp_path: Path, topic: str
) -> None:
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(StorePathError):
        ConsumeQueue(topic, 0, config.consume_queue_root, config.consume_queue_file_size)
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("topic", BAD_TOPICS)
def test_put_with_a_traversal_topic_is_refused_before_anything_is_written(
    store: DefaultMessageStore, config: StoreConfig, sentinels: list[Path], tmp_path: Path, topic: str
) -> None:
    before = sorted(tmp_path.rglob("*"))
    end = store.max_phy_offset
    assert store.put_message(make_msg(topic, 0)).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_messages([make_msg(topic, 0)]).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.max_phy_offset == end
    assert sorted(tmp_path.rglob("*")) == before


def test_a_symlinked_topic_directory_is_never_followed(config: StoreConfig, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious").write_text("keep me")
    cq_root = Path(config.consume_queue_root)
    cq_root.mkdir(parents=True)
    (cq_root / "Linked").symlink_to(elsewhere)

    store = DefaultMessageStore(config)
    store.start()
    try:
        assert store.put_message(make_msg("Linked", 0)).ok  # in the commitlog, kept out of any consume queue
        assert store.put_message(make_msg("Fine", 0)).ok
        assert store.get_max_offset_in_queue("Linked", 0) == 0
        assert store.get_max_offset_in_queue("Fine", 0) == 1
        with pytest.raises(StorePathError):
            store.delete_topics({"Linked"})
    finally:
        crash(store)
    store = DefaultMessageStore(config)
    store.start()  # recovery re-dispatches every record: the linked topic is skipped, not followed
    try:
        assert store.get_max_offset_in_queue("Fine", 0) == 1
        assert store.get_max_offset_in_queue("Linked", 0) == 0
    finally:
        store.shutdown()
    assert sorted(os.listdir(elsewhere)) == ["precious"]


def test_recovery_skips_records_of_unsafe_topics_written_before_the_check(
    config: StoreConfig, sentinels: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DefaultMessageStore(config)
    store.start()
    # An older store accepted any topic: write such a record past today's check.
    monkeypatch.setattr("gateway.store.commit_log.is_safe_component", lambda name: True)
    assert store.put_message(make_msg("../../x", 0)).ok
    monkeypatch.undo()
    assert store.put_message(make_msg("Fine", 0)).ok
    crash(store)
    before = outside(tmp_path, config)
    store = DefaultMessageStore(config)
    report = store.start()
    try:
        assert report.records_kept == 2
        assert store.get_max_offset_in_queue("Fine", 0) == 1
        assert outside(tmp_path, config) == before
        assert all(p.is_dir() and not any(p.iterdir()) for p in sentinels)
    finally:
        store.shutdown()
