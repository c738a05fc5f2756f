"""A broker's store on a real DLedger ledger, appended to by a one-member leader that commits when told."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer

from gateway.dledger.codes import DLedgerError, DLedgerResponseCode
from gateway.dledger.commitlog import DLedgerCommitLog
from gateway.dledger.entry import INDEX_UNIT_SIZE, DLedgerEntry
from gateway.dledger.store import DLedgerFileStore, DLedgerStoreConfig
from gateway.remoting.message import decode_record
from gateway.store import DefaultMessageStore, StoreConfig
from gateway.store.api import GetMessageStatus
from tests.store.conftest import small_config


@dataclass
class AppendResult:
    """What ``DLedgerServer.append`` returns."""

    entry: DLedgerEntry
    committed: defer.Deferred[Any]


class LedgerAppender:
    """The leader of a one-member group: appends at ``term``; commits at once (``auto_commit``) or on
    :meth:`commit`; ``refuse`` makes appends fail at once with that code."""

    def __init__(self, ledger: DLedgerFileStore, auto_commit: bool = True, term: int = 1) -> None:
        self.ledger = ledger
        self.auto_commit = auto_commit
        self.term = term
        self.refuse: DLedgerResponseCode | None = None
        self.pending: list[tuple[DLedgerEntry, defer.Deferred[Any]]] = []
        self.commit_listeners: list[Callable[[int], None]] = []

    def __call__(self, body: bytes) -> AppendResult:
        if self.refuse is not None:
            raise DLedgerError(self.refuse, "refused")
        entry = self.ledger.append_as_leader(body, self.term)
        committed: defer.Deferred[Any] = defer.Deferred()
        self.pending.append((entry, committed))
        if self.auto_commit:
            self.commit()
        return AppendResult(entry, committed)

    def commit(self, index: int | None = None) -> None:
        """Commit up to ``index`` (the ledger's end by default): the commit listeners, then the appends."""
        self.ledger.update_committed_index(self.ledger.ledger_end_index if index is None else index)
        for listener in self.commit_listeners:
            listener(self.ledger.committed_index)
        done = [p for p in self.pending if p[0].index <= self.ledger.committed_index]
        self.pending = [p for p in self.pending if p[0].index > self.ledger.committed_index]
        for entry, committed in done:
            committed.callback(entry)

    def fail(self, code: DLedgerResponseCode) -> None:
        """Every pending append fails with ``code``."""
        pending, self.pending = self.pending, []
        for _, committed in pending:
            committed.errback(DLedgerError(code, "failed"))


DATA_FILE = 4096  # the store's mappedFileSizeCommitLog: a few dozen messages roll over files


def ledger_config(root: str) -> DLedgerStoreConfig:
    return DLedgerStoreConfig(
        store_base_dir=root,
        self_id="n0",
        mapped_file_size_for_entry_data=DATA_FILE,
        mapped_file_size_for_entry_index=INDEX_UNIT_SIZE * 64,
    )


@dataclass
class DLedgerBroker:
    """A store in DLedger mode, its ledger and the appender."""

    store: DefaultMessageStore
    ledger: DLedgerFileStore
    appender: LedgerAppender

    @property
    def commit_log(self) -> DLedgerCommitLog:
        cl = self.store.commit_log
        assert isinstance(cl, DLedgerCommitLog)
        return cl


def start_dledger_store(root: str, auto_commit: bool = True, config: StoreConfig | None = None) -> DLedgerBroker:
    """Start a store on ``root`` in DLedger mode; each commit dispatches, as the broker wires it."""
    config = config or small_config(root)
    assert config.mappedFileSizeCommitLog == DATA_FILE
    ledger = DLedgerFileStore(ledger_config(root))
    appender = LedgerAppender(ledger, auto_commit)
    store = DefaultMessageStore(config, functools.partial(DLedgerCommitLog, ledger=ledger, appender=appender))
    store.start()
    appender.commit_listeners.append(lambda _: store.dispatch_appended())
    return DLedgerBroker(store, ledger, appender)


@pytest.fixture
def dledger_store(tmp_path: Path) -> Iterator[Callable[..., DLedgerBroker]]:
    """Start DLedger-mode stores on ``tmp_path/store``; shut down at the end whatever still runs."""
    started: list[DLedgerBroker] = []

    def _start(auto_commit: bool = True) -> DLedgerBroker:
        broker = start_dledger_store(str(tmp_path / "store"), auto_commit)
        started.append(broker)
        return broker

    yield _start
    for broker in started:
        broker.store.shutdown()


def result_of(d: defer.Deferred[Any]) -> Any:
    """The result of a Deferred that has fired (AssertionError if it has not)."""
    out: list[Any] = []
    d.addBoth(out.append)
    assert out, "the Deferred has not fired"
    return out[0]


def pull(store: DefaultMessageStore, topic: str = "TopicTest", queue_id: int = 0, offset: int = 0) -> list:
    """Every message from ``offset`` on, pulled as a consumer does."""
    msgs = []
    while True:
        result = store.get_message("g", topic, queue_id, offset, 32)
        assert result is not None
        if result.status is not GetMessageStatus.FOUND:
            return msgs
        msgs += [decode_record(b) for b in result.buffers]
        offset = result.next_begin_offset
