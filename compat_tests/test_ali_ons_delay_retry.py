"""Compatibility: ali-ons (npm ali-ons@3.12.0) with delay levels and consume retries.

``msg.delayTimeLevel`` parks messages in SCHEDULE_TOPIC_XXXX; a handler that throws makes the client send the
message back (CONSUMER_SEND_MSG_BACK, delay level 0: the broker's 3 + reconsumeTimes) and it comes back through
%RETRY%<group>. ali-ons has no transactional producer. Servers use FAST_CONFIG (level 3 = 2 s).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .test_ali_ons import PROPS, _unique, check_messages, expected, run_node

pytestmark = pytest.mark.compat


def produce(tmp_path: Path, servers: Any, topic: str, run_id: str, count: int, delay: int = 0) -> None:
    spec_file = tmp_path / f"{run_id}.jsonl"
    spec_file.write_text(
        "".join(json.dumps({"i": i, "delay": delay, **expected(run_id, i)}) + "\n" for i in range(count)),
        encoding="utf-8",
    )
    run = run_node("produce", servers, topic, _unique("ons_pg"), "--messages", spec_file)
    assert run.returncode == 0 and run.of("done")[-1]["sent"] == count, run.describe()


def consume(servers: Any, topic: str, group: str, expect: int, *extra: Any, timeout: float = 60) -> Any:
    run = run_node(
        "consume",
        servers,
        topic,
        group,
        "--expect",
        expect,
        "--linger",
        3,
        "--props",
        ",".join(PROPS),
        *extra,
        timeout=timeout,
    )
    assert run.returncode == 0 and run.of("done"), run.describe()
    return run


def test_delay_time_level_messages_arrive_after_their_delay(fast_servers, tmp_path):
    topic = _unique("OnsDelay")
    fast_servers.create_topic(topic, 4)
    run_id = _unique("delay")
    produce(tmp_path, fast_servers, topic, run_id, 10, delay=3)
    got = consume(fast_servers, topic, _unique("ons_delay"), 10)
    check_messages(got.of("msg"), run_id, range(10), topic, "delayed")
    waits = [m["storeTimestamp"] - m["bornTimestamp"] for m in got.of("msg")]
    assert min(waits) >= 2000 - 100, f"delivered before level 3 (2 s) was up: {sorted(waits)[:3]} ms"


def test_throwing_handler_gets_the_message_again_from_the_retry_topic(fast_servers, tmp_path):
    topic = _unique("OnsRetry")
    fast_servers.create_topic(topic, 4)
    group = _unique("ons_retry")
    # ali-ons creates no topics and refreshes routes every 30 s: the group's retry topic exists, as after its
    # first run.
    fast_servers.create_topic(f"%RETRY%{group}", 1)
    run_id = _unique("retry")
    produce(tmp_path, fast_servers, topic, run_id, 10)
    got = consume(fast_servers, topic, group, 10, "--fail-times", 2, timeout=90)
    check_messages(got.of("msg"), run_id, range(10), topic, "after two failures each")
    assert all(m["reconsumeTimes"] == 2 for m in got.of("msg")), got.describe()
    failed = got.of("failed")
    assert sorted(m["reconsumeTimes"] for m in failed) == [0] * 10 + [1] * 10, got.describe()
    assert all(m["topic"] == topic for m in failed), "a retried message showed the retry topic"
