"""The official Java client (``ROCKETMQ_JAVA_CLASSPATH``) against three of our brokers in one DLedger group, the
leader SIGKILLed under its load (issue 27): sync sends one after another (compat_tests/java_failover/), each
SendResult printed; the client finds the new master when its route update names it (``pollNameServerInterval``,
30 s by default). Every acknowledged message is read back exactly once at the queue and offset its SendResult
named; duplicates (a failed attempt that was stored, then sent again) and the failover gap are printed."""

from __future__ import annotations

import itertools
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from gateway.remoting.codes import ResponseCode
from gateway.remoting.message import MessageExt, decode_records
from tests.broker.dledger_group import QUEUES, TOPIC, Group, bootstrap, settled_route
from tests.broker.test_broker_server import pull_request
from tests.ha.procs import until

from .java_producer import CLASSPATH, JavaProducer, compile_producer
from .servers import call

if not CLASSPATH:
    pytest.skip(
        "Java client not given: set ROCKETMQ_JAVA_CLASSPATH to the official client's jars", allow_module_level=True
    )

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_producer(tmp_path_factory.mktemp("java-failover"))


def read_back(addr: str) -> list[MessageExt]:
    """Every message of TOPIC's queues on ``addr``, pulled from offset 0."""
    found = []
    for queue_id in range(QUEUES):
        offset = 0
        while (resp := call(addr, pull_request(TOPIC, queue_id, offset, sub="*", timeout_ms=0), 5)).code == (
            ResponseCode.SUCCESS
        ):
            found += decode_records(resp.body)
            offset = int(resp.ext_fields["nextBeginOffset"])
    return found


def test_java_producer_loses_no_acknowledged_message_when_the_leader_is_sigkilled(
    tmp_path: Path, classes: Path
) -> None:
    # DLedger's default timings, as an operator runs them.
    group = Group(tmp_path / "group", timings={})
    group.root.mkdir()
    try:
        group.start()
        until(lambda: group.route() or bootstrap(group), 30, "the topic routed")
        master = settled_route(group, {"n0", "n1", "n2"})[0]
        run = uuid.uuid4().hex[:10]
        producer = JavaProducer(classes, tmp_path, group.namesrv, run, TOPIC)
        try:
            until(lambda: len(producer.of("SENT")) >= 30, 60, "30 sends acknowledged to the Java producer")
            killed_at = time.time()
            group.members[group.member_at(master)].kill()
            route = until(lambda: (r := group.route()).get(0) not in (None, master) and r, 30, "a new master")
            routed = time.time() - killed_at
            acked_at_kill = len(producer.of("SENT"))
            until(lambda: len(producer.of("SENT")) >= acked_at_kill + 50, 90, "sends acknowledged by the new master")
        finally:
            err = producer.finish()
        sent = producer.of("SENT")
        assert producer.of("DONE") == [[str(len(sent))]], err[-3000:]
        held = read_back(route[0])
        by_id = Counter(m.uniq_key for m in held)
        where = {m.uniq_key: (m.queue_id, m.queue_offset) for m in held}
        lost = [i for i, msg_id, *_ in sent if msg_id not in where]
        assert not lost, f"{len(lost)} of {len(sent)} acknowledged messages lost, e.g. {lost[:5]}"
        assert all(by_id[msg_id] == 1 for _, msg_id, *_ in sent), "an acknowledged message read back twice"
        assert [(int(q), int(o)) for _, _, _, q, o, _ in sent] == [where[msg_id] for _, msg_id, *_ in sent]
        for queue_id in range(QUEUES):
            offsets = sorted(m.queue_offset for m in held if m.queue_id == queue_id)
            assert offsets == list(range(len(offsets))), queue_id
        per_index = Counter(m.body for m in held if m.body.startswith(run.encode()))
        duplicates = sum(n - 1 for n in per_index.values())
        times = [killed_at, *sorted(t for t in (int(s[5]) / 1000 for s in sent) if t > killed_at)]
        gap = max(b - a for a, b in itertools.pairwise(times))
        print(
            f"\nJava producer through a SIGKILLed DLedger leader: {len(sent)} acknowledged, 0 lost, {duplicates} "
            f"duplicates, {len(producer.of('ERROR'))} failed attempts retried; no send acknowledged for {gap:.2f} s "
            f"after the kill (the new master {group.member_at(route[0])} in the route after {routed:.2f} s)"
        )
    finally:
        group.stop()
