"""The exactly-once sink: half messages decided by the ledger, and check-backs answered from it.

The broker checks unresolved halves every 0.5 s once they are 1 s old, so check-backs happen within the tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from compat_tests.secure_servers import APP, acl_servers, pki, tls_context, tls_servers  # noqa: F401
from compat_tests.servers import GatewayServers, call, create_topic_request
from gateway.client import blocking, build_message
from gateway.client.message_id import set_uniq_id
from gateway.client.security import ClientSecurity
from gateway.client.transaction_producer import LocalTransactionState
from gateway.remoting.bodies import MessageQueue
from gateway.remoting.codes import RequestCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.message import Message, MessageExt
from gateway.remoting.names import TRANS_HALF_TOPIC
from gateway.tls import certs
from gateway.tls.config import TlsConfig
from spark import exactly_once as eo
from spark import queues as rq
from spark.sink import OutgoingMessage, SinkSettings
from tests.faults import FaultProxy
from tests.spark.conftest import FAST_RETRIES, ROOT

pytestmark = pytest.mark.spark

CHECKS = {"transactionCheckInterval": "500", "transactionTimeOut": "1000", "transactionCheckMax": "200"}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServers]:
    s = GatewayServers(tmp_path_factory.mktemp("gateway"), {**FAST_RETRIES, **CHECKS}).start()
    yield s
    s.close()


def sink_settings(servers: GatewayServers, group: str, **options: str) -> SinkSettings:
    return SinkSettings.from_options(
        {"namesrvAddr": servers.namesrv_addr, "producerGroup": group, "deliveryGuarantee": "exactly-once", **options}
    )


def stored(servers: GatewayServers, topic: str, queues: int = 1) -> list[MessageExt]:
    """Every message in ``topic`` now, queue by queue in offset order."""
    found = []
    with blocking.PullConsumer("eos_reader", servers.namesrv_addr) as consumer:
        for q in range(queues):
            offset = 0
            while True:
                result = consumer.pull(MessageQueue(topic, "broker-a", q), "*", offset, 32)
                if not result.messages:
                    break
                found.extend(result.messages)
                offset = result.next_begin_offset
    return found


def visible(servers: GatewayServers, topic: str, queues: int = 1) -> list[bytes]:
    return [m.body for m in stored(servers, topic, queues)]


def half_queue_end(servers: GatewayServers) -> int:
    request = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": TRANS_HALF_TOPIC, "queueId": "0"})
    return int(call(servers.broker_addr, request).ext_fields["offset"])


def half_queue_settles(servers: GatewayServers, timeout: float = 20) -> None:
    """Wait until every half message is ended: while one is not, each check pass appends a copy of it."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() - since < 3:  # six check passes without a copy
        assert time.monotonic() < deadline, "half messages still checked back"
        offset = half_queue_end(servers)
        if offset != last:
            last, since = offset, time.monotonic()
        time.sleep(0.25)


def wait_for(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.2)


def test_a_decision_is_answered_as_the_ledger_says() -> None:
    now = 1000.0
    committed = eo.Decision(True, now, 5.0, frozenset({"a1"}))
    assert eo.answer(None, "a1", now) is LocalTransactionState.UNKNOW
    assert eo.answer(eo.Decision(False, now, 5.0), "a1", now) is LocalTransactionState.ROLLBACK_MESSAGE
    assert eo.answer(committed, "a2", now) is LocalTransactionState.ROLLBACK_MESSAGE
    assert eo.answer(committed, "a1", now + 1) is LocalTransactionState.UNKNOW  # the driver is ending it
    assert eo.answer(committed, "a1", now + 6) is LocalTransactionState.COMMIT_MESSAGE
    ended = eo.Decision(True, now, 5.0, frozenset({"a1"}), ended=True)
    assert eo.answer(ended, "a1", now + 6) is LocalTransactionState.ROLLBACK_MESSAGE  # a check copy
    assert eo.Decision.from_text(committed.to_text()) == committed
    assert eo.parse_txn("q 3 a1") == ("q", 3, "a1")
    assert eo.parse_txn("q x a1") is None and eo.parse_txn(None) is None


def test_the_ledger_keeps_the_first_decision_and_prunes_resolved_ones(servers: GatewayServers) -> None:
    ledger = eo.Ledger(sink_settings(servers, "eos_ledger_pg"))
    now = round(time.time(), 3)  # the ledger keeps milliseconds
    first = eo.Decision(True, now, 5.0, frozenset({"a"}))
    assert ledger.decide("w1", 0, first) is first
    assert ledger.decide("w1", 0, eo.Decision(False, now, 5.0)) == first  # a decision stands
    assert ledger.get("w1", 0) == first and ledger.get("w1", 1) is None
    for batch in range(1, eo.KEEP_PER_WRITE + 3):
        ledger.put("w1", batch, eo.Decision(False, now, 5.0))
    ledger.prune(now)
    assert ledger.get("w1", 0) == first  # committed, not ended: kept for its check-backs
    assert ledger.get("w1", 1) is None and ledger.get("w1", 2) is None  # aborted beyond the newest 16
    assert ledger.get("w1", eo.KEEP_PER_WRITE + 2) is not None


def halves(settings: SinkSettings, topic: str, txn: str, n: int) -> list[eo.HalfMessage]:
    attempt = txn.split()[2]
    msgs = (OutgoingMessage(with_uniq(build_message(topic, f"{attempt}-{i}".encode())), None) for i in range(n))
    return eo.send_halves(settings, txn, msgs)


def with_uniq(msg: Message) -> Message:
    set_uniq_id(msg)
    return msg


def test_halves_stay_invisible_until_the_decision_ends_them_in_order(servers: GatewayServers) -> None:
    servers.create_topic("EosPieces", 1)
    settings = sink_settings(servers, "eos_pieces_pg")
    written = halves(settings, "EosPieces", "w2 0 ok", 40)
    assert len(written) == 40 and visible(servers, "EosPieces") == []
    assert eo.end_transactions(settings, written, commit=True, deadline=time.time() + 30) == 0
    assert visible(servers, "EosPieces") == [f"ok-{i}".encode() for i in range(40)]
    rolled = halves(settings, "EosPieces", "w2 1 no", 5)
    assert eo.end_transactions(settings, rolled, commit=True, deadline=time.time() - 1) == 5  # too late: none sent
    assert eo.end_transactions(settings, rolled, commit=False) == 0
    time.sleep(2.5)  # check passes come and go
    assert len(visible(servers, "EosPieces")) == 40


def test_a_keyed_queues_commits_go_one_at_a_time_the_others_together(servers: GatewayServers) -> None:
    """Apache's broker ends transactions on a thread pool (two COMMITs of one queue in flight may be stored
    in either order), so a keyed queue's COMMIT waits for the answer to the one before it. Through a proxy
    holding every chunk 0.1 s, ten keyed COMMITs take ten round trips; ten others go together."""
    servers.create_topic("EosKeyedEnds", 1)
    settings = sink_settings(servers, "eos_keyed_ends_pg")
    keyed = [replace(h, ordered=True) for h in halves(settings, "EosKeyedEnds", "w8 0 keyed", 10)]
    loose = halves(settings, "EosKeyedEnds", "w8 1 loose", 10)
    assert {h.queue_id for h in keyed + loose} == {0} and not any(h.ordered for h in loose)
    ledger, now = eo.Ledger(settings), round(time.time(), 3)
    for batch, attempt in enumerate(("keyed", "loose")):  # the check copies made meanwhile are rolled back
        ledger.put("w8", batch, eo.Decision(True, now, 5.0, frozenset({attempt}), ended=True))
    with FaultProxy(keyed[0].addr, delay=0.1) as proxy:
        started = time.monotonic()
        assert eo.end_transactions(settings, [replace(h, addr=proxy.address) for h in keyed], commit=True) == 0
        one_at_a_time = time.monotonic() - started
        started = time.monotonic()
        assert eo.end_transactions(settings, [replace(h, addr=proxy.address) for h in loose], commit=True) == 0
        together = time.monotonic() - started
    assert one_at_a_time >= 10 * 2 * 0.1 * 0.9, one_at_a_time  # each request and its answer held 0.1 s
    assert together < one_at_a_time / 2, (together, one_at_a_time)
    expected = [f"keyed-{i}".encode() for i in range(10)] + [f"loose-{i}".encode() for i in range(10)]
    assert visible(servers, "EosKeyedEnds") == expected


def test_check_backs_commit_a_decided_batch_once_and_roll_back_the_rest(servers: GatewayServers) -> None:
    """A driver that died after recording its decision: the check-back ends the halves, from the ledger."""
    servers.create_topic("EosChecks", 1)
    settings = sink_settings(servers, "eos_checks_pg")
    halves(settings, "EosChecks", "w3 0 kept", 20)
    halves(settings, "EosChecks", "w3 0 lost", 20)  # a failed attempt of the same batch
    halves(settings, "EosChecks", "w3 1 late", 5)  # a batch nobody decided yet
    ledger = eo.Ledger(settings)
    ledger.put("w3", 0, eo.Decision(True, time.time(), 1.0, frozenset({"kept"})))
    wait_for(lambda: len(visible(servers, "EosChecks")) >= 20, 15, "the decided halves committed by check-back")
    time.sleep(2.5)  # more check passes: nothing twice, nothing of the failed attempt or of batch 1
    assert sorted(visible(servers, "EosChecks")) == sorted(f"kept-{i}".encode() for i in range(20))
    ledger.put("w3", 1, eo.Decision(False, time.time(), 1.0))
    half_queue_settles(servers)  # batch 1 rolled back by the check-back too
    assert len(visible(servers, "EosChecks")) == 20


def test_a_driver_dead_mid_ends_has_the_rest_committed_and_nothing_twice(servers: GatewayServers) -> None:
    """Halves checked back (so copied) while undecided; then a driver records commit and ends half of them
    before dying. The check-back commits the other half and rolls back the copies of the ended ones."""
    servers.create_topic("EosMidEnds", 1)
    settings = sink_settings(servers, "eos_mid_ends_pg")
    written = halves(settings, "EosMidEnds", "w4 0 a", 20)
    time.sleep(2.5)  # older than transactionTimeOut: checked, answered unknown, copied
    ledger = eo.Ledger(settings)
    ledger.put("w4", 0, eo.Decision(True, round(time.time(), 3), 1.0, frozenset({"a"})))
    assert eo.end_transactions(settings, written[:10], commit=True, deadline=time.time() + 30) == 0
    wait_for(lambda: len(visible(servers, "EosMidEnds")) >= 20, 15, "the rest committed by the check-back")
    half_queue_settles(servers)
    assert sorted(visible(servers, "EosMidEnds")) == sorted(f"a-{i}".encode() for i in range(20))


def write(spark: Any, servers: GatewayServers, df: Any, topic: str, **options: str) -> None:
    (
        df.write.format("rocketmq")
        .option("namesrvAddr", servers.namesrv_addr)
        .option("topic", topic)
        .option("deliveryGuarantee", "exactly-once")
        .option("sendTimeoutMs", "300")  # a grace of 6 s before check-backs commit what a driver left
        .options(**options)
        .mode("append")
        .save()
    )


def test_a_batch_write_is_visible_once_keyed_rows_in_order(spark: Any, servers: GatewayServers) -> None:
    servers.create_topic("EosBatch", 4)
    df = spark.range(0, 1000, numPartitions=2).selectExpr(
        "CAST(id AS STRING) AS body",
        "CAST(id % 7 AS STRING) AS shardingKey",
        "map('idx', CAST(id AS STRING)) AS properties",
        "CASE WHEN id % 100 = 0 THEN 1 ELSE NULL END AS delayTimeLevel",
    )
    # RocketMQ's send timeout (a grace of 60 s): the driver's COMMITs, one in flight per queue of keyed rows, keep
    # the order for 30 s; on a loaded machine 3 s (the other tests' grace of 6 s) ended 50 of them and left the
    # rest to the check-back, which commits in no order.
    write(spark, servers, df, "EosBatch", producerGroup="eos_batch_pg", sendTimeoutMs="3000")
    wait_for(lambda: len(stored(servers, "EosBatch", 4)) >= 1000, 15, "1000 messages, the delayed ones too")
    time.sleep(1.5)  # check passes and delay deliveries: nothing comes twice
    msgs = stored(servers, "EosBatch", 4)
    assert sorted(int(m.body) for m in msgs) == list(range(1000))
    assert all(m.properties["idx"] == m.body.decode() for m in msgs)
    assert all(eo.TXN_PROPERTY in m.properties and "TRAN_MSG" not in m.properties for m in msgs)
    delayed = [m for m in msgs if int(m.body) % 100 == 0]
    # Held by the broker's schedule (level 1: 1 s) after the COMMIT, as Apache's broker does.
    assert len(delayed) == 10 and all(m.store_timestamp - m.born_timestamp >= 1000 for m in delayed)
    by_key: dict[tuple[int, int], list[int]] = {}
    for m in msgs:
        i = int(m.body)
        if i % 100:  # a delayed row is stored again when delivered, out of its key's order
            by_key.setdefault((i % 7, i // 500), []).append(i)  # (key, partition)
    assert all(ids == sorted(ids) for ids in by_key.values())
    queues = {(i % 7): m.queue_id for m in msgs for i in [int(m.body)]}
    assert all(m.queue_id == queues[int(m.body) % 7] for m in msgs)  # a key, a queue


def test_a_failed_batch_write_is_never_visible(spark: Any, servers: GatewayServers) -> None:
    """One task fails at its last row: the job aborts and the halves the driver heard of are rolled back.
    Spark ends the Python workers of a failed job, so the failed task's halves wait (invisible) for a producer
    of the group: the next write's workers roll them back."""
    servers.create_topic("EosFailed", 2)
    df = spark.range(0, 400, numPartitions=2).selectExpr("IF(id = 399, NULL, CAST(id AS STRING)) AS body")
    with pytest.raises(Exception, match="column body is null"):
        write(spark, servers, df, "EosFailed", producerGroup="eos_failed_pg")
    time.sleep(2.5)  # check passes
    assert stored(servers, "EosFailed", 2) == []
    servers.create_topic("EosAfterFailed", 1)
    write(spark, servers, spark.range(0, 10, numPartitions=1).selectExpr("CAST(id AS STRING) AS body"),
          "EosAfterFailed", producerGroup="eos_failed_pg")  # fmt: skip
    half_queue_settles(servers)
    assert stored(servers, "EosFailed", 2) == [] and len(stored(servers, "EosAfterFailed")) == 10


def driver(servers: GatewayServers, checkpoint: Path, stop: Path, **env: str) -> subprocess.Popen[str]:
    """tests/spark/eos_stream_driver.py as a process group of its own (its JVM and Python workers)."""
    script = Path(__file__).with_name("eos_stream_driver.py")
    args = [sys.executable, str(script), servers.namesrv_addr, "EosSource", "EosSink", str(checkpoint), str(stop)]
    environ = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        SPARK_LOCAL_IP="127.0.0.1",
        **env,
    )
    return subprocess.Popen(
        args, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


def kill(proc: subprocess.Popen[str]) -> str:
    """SIGKILL the driver's whole group; its output."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    return out


# Three driver JVMs of its own (about a minute): the test, so it stays in the default suite.
def test_a_stream_killed_mid_write_and_between_decision_and_ends_resumes_exactly_once(
    servers: GatewayServers, tmp_path: Path
) -> None:
    """The issue's test: a driver killed while its tasks write, then one that dies after recording its commit
    and before ending a half; restarted from its checkpoint, every source row is in the sink once and
    nothing of the killed runs' other halves."""
    servers.create_topic("EosSource", 2)
    servers.create_topic("EosSink", 2)
    with blocking.Producer("eos_source_pg", servers.namesrv_addr) as producer:
        for i in range(1000):
            producer.send(build_message("EosSource", b"row-%d" % i, keys=f"k{i % 13}"))
    checkpoint, stop, marker = tmp_path / "checkpoint", tmp_path / "stop", tmp_path / "decided"

    # Killed while its tasks write: halves stored, nothing decided.
    halves_before = half_queue_end(servers)
    writing = driver(servers, checkpoint, stop, **{eo.EXIT_AFTER_DECISION: str(marker)})
    try:
        wait_for(lambda: half_queue_end(servers) > halves_before or marker.exists(), 120, "half messages stored")
    finally:
        out = kill(writing)
    assert not marker.exists(), out  # (if the kill came this late, the run below is the same test)

    first = driver(servers, checkpoint, stop, **{eo.EXIT_AFTER_DECISION: str(marker)})
    try:
        wait_for(lambda: marker.exists() or first.poll() is not None, 120, "the first batch's decision")
    finally:
        out = kill(first)
    assert marker.exists(), out
    assert stored(servers, "EosSink", 2) == []  # decided, but nothing ended yet

    second = driver(servers, checkpoint, stop)
    try:
        assert second.stdout is not None
        lines = [second.stdout.readline()]
        while lines[-1] and "caught up" not in lines[-1]:
            lines.append(second.stdout.readline())
        assert lines[-1], "the restarted query ended without catching up:\n" + "".join(lines)[-5000:]
        # Batch 0 is settled by the check-back once the dead driver's grace is over.
        wait_for(lambda: len(stored(servers, "EosSink", 2)) >= 1000, 30, "every row in the sink")
        time.sleep(2)  # more check passes: nothing twice
        msgs = stored(servers, "EosSink", 2)
        assert sorted(m.body for m in msgs) == sorted(b"row-%d" % i for i in range(1000))
        # The write id is the query's, read by the tasks from Spark's local properties, as is the batch.
        query_id = json.loads((checkpoint / "metadata").read_text())["id"]
        txns = [eo.parse_txn(m.properties[eo.TXN_PROPERTY]) for m in msgs]
        assert {t[0] for t in txns if t} == {query_id} and {t[1] for t in txns if t} == {0, 1, 2}
    finally:
        stop.touch()
        try:
            second.wait(30)
        finally:
            kill(second)


def test_exactly_once_signs_its_halves_ledger_and_ends_with_acl(
    spark: Any,
    acl_servers: GatewayServers,  # noqa: F811
) -> None:
    acl_servers.create_topic("EosAclTopic", 2)
    df = spark.createDataFrame([(f"secret {i}",) for i in range(50)], "body string")
    app = {"accessKey": APP.access_key, "secretKey": APP.secret_key}
    with pytest.raises(Exception, match=r"Check signature failed for accessKey=appUser01"):
        write(spark, acl_servers, df, "EosAclTopic", accessKey=APP.access_key, secretKey="wrong")
    write(spark, acl_servers, df, "EosAclTopic", **app)
    consumer = blocking.PullConsumer("eos_acl_reader", acl_servers.namesrv_addr, security=ClientSecurity(APP))
    with consumer:
        got = [
            m.body
            for q in range(2)
            for m in consumer.pull(MessageQueue("EosAclTopic", "broker-a", q), "*", 0, 64).messages
        ]
    assert sorted(got) == sorted(b"secret %d" % i for i in range(50))


def test_exactly_once_over_mutual_tls(
    spark: Any,
    tls_servers: GatewayServers,  # noqa: F811
    pki: certs.DevPki,  # noqa: F811
) -> None:
    context = tls_context(pki)
    assert call(tls_servers.broker_addr, create_topic_request("EosTlsTopic", 1), tls=context).code == 0
    settings = SinkSettings.from_options({"namesrvAddr": tls_servers.namesrv_addr, **pki.client_properties()})
    wait_for(lambda: routed(settings, "EosTlsTopic"), 10, "the topic routed")
    df = spark.createDataFrame([(f"tls {i}",) for i in range(20)], "body string")
    write(spark, tls_servers, df, "EosTlsTopic", **pki.client_properties())
    consumer = blocking.PullConsumer("eos_tls_reader", tls_servers.namesrv_addr, security=ClientSecurity(
        tls=TlsConfig.from_properties(pki.client_properties(), "test")))  # fmt: skip
    with consumer:
        got = consumer.pull(MessageQueue("EosTlsTopic", "broker-a", 0), "*", 0, 64).messages
    assert sorted(m.body for m in got) == sorted(b"tls %d" % i for i in range(20))


def routed(settings: SinkSettings, topic: str) -> bool:
    try:
        rq.route(settings.connection(topic))
        return True
    except rq.SourceError:
        return False


def test_the_decision_hook_exits_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(eo.EXIT_AFTER_DECISION, str(tmp_path / "done"))
    (tmp_path / "done").write_text("1")
    eo.record_decision_hook()  # the marker exists: no exit
