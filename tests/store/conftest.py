"""Fixtures for store tests: tiny segments so a handful of messages crosses file boundaries."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gateway.remoting.message import pack_host, properties_to_string, tags_code
from gateway.store import DefaultMessageStore, MessageExtBrokerInner, StoreConfig

BORN_HOST = pack_host("10.0.0.7", 50123)
STORE_HOST = pack_host("127.0.0.1", 10911)
CL_SIZE = 4096
CQ_SIZE = 20 * 16
HASH_SLOTS = 31
INDEX_NUM = 48

_uniq = itertools.count()


def make_msg(
    topic: str = "TopicTest",
    queue_id: int = 0,
    body: bytes = b"hello",
    tags: str | None = "TagA",
    *,
    sys_flag: int = 0,
    extra: dict[str, str] | None = None,
    born_host: bytes = BORN_HOST,
    store_host: bytes = STORE_HOST,
) -> MessageExtBrokerInner:
    """A message as the broker would build it."""
    props = {"UNIQ_KEY": f"{next(_uniq):032X}", **(extra or {})}
    if tags:
        props["TAGS"] = tags
    return MessageExtBrokerInner(
        topic=topic,
        queue_id=queue_id,
        flag=0,
        body=body,
        properties=properties_to_string(props),
        tags_code=tags_code(tags),
        sys_flag=sys_flag,
        born_timestamp=1_700_000_000_000,
        born_host=born_host,
        store_host=store_host,
    )


def crash(store: DefaultMessageStore) -> None:
    """What kill -9 leaves behind: files closed as they are (page cache intact), abort file still there."""
    store._close_files()
    store.running = False


def lose_commit_log_from(config: StoreConfig, offset: int) -> None:
    """What a power cut leaves of a crashed store's commitlog when only bytes before ``offset`` were durable:
    zeros after it, and segments created after it empty (their creation was lost too)."""
    path = Path(config.commit_log_path)
    for seg in sorted(path.iterdir()) if path.is_dir() else []:
        start = int(seg.name)
        if start >= offset:
            os.truncate(seg, 0)
        elif offset - start < config.mappedFileSizeCommitLog:
            with open(seg, "r+b") as f:
                f.seek(offset - start)
                f.write(bytes(config.mappedFileSizeCommitLog - (offset - start)))


def small_config(root: str) -> StoreConfig:
    """Tiny segments, consume-queue files and index files, so a few dozen messages cross every boundary."""
    return StoreConfig(
        storePathRootDir=root,
        mappedFileSizeCommitLog=CL_SIZE,
        mappedFileSizeConsumeQueue=CQ_SIZE,
        maxHashSlotNum=HASH_SLOTS,
        maxIndexNum=INDEX_NUM,
    )


@pytest.fixture
def config(tmp_path: Path) -> StoreConfig:
    return small_config(str(tmp_path / "store"))


@pytest.fixture
def open_store(config: StoreConfig) -> Iterator[Callable[..., DefaultMessageStore]]:
    """Start stores on ``config`` (or a variant); whatever is still running at the end is shut down."""
    opened: list[DefaultMessageStore] = []

    def _open(cfg: StoreConfig | None = None) -> DefaultMessageStore:
        store = DefaultMessageStore(cfg or config)
        store.start()
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.shutdown()


@pytest.fixture
def store(open_store: Callable[..., DefaultMessageStore]) -> DefaultMessageStore:
    return open_store()
