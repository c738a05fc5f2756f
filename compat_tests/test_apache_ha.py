"""HA interop with Apache's own broker, run when ``ROCKETMQ_BROKER_CLASSPATH`` names a 4.9.8 broker's jars
(built outside the repository): an Apache master followed by our slave, and our master followed by an
Apache slave, in ASYNC_MASTER and SYNC_MASTER mode. The commitlogs must be byte-identical over the range
both hold, and a consumer reads every message from the slave (pulls answered by the slave itself). And an
Apache master whose tables hold names 4.9.8 allowed but we refuse, followed by our slave.

Apache 4.9.8 cannot bind to loopback only (its NettyServerConfig has no bindAddress): its ports listen on
every interface while the test runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .apache_broker import CLASSPATH, CLASSPATH_ENV

if not CLASSPATH:
    pytest.skip(f"Apache broker not given: set {CLASSPATH_ENV} to 4.9.8's lib/* jars", allow_module_level=True)

from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode
from gateway.remoting.command import RemotingCommand
from tests.broker.test_apache_state_files import CONFIG, LEGAL_GROUP, REFUSED
from tests.ha.procs import Proc, bodies, has_topic, until, write_properties
from tests.ha.test_chaos_4x import QUEUES, TOPIC, Pair
from tests.ha.test_slave_sync_refused_names import FILES

from .apache_broker import apache_cluster
from .servers import call, free_port

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


def test_our_slave_follows_an_apache_master_holding_names_we_refuse(tmp_path: Path) -> None:
    """Apache's NameServer and master start on the fixture store (a "" group, dotted and long names, 18 delay
    levels); our slave takes every legal entry, keeps the others in its files as the master serves them, and
    warns once per file, not at every pass."""
    shutil.copytree(CONFIG, tmp_path / "store" / "config")
    slave_store = tmp_path / "slave"
    slave_log = tmp_path / "slave.log"
    with apache_cluster(tmp_path) as (namesrv, master):
        slave_addr = f"127.0.0.1:{free_port()}"
        conf = write_properties(
            tmp_path / "slave.conf",
            {
                "brokerClusterName": "DefaultCluster",
                "brokerName": "broker-a",
                "brokerId": "1",
                "brokerRole": "SLAVE",
                "brokerIP1": "127.0.0.1",
                "bindAddress": "127.0.0.1",
                "listenPort": slave_addr.rpartition(":")[2],
                "namesrvAddr": namesrv,
                "storePathRootDir": str(slave_store),
                "messageDelayLevel": "1s 5s",
            },
        )
        slave = Proc("gateway.broker", conf, tmp_path)
        try:
            groups, offsets_file = (
                slave_store / "config" / n for n in ("subscriptionGroup.json", "consumerOffset.json")
            )
            until(lambda: LEGAL_GROUP in groups.read_text(), 60, "our slave's first sync")
            # Every pass rewrites the offsets: once they change, the next pass is over.
            first = offsets_file.stat().st_mtime_ns
            until(lambda: offsets_file.stat().st_mtime_ns != first, 30, "our slave's next sync")
            log = slave_log.read_text()
            for (name, key), names in REFUSED.items():
                served = fastjson.loads(call(master, RemotingCommand.request(FILES[name])).body)[key]
                assert names <= set(served), name
                written = fastjson.loads((slave_store / "config" / name).read_bytes())[key]
                assert {n: written[n] for n in names} == {n: served[n] for n in names}, name
                assert log.count(f"{name} from master {master}: left out {len(names)} entr") == 1, log
                live = fastjson.loads(call(slave_addr, RemotingCommand.request(FILES[name])).body)[key]
                assert not set(live) & names, name
            groups = call(slave_addr, RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
            assert LEGAL_GROUP in fastjson.loads(groups.body)["subscriptionGroupTable"]
            offsets = call(slave_addr, RemotingCommand.request(RequestCode.GET_ALL_CONSUMER_OFFSET))
            assert fastjson.loads(offsets.body)["offsetTable"][f"TopicTest@{LEGAL_GROUP}"] == {
                0: 25,
                1: 25,
                2: 24,
                3: 26,
            }
        finally:
            slave.stop()
