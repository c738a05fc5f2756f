"""HA interop with Apache's own broker, run when ``ROCKETMQ_BROKER_CLASSPATH`` names a 4.9.8 broker's jars
(built outside the repository): an Apache master followed by our slave, and our master followed by an
Apache slave, in ASYNC_MASTER and SYNC_MASTER mode. The commitlogs must be byte-identical over the range
both hold, and a consumer reads every message from the slave (pulls answered by the slave itself).

Apache 4.9.8 cannot bind to loopback only (its NettyServerConfig has no bindAddress): its ports listen on
every interface while the test runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from .apache_broker import CLASSPATH, CLASSPATH_ENV

if not CLASSPATH:
    pytest.skip(f"Apache broker not given: set {CLASSPATH_ENV} to 4.9.8's lib/* jars", allow_module_level=True)

from tests.ha.procs import bodies, has_topic, until
from tests.ha.test_chaos_4x import QUEUES, TOPIC, Pair

pytestmark = pytest.mark.compat
MESSAGES = 400


@pytest.mark.parametrize("role", ["ASYNC_MASTER", "SYNC_MASTER"])
@pytest.mark.parametrize("apache", ["master", "slave"], ids=["apache_master-our_slave", "our_master-apache_slave"])
def test_replication_between_our_broker_and_apache_is_byte_identical(tmp_path: Path, apache: str, role: str) -> None:
    pair = Pair(tmp_path, role, apache=apache)
    try:
        codes = pair.send(MESSAGES)
        assert set(codes) == {0}, f"answers other than SEND_OK: {sorted(set(codes))}"  # a slave was in sync
        end = pair.caught_up(60)
        pair.assert_identical(end)
        until(lambda: has_topic(pair.slave, TOPIC), 60, "the topic synced to the slave")
        found = bodies(pair.slave, TOPIC, QUEUES)
        assert sorted(found) == sorted((b"%d-" % i) + b"x" * 200 for i in range(MESSAGES))
        assert set(found.values()) == {1}
    finally:
        pair.stop()
