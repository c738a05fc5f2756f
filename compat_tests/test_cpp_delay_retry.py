"""Compatibility: the Apache C++ client (PyPI rocketmq==0.4.4) with delay levels and consume retries.

``Message.set_delay_time_level`` parks messages in SCHEDULE_TOPIC_XXXX; a push-consumer callback that raises
answers RECONSUME_LATER, which the client turns into CONSUMER_SEND_MSG_BACK, and the message comes back
through %RETRY%<group>. The 0.4.4 wrapper has no transactional producer. Servers use FAST_CONFIG (level 3 =
2 s) except for the test marked slow, which runs at RocketMQ's default levels (the first retry after 10 s).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from gateway.remoting.codes import RequestCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import TopicQueueRequestHeader
from gateway.remoting.names import SCHEDULE_TOPIC

from .servers import call
from .test_cpp_client import Background, _unique, check_messages, consume, run_cpp

pytestmark = pytest.mark.compat


def produce_delayed(tmp_path: Path, servers: Any, topic: str, run_id: str, count: int, level: int) -> None:
    run = run_cpp(
        tmp_path / "home-producer",
        "produce",
        servers,
        topic,
        _unique("cpp_pg"),
        "--run",
        run_id,
        "--count",
        count,
        "--delay-level",
        level,
    )
    assert run.returncode == 0 and run.of("done")[-1]["sent"] == count, run.describe()


def produce(tmp_path: Path, servers: Any, topic: str, run_id: str, count: int) -> None:
    produce_delayed(tmp_path, servers, topic, run_id, count, 0)


def schedule_max_offset(servers: Any, level: int) -> int:
    """How many messages ever waited at delay ``level``: SCHEDULE_TOPIC_XXXX's queue ``level - 1``."""
    header = TopicQueueRequestHeader(topic=SCHEDULE_TOPIC, queue_id=level - 1)
    resp = call(servers.broker_addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, header.encode()))
    assert resp.code == 0, resp.remark
    return int(resp.ext_fields["offset"])


def retrying_group(servers: Any, prefix: str) -> str:
    """A group whose retry topic exists, as after the group's first run.

    This client looks up its topics' routes at start only (its periodic refresh fails without ACL
    credentials: "didn't get the session_credentials"), so it would never see a retry topic the broker
    creates at its first heartbeat, with Apache's broker as with ours.
    """
    group = _unique(prefix)
    servers.create_topic(f"%RETRY%{group}", 1)
    return group


def test_delay_level_messages_arrive_after_their_delay(fast_servers, tmp_path):
    topic = _unique("CppDelay")
    fast_servers.create_topic(topic, 4)
    run_id = _unique("delay")
    produce_delayed(tmp_path, fast_servers, topic, run_id, 10, level=3)
    got = consume(tmp_path, fast_servers, topic, _unique("cpp_delay"), 10)
    check_messages(got.messages, run_id, range(10), topic, "delayed")
    waits = [m["store_timestamp"] - m["born_timestamp"] for m in got.messages]
    assert min(waits) >= 2000 - 100, f"delivered before level 3 (2 s) was up: {sorted(waits)[:3]} ms"
    assert all(m["reconsume_times"] == 0 for m in got.messages)


def test_raising_callback_gets_the_message_again_from_the_retry_topic(fast_servers, tmp_path):
    topic = _unique("CppRetry")
    fast_servers.create_topic(topic, 4)
    run_id = _unique("retry")
    produce(tmp_path, fast_servers, topic, run_id, 10)
    group = retrying_group(fast_servers, "cpp_retry")
    got = consume(tmp_path, fast_servers, topic, group, 10, "--fail-times", 1, timeout=90)
    check_messages(got.messages, run_id, range(10), topic, "after one failure each")
    assert got.of("failed") and all(m["reconsume_times"] == 0 for m in got.of("failed")), got.describe()
    assert all(m["reconsume_times"] == 1 for m in got.messages), got.describe()


def test_delays_and_retries_survive_broker_restarts(fresh_fast_servers, tmp_path):
    """Restarts while delayed messages and retries are parked: each arrives once, none is lost."""
    servers = fresh_fast_servers
    topic = _unique("CppRestart")
    servers.create_topic(topic, 4)
    delayed, retried = _unique("delayed"), _unique("retried")
    produce_delayed(tmp_path, servers, topic, delayed, 10, level=3)
    servers.restart()  # the delayed messages are still in SCHEDULE_TOPIC_XXXX
    group = retrying_group(servers, "cpp_restart")
    consumer = Background(tmp_path / "home-bg", servers, topic, group, "--fail-times", 1, timeout=120)
    try:
        consumer.wait_started()
        produce(tmp_path, servers, topic, retried, 10)
        # Every first attempt (both runs) fails and goes back to the broker, to wait at level 3 behind the 10
        # delayed messages. Restart only once all 20 are stored: this client (0.4.4) drops a message whose
        # CONSUMER_SEND_MSG_BACK fails, so a send-back cut by the restart would lose it, with Apache's broker too.
        parked = 10 + 20
        deadline = time.monotonic() + 30
        while schedule_max_offset(servers, level=3) < parked:
            assert time.monotonic() < deadline, f"{schedule_max_offset(servers, level=3)} of {parked} parked"
            time.sleep(0.2)
        servers.restart()  # the retries are parked now
        # This client fails the pulls the restart cut only when they time out (30 s); then it pulls again.
        deadline = time.monotonic() + 90
        while len([e for e in consumer.events() if e["event"] == "msg"]) < 20 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3)  # room for a duplicate to show up
    finally:
        run = consumer.finish()
    arrived = sorted((m["props"]["run"] == retried, int(m["props"]["idx"]), m["reconsume_times"]) for m in run.messages)
    assert len(run.messages) >= 20, (
        f"not everything came back after the restart: (retried?, index, reconsume_times) {arrived}; "
        f"{len(run.of('failed'))} failed\n{run.describe()}\n--- servers ---\n{''.join(servers.output[-60:])}"
    )
    for run_id in (delayed, retried):
        check_messages([m for m in run.messages if m["props"]["run"] == run_id], run_id, range(10), topic, run_id)


@pytest.mark.slow
def test_retry_at_rocketmq_default_delay_levels(servers, tmp_path):
    """RocketMQ's default levels: the first retry (level 3) comes 10 s after the failure, not before."""
    topic = _unique("CppRetrySlow")
    servers.create_topic(topic, 2)
    run_id = _unique("slow")
    produce(tmp_path, servers, topic, run_id, 3)
    got = consume(tmp_path, servers, topic, retrying_group(servers, "cpp_slow"), 3, "--fail-times", 1, timeout=90)
    check_messages(got.messages, run_id, range(3), topic, "retried at the default level")
    waits = [m["store_timestamp"] - m["born_timestamp"] for m in got.messages]
    assert min(waits) >= 10_000, f"retried before level 3 (10 s): {waits}"
