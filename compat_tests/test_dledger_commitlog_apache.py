"""A store Apache's 4.9.8 broker wrote in DLedger mode (a one-member group) opens in ours: every message read back
through the consume queues at the physical offset Apache gave it; then ours appends and Apache's broker, started
again on the directory, serves both.  A Master/Slave store converts to DLedger in ours as in Apache's, to the same
bytes.  Runs when ``ROCKETMQ_BROKER_CLASSPATH`` names the broker's jars."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import pytest

from gateway.client import MessageQueue, MQClientError, blocking, build_message
from gateway.client.producer import SendResult
from gateway.dledger.commitlog import DLedgerCommitLog
from gateway.dledger.store import DLedgerFileStore, DLedgerStoreConfig
from gateway.remoting.message import decode_offset_message_id
from gateway.store import DefaultMessageStore, StoreConfig
from tests.dledger.conftest import LedgerAppender, pull, result_of
from tests.ha.procs import until
from tests.store.conftest import make_msg

from .apache_broker import CLASSPATH, CLASSPATH_ENV, apache_cluster
from .servers import free_port

if not CLASSPATH or "dledger" not in CLASSPATH:
    pytest.skip(f"DLedger not given: set {CLASSPATH_ENV} to Apache 4.9.8's jars", allow_module_level=True)

pytestmark = pytest.mark.compat

TOPIC = "DLedgerStoreTopic"
DATA_FILE = 1 << 20
COUNT = 40


def dledger_settings() -> dict[str, str]:
    return {
        "enableDLegerCommitLog": "true",
        "dLegerGroup": "broker-a",
        "dLegerPeers": f"n0-127.0.0.1:{free_port()}",
        "dLegerSelfId": "n0",
        "mappedFileSizeCommitLog": str(DATA_FILE),
    }


def open_ours(root: Path) -> tuple[DefaultMessageStore, LedgerAppender]:
    ledger = DLedgerFileStore(
        DLedgerStoreConfig(store_base_dir=str(root), self_id="n0", mapped_file_size_for_entry_data=DATA_FILE)
    )
    appender = LedgerAppender(ledger)
    config = StoreConfig(storePathRootDir=str(root), mappedFileSizeCommitLog=DATA_FILE)
    store = DefaultMessageStore(config, functools.partial(DLedgerCommitLog, ledger=ledger, appender=appender))
    store.start()
    appender.commit_listeners.append(lambda _: store.dispatch_appended())
    return store, appender


def send_when_leader(producer: blocking.Producer, i: int) -> SendResult | None:
    """The broker registers before its member is elected: until then a send fails."""
    try:
        return producer.send(build_message(TOPIC, f"apache-{i}".encode(), tags="TagA", keys=[f"k{i}"]))
    except MQClientError:
        return None


def test_apache_dledger_store_opens_in_ours_and_back(tmp_path: Path) -> None:
    sent = {}
    with (
        apache_cluster(tmp_path, dledger_settings()) as (namesrv, _),
        blocking.Producer("dledger-store-producer", namesrv) as producer,
    ):
        for i in range(COUNT):
            result = until(functools.partial(send_when_leader, producer, i), 60, "a send to the leader")
            sent[(result.queue.queue_id, result.queue_offset)] = (f"apache-{i}".encode(), result.offset_msg_id)

    store, appender = open_ours(tmp_path / "store")
    queues = sorted({q for q, _ in sent})
    got = {}
    for queue_id in queues:
        for m in pull(store, TOPIC, queue_id):
            got[(queue_id, m.queue_offset)] = (m.body, m.msg_id)
            assert decode_offset_message_id(m.msg_id)[1] == m.commitlog_offset
    assert len(got) == COUNT and got == sent  # bodies, queue offsets and physical offsets as Apache gave them
    # Ours continues the ledger (in Apache's last term), queue offsets after Apache's.
    appender.term = store.commit_log.ledger.ledger_end_term
    queue_id = queues[0]
    next_offset = store.get_max_offset_in_queue(TOPIC, queue_id)
    ours = [result_of(store.async_put_message(make_msg(TOPIC, queue_id, f"ours-{i}".encode()))) for i in range(5)]
    assert [r.append.logics_offset for r in ours] == list(range(next_offset, next_offset + 5))
    store.shutdown()

    bodies: list[bytes] = []
    with (
        apache_cluster(tmp_path, dledger_settings()) as (namesrv, _),
        blocking.PullConsumer("dledger-store-reader", namesrv) as consumer,
    ):
        mq = MessageQueue(TOPIC, "broker-a", queue_id)
        offset = 0
        while True:
            pulled = consumer.pull(mq, "*", offset, 32)
            if not pulled.messages:
                break
            bodies += [m.body for m in pulled.messages]
            offset = pulled.next_begin_offset
    apache_bodies = [body for (q, _), (body, _) in sorted(sent.items()) if q == queue_id]
    assert bodies == apache_bodies + [f"ours-{i}".encode() for i in range(5)]


def test_a_master_slave_store_converts_in_ours_as_in_apache(tmp_path: Path) -> None:
    written = tmp_path / "master-slave" / "store"
    store = DefaultMessageStore(StoreConfig(storePathRootDir=str(written), mappedFileSizeCommitLog=DATA_FILE))
    store.start()
    for i in range(1500):  # two commitlog files and a bit
        assert store.put_message(make_msg(TOPIC, i % 4, f"old-{i}-".encode() * 100)).ok
    store.shutdown()
    theirs, ours = tmp_path / "apache", tmp_path / "ours"
    for root in (theirs, ours):
        shutil.copytree(written, root / "store")

    with (
        apache_cluster(theirs, dledger_settings()) as (namesrv, _),
        blocking.Producer("dledger-convert-producer", namesrv) as producer,
    ):
        for i in range(4):
            assert until(functools.partial(send_when_leader, producer, i), 60, "a send to the leader")
    store, _ = open_ours(ours / "store")
    for i in range(4):
        assert result_of(store.async_put_message(make_msg(TOPIC, i, f"apache-{i}".encode()))).ok
    divided = store.commit_log.divided_commitlog_offset
    store.shutdown()

    # The same conversion: the old commitlog closed by the same blank record, the ledger begun at the same offset.
    for name in ("commitlog", "dledger-n0/data"):
        assert sorted(p.name for p in (theirs / "store" / name).iterdir()) == sorted(
            p.name for p in (ours / "store" / name).iterdir()
        )
    for path in sorted((ours / "store" / "commitlog").iterdir()):
        assert path.read_bytes() == (theirs / "store" / "commitlog" / path.name).read_bytes(), path.name
    assert int(sorted((ours / "store" / "dledger-n0" / "data").iterdir())[0].name) == divided == 2 * DATA_FILE

    # Apache's converted store in ours: the old messages, then Apache's new ones after the divide.
    store, _ = open_ours(theirs / "store")
    got = {q: pull(store, TOPIC, q) for q in range(4)}
    store.shutdown()
    expected_old = {q: [f"old-{i}-".encode() * 100 for i in range(q, 1500, 4)] for q in range(4)}
    assert sum(len(msgs) for msgs in got.values()) == 1504
    for q, msgs in got.items():
        assert [m.body for m in msgs if m.commitlog_offset < divided] == expected_old[q]
    new = sorted(m.body for msgs in got.values() for m in msgs if m.commitlog_offset >= divided)
    assert new == [f"apache-{i}".encode() for i in range(4)]
