"""python -m spark.trace_ingest on real Spark against our broker, fed by our client with tracing on: a
traced producer and transactional producer, and a traced push consumer that fails one message once. The
Parquet tables hold exactly the records those calls made; the report's latencies agree with the send and
consume times the test saw; the retry, the never-consumed messages and the transaction outcomes are there.
The streaming mode, run twice from the command line, resumes from its checkpoint without duplicates."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from compat_tests.servers import GatewayServers
from gateway.client import ConsumeStatus, LocalTransactionState, blocking, build_message
from gateway.remoting.message import MessageConst, decode_records
from gateway.remoting.names import TRACE_TOPIC
from spark import queues as rq
from spark.trace_ingest import ingest_batch, ingest_stream, report
from spark.trace_parser import RECORD_ID, TRACE_COLUMNS, rows
from tests.trace.conftest import golden_trace_messages, java5_trace_bodies

from .conftest import ROOT

pytestmark = pytest.mark.spark
NAMES = [name for name, _ in TRACE_COLUMNS]


def now_ms() -> int:
    return int(time.time() * 1000)


def trace_types(servers: GatewayServers, topic: str = TRACE_TOPIC) -> Counter[str]:
    """Records in the trace topic now, by type (read over the wire, as the job does)."""
    settings = rq.Settings.from_options({"namesrvAddr": servers.namesrv_addr, "topic": topic})
    qs = rq.queues(settings)
    ends = rq.queue_offsets(settings, qs, "latest")
    found: Counter[str] = Counter()
    for q in qs:
        for body in rq.read_range(settings, q, 0, ends[q.broker][str(q.queue_id)]):
            found.update(r[0] for r in rows((m.client_msg_id, m.body) for m in decode_records(body)))
    return found


class Decide:
    def __init__(self) -> None:
        self.states = {
            b"commit": LocalTransactionState.COMMIT_MESSAGE,
            b"rollback": LocalTransactionState.ROLLBACK_MESSAGE,
        }

    def execute_local_transaction(self, msg: Any, arg: Any) -> LocalTransactionState:
        return self.states[msg.body]

    def check_local_transaction(self, msg: Any) -> LocalTransactionState:
        return self.states[msg.body]


def traffic(servers: GatewayServers, tag: str) -> dict[str, Any]:
    """Traced sends and consumes; what the test saw of them."""
    a, b = f"TraceIngestA{tag}", f"TraceIngestB{tag}"
    servers.create_topic(a, 2)
    servers.create_topic(b, 1)
    consumed: dict[tuple[str, int], int] = {}
    lock = threading.Lock()

    def listener(msgs: list[Any]) -> ConsumeStatus:
        m = msgs[0]
        with lock:
            consumed[(m.client_msg_id, m.reconsume_times)] = now_ms()
        if m.keys == "a-3" and m.reconsume_times == 0:
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS

    group = f"ingest_cg{tag}"
    consumer = blocking.PushConsumer(group, servers.namesrv_addr, enable_msg_trace=True)
    consumer.subscribe(a, "*")
    consumer.register_message_listener(listener)
    consumer.start()
    sends: dict[str, tuple[int, int]] = {}
    try:
        with blocking.Producer(f"ingest_pg{tag}", servers.namesrv_addr, enable_msg_trace=True) as producer:
            for topic, n, prefix in ((a, 10, "a"), (b, 3, "b")):
                for i in range(n):
                    t0 = now_ms()
                    r = producer.send(build_message(topic, b"%d" % i, tags="T", keys=f"{prefix}-{i}"))
                    sends[r.msg_id] = (t0, now_ms())
        with blocking.TransactionProducer(
            f"ingest_tpg{tag}", servers.namesrv_addr, transaction_listener=Decide(), enable_msg_trace=True
        ) as tx:
            outcomes = {
                body: tx.send_message_in_transaction(build_message(a, body, keys="tx"))
                for body in (b"commit", b"rollback")
            }
        deadline = time.monotonic() + 30
        while len(consumed) < 12:  # 10 + the committed one + key a-3 again
            assert time.monotonic() < deadline, f"consumed {len(consumed)} of 12"
            time.sleep(0.1)
    finally:
        consumer.shutdown()
    return {"a": a, "b": b, "group": group, "sends": sends, "consumed": consumed, "tx": outcomes}


def test_batch_ingest_writes_the_records_and_a_report_that_matches_what_happened(
    spark: Any, servers: GatewayServers, tmp_path: Path
) -> None:
    seen = traffic(servers, "1")
    want = Counter({"Pub": 15, "SubBefore": 12, "SubAfter": 12, "EndTransaction": 2})
    deadline = time.monotonic() + 20
    while trace_types(servers) != want:
        assert time.monotonic() < deadline, f"trace topic holds {trace_types(servers)}"
        time.sleep(0.2)
    out = tmp_path / "out"
    ingest_batch(spark, {"namesrvAddr": servers.namesrv_addr, "topic": TRACE_TOPIC}, out)
    tables = report(spark, out)

    traces = spark.read.parquet(str(out / "traces"))
    assert Counter({r.traceType: r["count"] for r in traces.groupBy("traceType").count().collect()}) == want
    by_topic = Counter((r.topic, r.traceType) for r in traces.select("topic", "traceType").collect())
    assert by_topic[(seen["a"], "SubBefore")] == 12 and by_topic[(seen["b"], "Pub")] == 3  # Sub records got their topic
    assert {p.name for p in (out / "traces").glob("date=*")} == {time.strftime("date=%Y-%m-%d", time.gmtime())}
    assert spark.read.parquet(str(out / "errors")).count() == 0

    # Per message: store time (Pub timestamp + cost/2) within the send; first SubBefore at most when the
    # listener ran; so the latency the job computed lies between what the test can bound it by.
    pubs = {r.msgId: r for r in traces.filter("traceType = 'Pub'").collect()}
    firsts = {}
    for r in traces.filter("traceType = 'SubBefore' AND retryTimes = 0").collect():
        firsts[r.msgId] = r.timestampMs
    latencies = []
    for msg_id, (t0, t1) in seen["sends"].items():
        store = pubs[msg_id].timestampMs + pubs[msg_id].costTime // 2
        assert t0 <= store <= t1
        if msg_id in firsts:
            seen_at = seen["consumed"][(msg_id, 0)]
            assert seen_at - 50 <= firsts[msg_id] <= seen_at
            latencies.append(firsts[msg_id] - store)
    row = next(r for r in tables["latency"] if r["topic"] == seen["a"] and r["consumerGroup"] == seen["group"])
    assert (row["messages"], row["failedConsumes"], row["retries"], row["consumeCalls"]) == (11, 1, 1, 12)
    assert min(latencies) <= row["latencyP50Ms"] <= row["latencyP95Ms"] <= row["latencyP99Ms"] <= max(latencies) + 1000
    never = {r["msgId"] for r in tables["never_consumed"]}
    b_ids = {m for m, _ in seen["sends"].items() if pubs[m].topic == seen["b"]}
    assert never == b_ids  # the rolled-back message is not "never consumed"
    assert {(r["transactionState"], r["count"]) for r in tables["transactions"]} == {
        ("COMMIT_MESSAGE", 1),
        ("ROLLBACK_MESSAGE", 1),
    }
    report_dir = out / "report"
    assert (report_dir / "latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = (report_dir / "summary.txt").read_text()
    assert seen["a"] in summary and "published, never consumed: 3" in summary
    assert (report_dir / "latency.csv").read_text().startswith("topic,consumerGroup,messages")


def test_streaming_ingest_from_the_command_line_resumes_without_duplicates(
    spark: Any, servers: GatewayServers, tmp_path: Path
) -> None:
    """The command line's first streaming run, then a restart from its checkpoint (in this process's
    Spark session, to spare a second JVM) after more traces arrived."""
    out = tmp_path / "out"
    command = [
        sys.executable, "-m", "spark.trace_ingest", "--namesrv", servers.namesrv_addr, "--out", str(out),
        "--stream", "--available-now", "--max-records", "2", "--master", "local[2]",
    ]  # fmt: skip
    traffic(servers, "2")
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "batch 1:" in done.stdout and "trace records:" in done.stdout  # more than one micro-batch
    stored_before = Counter(r["traceType"] for r in pq.read_table(out / "traces").to_pylist())
    with blocking.Producer("ingest_pg_more", servers.namesrv_addr, enable_msg_trace=True) as producer:
        for i in range(5):  # new traces after the first run: the restart reads only these
            producer.send(build_message("TraceIngestB2", b"more %d" % i, keys=f"more-{i}"))
    want = trace_types(servers)
    ingest_stream(spark, {"namesrvAddr": servers.namesrv_addr, "topic": TRACE_TOPIC}, out, True, 1)

    table = pq.read_table(out / "traces").to_pylist()
    keys = Counter((r["traceMsgId"], r["traceType"], r["msgId"], r["requestId"], r["timestampMs"]) for r in table)
    assert not [k for k, n in keys.items() if n > 1], "duplicate records after the restart"
    assert Counter(r["traceType"] for r in table) == want
    assert Counter(r["traceType"] for r in table)["Pub"] == stored_before["Pub"] + 5


def unique_records(bodies: list[bytes]) -> Counter[str]:
    """Record types of ``bodies``, each distinct record (RECORD_ID) once: what the job must write."""
    seen = {}
    for r in rows(("-", b) for b in bodies):
        record = dict(zip(NAMES, r, strict=True))
        assert record["error"] is None, record
        seen[tuple(record[k] for k in RECORD_ID)] = record["traceType"]
    return Counter(seen.values())


def test_every_clients_records_once_though_trace_messages_and_records_come_twice(
    spark: Any, servers: GatewayServers, tmp_path: Path
) -> None:
    """A custom trace topic holding the Java 4.9.8 and 5.3.3 clients' real trace messages and ours (live), where
    one trace message is stored twice (the dispatcher's producer resent it: same msgId) and one record is in two
    trace messages: batch and streaming ingestion (the copies in different micro-batches) write each record once,
    no error rows, and the report counts each consume call and transaction once."""
    topic = "TraceTopicAllClients"
    servers.create_topic(topic, 1)
    java4 = [(m.client_msg_id, m.body) for m in golden_trace_messages()]
    bodies = [b for _, b in java4 + java5_trace_bodies()]
    sent = []
    with blocking.Producer("all_pg", servers.namesrv_addr, enable_msg_trace=True, custom_trace_topic=topic) as p:
        servers.create_topic("TraceOursTopic", 1)
        for i in range(3):
            p.send(build_message("TraceOursTopic", b"ours %d" % i, keys=f"ours-{i}"))
        # The resent trace message first and last: micro-batches of 4 trace messages read them apart.
        resent = build_message(topic, java4[2][1], keys="resent")  # the consume records of TraceCG
        # A record in two trace messages: trace-1's first Pub again, beside a record of its own.
        first_pub = java4[0][1].split(b"\x02")[0] + b"\x02"
        extra = first_pub.replace(b"TracePG", b"OtherPG")
        for msg in [
            resent,
            *(build_message(topic, b) for _, b in java4[:2] + java4[3:] + java5_trace_bodies()),
            build_message(topic, first_pub + extra),
            resent,
        ]:
            assert p.send(msg).msg_id == msg.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX]
            sent.append(msg.body)
    ours = Counter({"Pub": 3})
    stored_want = Counter(r[0] for r in rows(("-", b) for b in sent)) + ours
    deadline = time.monotonic() + 20
    while trace_types(servers, topic) != stored_want:  # ours arrive within the dispatcher's 500 ms
        assert time.monotonic() < deadline, f"trace topic holds {trace_types(servers, topic)}"
        time.sleep(0.2)
    want = unique_records([*bodies, extra]) + ours
    assert stored_want["SubBefore"] == want["SubBefore"] + 6 and stored_want["Pub"] == want["Pub"] + 1
    assert want["Recall"] == 1 and want["EndTransaction"] == 2
    options = {"namesrvAddr": servers.namesrv_addr, "topic": topic}

    for mode in ("batch", "stream"):
        out = tmp_path / mode
        if mode == "batch":
            ingest_batch(spark, options, out)
        else:
            ingest_stream(spark, {**options, "maxRecordsPerTrigger": "4"}, out, True, 1)
            assert (out / "_checkpoint" / "state").is_dir()  # what the command line looks for on a restart
        table = pq.read_table(out / "traces").to_pylist()
        assert Counter(r["traceType"] for r in table) == want, mode
        ids = Counter(tuple(r[k] for k in RECORD_ID) for r in table)
        assert not [k for k, n in ids.items() if n > 1], f"{mode}: duplicate records"
        assert not (out / "errors").exists() or not pq.read_table(out / "errors").num_rows, mode
    tables = report(spark, tmp_path / "batch")  # the report reads the records written: the stream's are the same
    trace_cg = next(r for r in tables["latency"] if r["consumerGroup"] == "TraceCG")
    assert (trace_cg["topic"], trace_cg["consumeCalls"], trace_cg["failedConsumes"]) == ("TraceTopicA", 7, 1)
    assert sorted((r["topic"], r["transactionState"], r["count"]) for r in tables["transactions"]) == [
        ("Java5Traced", "COMMIT_MESSAGE", 1),
        ("TraceTopicA", "COMMIT_MESSAGE", 1),
    ]
    never = {r["msgId"] for r in tables["never_consumed"] if r["topic"] == "Java5Traced"}
    recalled = next(r["msgId"] for r in table if r["traceType"] == "Recall")
    assert recalled not in never and len(never) == 6  # 5 sends and the transactional one: no SubBefore
    summary = (tmp_path / "batch" / "report" / "summary.txt").read_text()
    assert summary.startswith("trace records: Pub 17, SubBefore 9, SubAfter 9, EndTransaction 2, Recall 1\n")


def test_command_line_refuses_a_bad_dedup_window_and_a_checkpoint_without_dedup_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both end in one line and exit 2, before a Spark session starts."""
    from spark.trace_ingest import main

    base = ["--namesrv", "127.0.0.1:1", "--out", str(tmp_path), "--stream"]
    with pytest.raises(SystemExit) as e:
        main([*base, "--dedup-window", "soon"])
    assert e.value.code == 2 and "'soon' is not an interval such as '10 minutes'" in capsys.readouterr().err
    (tmp_path / "_checkpoint" / "commits").mkdir(parents=True)
    (tmp_path / "_checkpoint" / "commits" / "0").write_text("v1\n{}\n")
    assert main(base) == 2
    assert capsys.readouterr().err == (
        f"error: {tmp_path / '_checkpoint'} was written without record de-duplication: use a new --out\n"
    )
