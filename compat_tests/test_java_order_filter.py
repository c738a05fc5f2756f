"""The official Java client 4.9.8 against our servers: SQL92 subscriptions (MessageSelector.bySql), orderly push
consumers with ordered sends (MessageListenerOrderly, MessageQueueSelector) and broadcasting.

Runs only when ROCKETMQ_JAVA_CLASSPATH is set (see test_java.py, whose helpers compile and run
compat_tests/java/CompatMain.java).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .servers import GatewayServers
from .test_java import COUNT, _unique, assert_ok, java_programs, produce_all_modes, run_java

__all__ = ["java_programs"]  # the fixture, used by name below

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServers]:
    """A broker that evaluates SQL92 (enablePropertyFilter), as Apache needs for bySql subscriptions."""
    s = GatewayServers(tmp_path_factory.mktemp("gateway-java-sql"), {"enablePropertyFilter": "true"}).start()
    yield s
    s.close()


def test_sql92_push_and_lite_pull(java_programs, servers, tmp_path):
    """bySql selects on user properties and TAGS, for the push and the lite pull consumer alike."""
    topic = _unique("CompatJavaSql")
    servers.create_topic(topic, 4)
    run_id = _unique("r")
    produce_all_modes(java_programs, tmp_path, servers, topic, run_id)
    sql = f"compatRun = '{run_id}' AND (compatMode IN ('sync', 'oneway') OR TAGS = 'TagBatch') AND compatIndex >= 0"
    for command in ("push", "litepull"):
        run = run_java(
            java_programs,
            tmp_path,
            command,
            servers,
            topic,
            _unique("compat_sql"),
            "--count",
            COUNT,
            "--run-id",
            run_id,
            "--sql",
            sql,
            "--expect-modes",
            "sync,oneway,batch",
            "--grace",
            2,
        )
        assert_ok(run, f"SQL92 {command} consumer")
        assert run.value("CONSUMED") == COUNT * 3, run.describe()


def test_bad_sql92_fails_consumer_start(java_programs, servers, tmp_path):
    """CHECK_CLIENT_CONFIG answers 23 and DefaultMQPushConsumer.start() throws, as against Apache."""
    topic = _unique("CompatJavaBadSql")
    servers.create_topic(topic, 1)
    run = run_java(
        java_programs,
        tmp_path,
        "push",
        servers,
        topic,
        _unique("compat_badsql"),
        "--count",
        1,
        "--sql",
        "compatIndex >>",
        timeout=40,
    )
    assert run.returncode == 1 and "CODE: 23" in run.stdout, run.describe()


def test_orderly_consumers_keep_order(java_programs, servers, tmp_path):
    """Two orderly members (the second joins halfway) consume every key's messages in send order, never the
    same queue at once, each message once."""
    topic = _unique("CompatJavaOrder")
    servers.create_topic(topic, 4, order=True)
    run = run_java(
        java_programs,
        tmp_path,
        "orderly",
        servers,
        topic,
        _unique("compat_order"),
        "--keys",
        8,
        "--per-key",
        40,
        timeout=120,
    )
    assert_ok(run, "orderly consumers")
    assert run.value("ORDERED") == 8 and run.value("OVERLAPS") == 0, run.describe()


def test_broadcasting_consumers(java_programs, servers, tmp_path):
    """Two BROADCASTING members of one group each get every message once."""
    topic = _unique("CompatJavaBroadcast")
    servers.create_topic(topic, 4)
    run_id = _unique("r")
    produce_all_modes(java_programs, tmp_path, servers, topic, run_id)
    run = run_java(
        java_programs,
        tmp_path,
        "broadcast",
        servers,
        topic,
        _unique("compat_bc"),
        "--count",
        COUNT,
        "--run-id",
        run_id,
    )
    assert_ok(run, "broadcasting consumers")
    assert run.lines("CONSUMED A") == [f"CONSUMED A {COUNT * 4}"], run.describe()
    assert run.lines("CONSUMED B") == [f"CONSUMED B {COUNT * 4}"], run.describe()
