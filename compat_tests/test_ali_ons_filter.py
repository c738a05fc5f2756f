"""ali-ons@3.12.0 against our servers: SQL92 subscriptions (``subscribe(topic, {expressionType: 'SQL92',
subString})``, sent with every pull) and BROADCASTING consumers (``isBroadcast``). ali-ons has no orderly
consumer, so ordered consumption is covered by the other clients."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest

from .servers import GatewayServers
from .test_ali_ons import NODE, NODE_DIR, PROPS, SCRIPT, Run, _unique, check_messages, produce, run_node

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServers]:
    s = GatewayServers(tmp_path_factory.mktemp("gateway-ons-sql"), {"enablePropertyFilter": "true"}).start()
    yield s
    s.close()


def test_sql92_subscription(servers, tmp_path):
    """Numeric comparison on a string property, IN, and TAGS: only the matching messages arrive."""
    topic = _unique("OnsSql")
    servers.create_topic(topic, queues=4)
    run_id = _unique("sql")
    produce(tmp_path, servers, topic, run_id, range(60))
    wanted = [i for i in range(60) if i >= 30 and i % 3 != 0]
    sql = f"run = '{run_id}' AND idx >= 30 AND TAGS IN ('Tag1', 'Tag2')"
    run = run_node(
        "consume",
        servers,
        topic,
        _unique("ons_sql"),
        "--expect",
        len(wanted),
        "--linger",
        3,
        "--props",
        ",".join(PROPS),
        "--sql",
        sql,
    )
    assert run.returncode == 0 and run.of("done"), run.describe()
    check_messages(run.of("msg"), run_id, wanted, topic, "SQL92 subscription")


def test_broadcasting_consumers(servers, tmp_path):
    """Two BROADCASTING members of one group each receive every message once."""
    topic = _unique("OnsBroadcast")
    servers.create_topic(topic, queues=4)
    group = _unique("ons_bc")
    run_id = _unique("bc")
    assert NODE is not None
    cmd = [
        NODE,
        str(SCRIPT),
        "consume",
        "--namesrv",
        servers.namesrv_addr,
        "--topic",
        topic,
        "--group",
        group,
        "--expect",
        "40",
        "--linger",
        "3",
        "--props",
        ",".join(PROPS),
        "--broadcast",
        "true",
        "--timeout",
        "60",
    ]
    members = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=NODE_DIR) for _ in range(2)
    ]
    try:
        for member in members:
            assert member.stdout is not None
            # A new broadcasting member starts at the queues' ends: wait until both are there.
            deadline = time.monotonic() + 30
            while '"event":"ready"' not in member.stdout.readline():
                assert time.monotonic() < deadline and member.poll() is None, "a broadcasting member did not start"
        time.sleep(1)
        produce(tmp_path, servers, topic, run_id, range(40))
        outputs = [member.communicate(timeout=80) for member in members]
    finally:
        for member in members:
            if member.poll() is None:
                member.kill()
                member.wait()
    for k, (out, err) in enumerate(outputs):
        run = Run(f"broadcasting member {k}", members[k].returncode, out, err)
        assert run.returncode == 0, run.describe()
        check_messages(run.of("msg"), run_id, range(40), topic, f"broadcasting member {k}")
