"""Compatibility tests: Apache RocketMQ 5.x's Java remoting client in POP mode against our servers.

The programs in compat_tests/java5/ use only the client's public API: a DefaultMQPushConsumer with
``setClientRebalance(false)`` asks the broker for its queues (QUERY_ASSIGNMENT) and, once the group's request
mode is POP (SET_MESSAGE_REQUEST_MODE through DefaultMQAdminExt, what ``mqadmin setConsumeMode -m POP`` does),
pops, acks, and on a listener failure changes the message's invisible time so it comes back later.

The 5.x client is in no package registry: ROCKETMQ5_JAVA_CLASSPATH (colon separated) names its jars, with the
tools' (DefaultMQAdminExt and mqadmin's MQAdminStartup).
"""

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from gateway.client import blocking, build_message

from .servers import GatewayServers, jdk_tool

CLASSPATH_ENV = "ROCKETMQ5_JAVA_CLASSPATH"
JAVA_CLASSPATH = os.environ.get(CLASSPATH_ENV, "").strip()

if not JAVA_CLASSPATH:
    pytest.skip(
        "RocketMQ 5.x Java client not given: set ROCKETMQ5_JAVA_CLASSPATH to its jars",
        allow_module_level=True,
    )

pytestmark = pytest.mark.compat

JAVA_DIR = Path(__file__).resolve().parent / "java5"
PROGRAM_TIMEOUT = 60  # seconds, enforced by the Java program itself (exit 3)
SUBPROCESS_SLACK = 30
COMPILE_TIMEOUT = 180
# The client's first pop retry delay (DefaultMQPushConsumerImpl.popDelayLevel[0]): a failed message's new
# invisible time.
FIRST_RETRY_DELAY_MS = 10_000


@pytest.fixture(scope="module")
def java5(tmp_path_factory):
    """Compile the programs once per module; return the runtime classpath."""
    out = tmp_path_factory.mktemp("java5-classes")
    sources = sorted(str(p) for p in JAVA_DIR.glob("*.java"))
    assert sources, f"no Java sources in {JAVA_DIR}"
    try:
        javac = jdk_tool("javac")
    except FileNotFoundError as e:
        pytest.fail(f"{CLASSPATH_ENV} is set but {e}")
    cmd = [javac, "-encoding", "UTF-8", "-nowarn", "-d", str(out), "-cp", JAVA_CLASSPATH, *sources]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT)
    assert proc.returncode == 0, f"javac failed:\n{proc.stdout}\n{proc.stderr}"
    return str(out) + os.pathsep + JAVA_CLASSPATH


@pytest.fixture(scope="module")
def sql_servers(tmp_path_factory):
    """Servers whose broker evaluates SQL92 filters (enablePropertyFilter), shared by this module."""
    s = GatewayServers(tmp_path_factory.mktemp("gateway-sql"), {"enablePropertyFilter": "true"}).start()
    yield s
    s.close()


def _unique(prefix):
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def start(classpath, command, servers, topic, group, *extra):
    """Start ``Pop5Main command`` in the background."""
    cmd = [jdk_tool("java"), "-Xmx256m", "-cp", classpath, "Pop5Main", command]
    cmd += ["--namesrv", servers.namesrv_addr, "--topic", topic, "--group", group]
    cmd += ["--timeout", str(PROGRAM_TIMEOUT), *map(str, extra)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc):
    """Wait for a started program; return its stdout lines, failing the test with its output if it failed."""
    try:
        stdout, stderr = proc.communicate(timeout=PROGRAM_TIMEOUT + SUBPROCESS_SLACK)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        pytest.fail(f"{proc.args[5]} did not finish: {stdout}")
    lines = stdout.splitlines()
    assert proc.returncode == 0 and "OK" in lines, (
        f"{proc.args[5]}: exit {proc.returncode}\n{stdout}\n--- stderr ---\n{stderr[-4000:]}"
    )
    return lines


def run(classpath, command, servers, topic, group, *extra):
    """Run ``Pop5Main command`` to its end; return its stdout lines."""
    return finish(start(classpath, command, servers, topic, group, *extra))


def mqadmin(classpath, *args):
    """Run the 5.x mqadmin (MQAdminStartup); return its stdout lines."""
    cmd = [jdk_tool("java"), "-Xmx256m", "-cp", classpath, "org.apache.rocketmq.tools.command.MQAdminStartup"]
    proc = subprocess.run([*cmd, *map(str, args)], capture_output=True, text=True, timeout=PROGRAM_TIMEOUT)
    # mqadmin exits 0 when a command fails: it prints "<Command>SubCommand command failed" and the trace.
    assert proc.returncode == 0 and "command failed" not in proc.stderr, (
        f"mqadmin {args}:\n{proc.stdout}\n{proc.stderr}"
    )
    return proc.stdout.splitlines()


def value(lines, name):
    """The integer after ``name`` on its line."""
    found = [line.split()[1] for line in lines if line.startswith(name + " ")]
    assert found, f"no {name} line in {lines}"
    return int(found[-1])


def got(lines):
    """The keys the listener accepted, each with its reconsume times."""
    return {line.split()[1]: int(line.split()[2]) for line in lines if line.startswith("GOT ")}


def pop_mode(java5, servers, topic, group):
    """Switch the group to POP on our broker as an operator would, through the 5.x admin API."""
    assert "MODE POP" in run(java5, "setmode", servers, topic, group, "--broker", servers.broker_addr)


def test_pop_consumer_gets_and_acks_what_both_generations_sent(java5, servers):
    """A 5.x producer and a 4.x-protocol producer fill a topic; the pop consumer gets every message of its tag once,
    intact, by pop (each delivery carries a checkpoint), and acked ones stay acked past their invisible time."""
    topic, group, run_id = _unique("Pop5Java"), _unique("pop5_group"), _unique("r")
    servers.create_topic(topic, 4)
    assert value(run(java5, "produce", servers, topic, "-", "--count", 20, "--run-id", run_id), "SENT") == 20
    with blocking.Producer("pop5_py_producer", servers.namesrv_addr) as producer:
        for i in range(20, 45):
            key = f"{run_id}-{i}"
            # The consumer subscribes to TagA: the last five must never reach its listener.
            tag = "TagA" if i < 40 else "TagB"
            msg = build_message(topic, f"body {key} ✓".encode(), tags=tag, keys=key, properties={"index": str(i)})
            producer.send(msg)
    pop_mode(java5, servers, topic, group)

    # Invisible time 5 s, the client's minimum: an unacked message would be back while the next member watches.
    lines = run(java5, "pop", servers, topic, group, "--count", 40, "--run-id", run_id, "--invisible", 5000)
    assert value(lines, "CONSUMED") == 40, lines
    assert value(lines, "DUPLICATES") == 0, lines
    assert value(lines, "POPPED") == 40, lines
    assert not [line for line in lines if line.startswith("MISMATCH")], lines

    # 5.x mqadmin consumerProgress: the pop group has consumed every queue to its end (TagB ones included).
    rows = [line.split() for line in mqadmin(java5, "consumerProgress", "-n", servers.namesrv_addr, "-g", group)]
    queues = [row for row in rows if row and row[0] == topic]
    assert len(queues) == 4, rows
    assert sum(int(row[3]) for row in queues) == 45 and all(row[3] == row[4] and row[5] == "0" for row in queues), rows
    assert ["Consume", "Diff", "Total:", "0"] in rows, rows

    # A new member of the group finds nothing left in 6 s: every message was acked.
    lines = run(java5, "pop", servers, topic, group, "--count", 0, "--run-id", run_id, "--timeout", 6)
    assert value(lines, "CONSUMED") == 0, lines


def test_listener_exception_redelivers_after_invisible_time(java5, servers):
    """The listener throws on one message: the client changes its invisible time to its first retry delay, after
    which the broker delivers it again (at the client's next pop: like Apache's, a held pop of the topic is not
    woken by the revive into the retry topic), counted as a reconsume; the others are consumed once."""
    topic, group, run_id = _unique("Pop5JavaRetry"), _unique("pop5_retry"), _unique("r")
    servers.create_topic(topic, 2)
    run(java5, "produce", servers, topic, "-", "--count", 5, "--run-id", run_id)
    pop_mode(java5, servers, topic, group)

    fail_key = f"{run_id}-2"
    lines = run(java5, "pop", servers, topic, group, "--count", 5, "--run-id", run_id, "--fail-key", fail_key)
    assert value(lines, "CONSUMED") == 5, lines
    assert value(lines, "DUPLICATES") == 0, lines
    redelivered = [line.split() for line in lines if line.startswith("REDELIVERED ")]
    assert len(redelivered) == 1 and redelivered[0][1] == fail_key, lines
    waited_ms, attempts = int(redelivered[0][2]), int(redelivered[0][3])
    assert waited_ms >= FIRST_RETRY_DELAY_MS - 1000, lines
    assert attempts == 1, lines


def test_sql_filter_selects_what_the_pop_consumer_gets(java5, sql_servers):
    """A pop consumer subscribed by an SQL92 expression gets exactly the matching messages (the broker filters:
    the client filters only tags), and the acked ones do not come back."""
    topic, group, run_id = _unique("Pop5JavaSql"), _unique("pop5_sql"), _unique("r")
    sql_servers.create_topic(topic, 2)
    run(java5, "produce", sql_servers, topic, "-", "--count", 10, "--run-id", run_id)
    pop_mode(java5, sql_servers, topic, group)

    sql = ("--sql", "index BETWEEN 3 AND 6")
    lines = run(java5, "pop", sql_servers, topic, group, "--count", 4, "--run-id", run_id, *sql, "--invisible", 5000)
    assert sorted(got(lines)) == [f"{run_id}-{i}" for i in range(3, 7)], lines
    assert value(lines, "DUPLICATES") == 0, lines
    lines = run(java5, "pop", sql_servers, topic, group, "--count", 0, "--run-id", run_id, *sql, "--timeout", 6)
    assert value(lines, "CONSUMED") == 0, lines


def test_broker_restart_keeps_acks_and_brings_back_the_unacked(java5, fresh_servers):
    """Nine messages acked and one left unacked by a failing listener; after a broker restart a new member of the
    group gets only the unacked one, counted as a reconsume, and none of the acked."""
    topic, group, run_id = _unique("Pop5JavaRestart"), _unique("pop5_restart"), _unique("r")
    fresh_servers.create_topic(topic, 2)
    run(java5, "produce", fresh_servers, topic, "-", "--count", 10, "--run-id", run_id)
    pop_mode(java5, fresh_servers, topic, group)
    fail_key = f"{run_id}-4"
    fail = ("--fail-key", fail_key, "--leave-failed", 1)
    lines = run(
        java5, "pop", fresh_servers, topic, group, "--count", 10, "--run-id", run_id, *fail, "--invisible", 5000
    )
    assert sorted(got(lines)) == sorted(f"{run_id}-{i}" for i in range(10) if i != 4), lines

    fresh_servers.restart()
    # The acked ones' invisible time (5 s) ends before the failed one's (the client's 10 s retry delay): were an
    # ack lost, its message would arrive first.
    lines = run(java5, "pop", fresh_servers, topic, group, "--count", 1, "--run-id", run_id)
    assert got(lines) == {fail_key: 1}, lines


def test_two_members_of_a_group_share_the_queues_by_pop(java5, servers):
    """Two pop consumers of one group, each popping every queue (defaultPopShareQueueNum -1), together get every
    message exactly once: a popped message is invisible to the other member until acked."""
    topic, group, run_id = _unique("Pop5JavaShare"), _unique("pop5_share"), _unique("r")
    servers.create_topic(topic, 2)
    run(java5, "produce", servers, topic, "-", "--count", 60, "--run-id", run_id)
    pop_mode(java5, servers, topic, group)

    members = [
        start(java5, "pop", servers, topic, group, "--count", 0, "--run-id", run_id, "--timeout", 6) for _ in "ab"
    ]
    first, second = (got(finish(proc)) for proc in members)
    assert not set(first) & set(second), (first, second)
    assert sorted({**first, **second}) == sorted(f"{run_id}-{i}" for i in range(60))
