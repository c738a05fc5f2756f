"""``python -m gateway.proxy`` in front of a cluster of Apache's brokers (Apache's proxy "cluster mode"), run when
``ROCKETMQ_BROKER_CLASSPATH`` names Apache 4.9.8's jars: the official 5.x Python SDK sends through our proxy into
Apache's broker, and our 4.x client reads what it sent from that broker. POP consumption needs a 5.x broker:
4.9.8 refuses it, and the SDK's receive gets that refusal as an error rather than waiting forever.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from .apache_broker import CLASSPATH, CLASSPATH_ENV

if not CLASSPATH:
    pytest.skip(f"Apache broker not given: set {CLASSPATH_ENV} to 4.9.8's lib/* jars", allow_module_level=True)

from gateway.remoting.codes import RequestCode
from gateway.remoting.command import RemotingCommand
from tests.ha.procs import Proc, until, write_properties

from .apache_broker import apache_broker
from .sdk5 import run_scenario
from .servers import call, create_topic_request, free_port
from .test_sdk5_python import flat, pull_all, standalone_proxy

pytestmark = pytest.mark.compat
TOPIC = "Sdk5ThroughProxy"


def test_sdk5_sends_through_our_proxy_into_apache_broker(tmp_path: Path) -> None:
    namesrv = f"127.0.0.1:{free_port()}"
    conf = {"listenPort": namesrv.rpartition(":")[2], "bindAddress": "127.0.0.1", "kvConfigPath": str(tmp_path / "kv")}
    ours = Proc("gateway.namesrv", write_properties(tmp_path / "namesrv.properties", conf), tmp_path)
    try:
        until(lambda: call(namesrv, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 1), 20, "NameServer")
        with apache_broker(tmp_path, namesrv) as broker:
            assert call(broker, create_topic_request(TOPIC, 4)).code == 0
            routed = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
            until(lambda: call(namesrv, routed).code == 0, 20, "the topic routed")
            cluster = SimpleNamespace(namesrv_addr=namesrv)
            specs = [{"body": f"via proxy {i}", "tag": "TagA", "keys": [f"k{i}"], "properties": {"n": str(i)}}
                     for i in range(3)]  # fmt: skip
            with standalone_proxy(cluster, tmp_path, {}) as endpoint:  # type: ignore[arg-type]
                out = run_scenario("producer", {"endpoint": endpoint, "topic": TOPIC, "messages": specs})
                assert "error" not in out, out
                got = sorted(flat(pull_all(cluster, TOPIC, 3)), key=lambda m: m.body)  # type: ignore[arg-type]
                assert [m.body for m in got] == [b"via proxy 0", b"via proxy 1", b"via proxy 2"]
                for i, m in enumerate(got):
                    assert (m.tags, m.keys, m.properties["n"], m.uniq_key) == ("TagA", f"k{i}", str(i), out["ids"][i])
                    assert m.store_host.startswith("127.0.0.1:")  # stored by Apache's broker, read from it
                popped = run_scenario(
                    "simple_receive", {"endpoint": endpoint, "topic": TOPIC, "group": "Sdk5OnApache49"}, timeout=60
                )
                assert "error" in popped and "not supported" in popped["error"].lower(), popped
    finally:
        ours.stop()
