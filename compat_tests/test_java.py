"""Compatibility tests: the official Apache RocketMQ 4.x Java client against our servers.

The Java programs live in compat_tests/java/ and use only the client's public API.
They are compiled with javac against the jars listed in ROCKETMQ_JAVA_CLASSPATH
(colon separated) and run as subprocesses, each bounded by a timeout.

Our NameServer and Broker come from the ``servers`` fixture (compat_tests/conftest.py):
``servers.namesrv_addr``, ``servers.broker_addr`` and ``servers.create_topic(topic, queues=4)``.
"""

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from .servers import jdk_tool

CLASSPATH_ENV = "ROCKETMQ_JAVA_CLASSPATH"
JAVA_CLASSPATH = os.environ.get(CLASSPATH_ENV, "").strip()

if not JAVA_CLASSPATH:
    pytest.skip(
        "Java client not given: set ROCKETMQ_JAVA_CLASSPATH to the official client's jars",
        allow_module_level=True,
    )

pytestmark = pytest.mark.compat

JAVA_DIR = Path(__file__).resolve().parent / "java"
COUNT = 100  # messages per send mode
MODES = ["sync", "async", "oneway", "batch"]
PROGRAM_TIMEOUT = 90  # seconds, enforced by the Java program itself (exit 3)
SUBPROCESS_SLACK = 30  # extra seconds before the subprocess is killed from here
COMPILE_TIMEOUT = 180


def _jdk_tool(name):
    try:
        return jdk_tool(name)
    except FileNotFoundError as e:
        pytest.fail(f"{CLASSPATH_ENV} is set but {e}")


@pytest.fixture(scope="module")
def java_programs(tmp_path_factory):
    """Compile the Java programs once per module; return the runtime classpath."""
    out = tmp_path_factory.mktemp("java-classes")
    sources = sorted(str(p) for p in JAVA_DIR.glob("*.java"))
    assert sources, f"no Java sources in {JAVA_DIR}"
    cmd = [_jdk_tool("javac"), "-encoding", "UTF-8", "-nowarn", "-d", str(out), "-cp", JAVA_CLASSPATH, *sources]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"javac did not finish within {COMPILE_TIMEOUT}s")
    assert proc.returncode == 0, f"javac failed:\n{proc.stdout}\n{proc.stderr}"
    return str(out) + os.pathsep + JAVA_CLASSPATH


def _unique(prefix):
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


class JavaRun:
    def __init__(self, proc, log_dir):
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.log_dir = log_dir

    def lines(self, prefix):
        return [line for line in self.stdout.splitlines() if line.startswith(prefix)]

    def value(self, prefix):
        """Integer after e.g. 'CONSUMED ' on the last such line (None if absent)."""
        found = [line.split()[-1] for line in self.lines(prefix + " ") if len(line.split()) == 2]
        return int(found[-1]) if found else None

    def describe(self):
        text = f"exit code {self.returncode}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr[-4000:]}"
        log = Path(self.log_dir) / "rocketmq_client.log"
        if log.exists():
            text += "\n--- client log (tail) ---\n" + log.read_text(errors="replace")[-4000:]
        return text


def java_command(classpath, tmp_path, command, servers, topic, group, *extra, timeout=PROGRAM_TIMEOUT):
    """The ``java CompatMain <command>`` command line (with its own log directory)."""
    log_dir = tmp_path / f"logs-{command}-{group}"
    log_dir.mkdir(parents=True, exist_ok=True)
    return [
        _jdk_tool("java"),
        "-Xmx256m",
        "-cp",
        classpath,
        "CompatMain",
        command,
        "--namesrv",
        servers.namesrv_addr,
        "--topic",
        topic,
        "--group",
        group,
        "--timeout",
        str(timeout),
        "--log-dir",
        str(log_dir),
    ] + [str(x) for x in extra], log_dir


def run_java(classpath, tmp_path, command, servers, topic, group, *extra, timeout=PROGRAM_TIMEOUT):
    cmd, log_dir = java_command(classpath, tmp_path, command, servers, topic, group, *extra, timeout=timeout)

    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + SUBPROCESS_SLACK)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{command} did not finish within {timeout + SUBPROCESS_SLACK}s: {exc.stdout!r}")
    return JavaRun(proc, log_dir)


def assert_ok(run, what):
    assert run.returncode == 0 and run.lines("OK"), f"{what} failed:\n{run.describe()}"


def assert_consumed_once(run, what, expected):
    """The program succeeded and got ``expected`` messages, none twice, all intact."""
    assert_ok(run, what)
    assert run.value("CONSUMED") == expected, run.describe()
    assert run.value("DUPLICATES") == 0, run.describe()
    assert not run.lines("MISMATCH"), run.describe()


def produce_all_modes(java_programs, tmp_path, servers, topic, run_id):
    run = run_java(
        java_programs,
        tmp_path,
        "produce",
        servers,
        topic,
        _unique("compat_pg"),
        "--count",
        COUNT,
        "--modes",
        ",".join(MODES),
        "--run-id",
        run_id,
    )
    assert_ok(run, "producer")
    for mode in MODES:
        assert f"SENT {mode} {COUNT}" in run.stdout.splitlines(), run.describe()
    assert run.value("SENT") == COUNT * len(MODES), run.describe()
    return run


def test_produce_all_modes_then_push_consume(java_programs, servers, tmp_path):
    """sync/async/oneway/batch sends; a clustering push consumer gets each exactly once, intact."""
    topic = _unique("CompatJavaPush")
    servers.create_topic(topic, 4)
    run_id = _unique("r")
    produce_all_modes(java_programs, tmp_path, servers, topic, run_id)

    run = run_java(
        java_programs,
        tmp_path,
        "push",
        servers,
        topic,
        _unique("compat_push"),
        "--count",
        COUNT,
        "--modes",
        ",".join(MODES),
        "--run-id",
        run_id,
        "--grace",
        3,
    )
    assert_consumed_once(run, "push consumer", COUNT * len(MODES))


def test_produce_all_modes_then_lite_pull_consume(java_programs, servers, tmp_path):
    """The same messages are all received by a DefaultLitePullConsumer in subscribe mode."""
    topic = _unique("CompatJavaLite")
    servers.create_topic(topic, 4)
    run_id = _unique("r")
    produce_all_modes(java_programs, tmp_path, servers, topic, run_id)

    run = run_java(
        java_programs,
        tmp_path,
        "litepull",
        servers,
        topic,
        _unique("compat_lite"),
        "--count",
        COUNT,
        "--modes",
        ",".join(MODES),
        "--run-id",
        run_id,
        "--grace",
        2,
    )
    assert_consumed_once(run, "lite pull consumer", COUNT * len(MODES))


def test_push_consumer_tag_filter(java_programs, servers, tmp_path):
    """A subscription 'TagSync || TagBatch' delivers those two modes only."""
    topic = _unique("CompatJavaTags")
    servers.create_topic(topic, 4)
    run_id = _unique("r")
    produce_all_modes(java_programs, tmp_path, servers, topic, run_id)

    run = run_java(
        java_programs,
        tmp_path,
        "push",
        servers,
        topic,
        _unique("compat_tags"),
        "--count",
        COUNT,
        "--run-id",
        run_id,
        "--subexpr",
        "TagSync || TagBatch",
        "--expect-modes",
        "sync,batch",
        "--grace",
        3,
    )
    assert_ok(run, "tag-filtered push consumer")
    assert run.value("CONSUMED") == COUNT * 2, run.describe()


def test_push_consumer_resumes_from_committed_offset(java_programs, servers, tmp_path):
    """A second push consumer of the same group sees only messages produced after the first one."""
    topic = _unique("CompatJavaResume")
    servers.create_topic(topic, 4)
    group = _unique("compat_resume")
    first = _unique("r")
    run = run_java(
        java_programs,
        tmp_path,
        "produce",
        servers,
        topic,
        _unique("compat_pg"),
        "--count",
        20,
        "--modes",
        "sync",
        "--run-id",
        first,
    )
    assert_ok(run, "producer (first batch)")
    run = run_java(
        java_programs,
        tmp_path,
        "push",
        servers,
        topic,
        group,
        "--count",
        20,
        "--modes",
        "sync",
        "--run-id",
        first,
        "--grace",
        2,
    )
    assert_ok(run, "push consumer (first run)")

    second = _unique("r")
    run = run_java(
        java_programs,
        tmp_path,
        "produce",
        servers,
        topic,
        _unique("compat_pg"),
        "--count",
        20,
        "--modes",
        "sync",
        "--run-id",
        second,
    )
    assert_ok(run, "producer (second batch)")
    run = run_java(
        java_programs,
        tmp_path,
        "push",
        servers,
        topic,
        group,
        "--count",
        20,
        "--modes",
        "sync",
        "--run-id",
        second,
        "--grace",
        2,
        "--no-foreign",
    )
    assert_ok(run, "push consumer (second run, same group)")
    assert run.value("CONSUMED") == 20, run.describe()
