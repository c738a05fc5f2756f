"""Compatibility: the official Java client 4.9.8 with delay levels (and 5.x timer properties), retries and dead
letters, TransactionMQProducer with check-back, and request/reply (CompatFeatures.java).

Runs only when ROCKETMQ_JAVA_CLASSPATH is set (see test_java.py). Servers use FAST_CONFIG: level 3 = 2 s,
transaction checks every second for halves older than 2 s.
"""

from __future__ import annotations

import subprocess

import pytest

from . import test_java
from .test_java import SUBPROCESS_SLACK, JavaRun, _unique, assert_ok, java_command, run_java

# test_java's module fixture (compiles the Java programs), under a name of this module.
classpath = test_java.java_programs

pytestmark = pytest.mark.compat


def test_delay_level(classpath, fast_servers, tmp_path):
    topic = _unique("JavaDelay")
    fast_servers.create_topic(topic, 4)
    run = run_java(
        classpath,
        tmp_path,
        "delay",
        fast_servers,
        topic,
        _unique("jdelay"),
        "--count",
        10,
        "--level",
        3,
        "--min-delay-ms",
        2000,
    )
    assert_ok(run, "delayed messages")
    assert run.value("CONSUMED") == 10 and run.value("EARLY") == 0, run.describe()


def test_timer_deliver_ms_property(classpath, fast_servers, tmp_path):
    """What a 5.x producer's setDeliverTimeMs does, set by hand: TIMER_DELIVER_MS."""
    topic = _unique("JavaTimer")
    fast_servers.create_topic(topic, 4)
    run = run_java(
        classpath,
        tmp_path,
        "delay",
        fast_servers,
        topic,
        _unique("jtimer"),
        "--count",
        10,
        "--timer-ms",
        3000,
        "--min-delay-ms",
        2900,
    )
    assert_ok(run, "timer messages")
    assert run.value("CONSUMED") == 10 and run.value("EARLY") == 0, run.describe()


def test_reconsume_later_then_success(classpath, fast_servers, tmp_path):
    topic = _unique("JavaRetry")
    fast_servers.create_topic(topic, 4)
    run = run_java(
        classpath, tmp_path, "retry", fast_servers, topic, _unique("jretry"), "--count", 10, "--fail-times", 2
    )
    assert_ok(run, "retried messages")
    assert run.value("CONSUMED") == 10 and run.value("WRONG_TOPIC") == 0, run.describe()


def test_dead_letter_queue_after_max_reconsume_times(classpath, fast_servers, tmp_path):
    topic = _unique("JavaDlq")
    fast_servers.create_topic(topic, 4)
    run = run_java(
        classpath,
        tmp_path,
        "retry",
        fast_servers,
        topic,
        _unique("jdlq"),
        "--count",
        5,
        "--fail-times",
        99,
        "--max-reconsume",
        2,
    )
    assert_ok(run, "dead letters")
    assert run.value("DLQ") == 5 and run.value("CONSUMED") == 0, run.describe()


def test_transaction_producer_commit_rollback_and_check_back(classpath, fast_servers, tmp_path):
    topic = _unique("JavaTx")
    fast_servers.create_topic(topic, 4)
    run = run_java(classpath, tmp_path, "tx", fast_servers, topic, _unique("jtx"), "--count", 30)
    assert_ok(run, "transactions")
    assert run.value("CONSUMED") == 20 and run.value("ROLLED_BACK_SEEN") == 0, run.describe()
    assert run.value("CHECKED") >= 10, run.describe()


def test_request_reply(classpath, fast_servers, tmp_path):
    topic = _unique("JavaRequest")
    fast_servers.create_topic(topic, 4)
    run = run_java(classpath, tmp_path, "request", fast_servers, topic, _unique("jreq"), "--count", 10)
    assert_ok(run, "request/reply")
    assert run.value("REPLIED") == 10, run.describe()


def run_java_restarting(classpath, tmp_path, command, servers, topic, group, *extra, timeout=120):
    """Run a sub-command with --pause-after-send; restart the servers when it has sent everything."""
    cmd, log_dir = java_command(
        classpath, tmp_path, command, servers, topic, group, "--pause-after-send", "8", *extra, timeout=timeout
    )
    lines = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            for line in proc.stdout:
                lines.append(line)
                if line.startswith("SENT_ALL"):
                    servers.restart()
                    break
            lines.extend(proc.stdout)
            stderr = proc.stderr.read()
            proc.wait(timeout + SUBPROCESS_SLACK)
        finally:
            if proc.poll() is None:
                proc.kill()
    return JavaRun(subprocess.CompletedProcess(cmd, proc.returncode, "".join(lines), stderr), log_dir)


def test_delayed_messages_survive_a_restart(classpath, fresh_fast_servers, tmp_path):
    topic = _unique("JavaDelayRestart")
    fresh_fast_servers.create_topic(topic, 4)
    run = run_java_restarting(
        classpath,
        tmp_path,
        "delay",
        fresh_fast_servers,
        topic,
        _unique("jdr"),
        "--count",
        10,
        "--level",
        5,
        "--min-delay-ms",
        2000,
    )
    assert run.lines("SENT_ALL"), run.describe()
    assert_ok(run, "delayed messages across a restart")
    assert run.value("CONSUMED") == 10, run.describe()


def test_transactions_survive_a_restart(classpath, fresh_fast_servers, tmp_path):
    """Halves left UNKNOW before the restart are checked back after it and committed once."""
    topic = _unique("JavaTxRestart")
    fresh_fast_servers.create_topic(topic, 4)
    run = run_java_restarting(classpath, tmp_path, "tx", fresh_fast_servers, topic, _unique("jtr"), "--count", 30)
    assert run.lines("SENT_ALL"), run.describe()
    assert_ok(run, "transactions across a restart")
    assert run.value("CONSUMED") == 20 and run.value("ROLLED_BACK_SEEN") == 0, run.describe()
