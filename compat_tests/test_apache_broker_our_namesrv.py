"""Issue 25 item 2 with Apache 4.9.8's broker, run when ``ROCKETMQ_BROKER_CLASSPATH`` names its jars: on a store
whose topics.json holds a dotted group's retry topic (4.9.8 allows it, RocketMQ 5 does not), it registers with
our NameServer, which routes its legal topics, leaves the refused one out with one warning, and serves a C++
producer and consumer through it. tests/namesrv/test_namesrv_refused_topics.py runs the same without Apache.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from .apache_broker import CLASSPATH, CLASSPATH_ENV

if not CLASSPATH:
    pytest.skip(f"Apache broker not given: set {CLASSPATH_ENV} to 4.9.8's lib/* jars", allow_module_level=True)

from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from tests.ha.procs import Proc, until, write_properties

from .apache_broker import apache_broker
from .servers import call, free_port
from .test_cpp_client import check_messages, consume, produce

pytestmark = pytest.mark.compat
FIXTURE = Path(__file__).parents[1] / "tests" / "broker" / "fixtures" / "apache-4.9.8-config"
TOPIC = "TopicTest"
GROUP = "cpp_cg_our_namesrv"
REFUSED = "%RETRY%com.example.orders-consumer"
WARNING = "under names this NameServer refuses"


def _topics(namesrv: str) -> set[str]:
    response = call(namesrv, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER), 3)
    assert response.code == ResponseCode.SUCCESS, response.remark
    return set(fastjson.loads(response.body)["topicList"])


def test_apache_broker_with_a_refused_topic_registers_with_our_namesrv(tmp_path: Path) -> None:
    shutil.copytree(FIXTURE, tmp_path / "store" / "config")
    namesrv = f"127.0.0.1:{free_port()}"
    conf = {"listenPort": namesrv.rpartition(":")[2], "bindAddress": "127.0.0.1", "kvConfigPath": str(tmp_path / "kv")}
    ours = Proc("gateway.namesrv", write_properties(tmp_path / "namesrv.properties", conf), tmp_path)
    log = tmp_path / "namesrv.log"
    try:
        until(lambda: call(namesrv, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 1), 20, "NameServer")
        with apache_broker(tmp_path, namesrv):
            topics = _topics(namesrv)
            assert TOPIC in topics and REFUSED not in topics, topics
            (warning,) = [line for line in log.read_text().splitlines() if WARNING in line]
            assert f'"{REFUSED}": The specified topic: {REFUSED}, contains illegal characters' in warning

            clients = SimpleNamespace(namesrv_addr=namesrv)
            produce(tmp_path, clients, TOPIC, "ours", 10)
            check_messages(consume(tmp_path, clients, TOPIC, GROUP, 10).messages, "ours", range(10), TOPIC, GROUP)
            # The consumer's retry topic made the broker register again: routed, and no new warning.
            until(lambda: f"%RETRY%{GROUP}" in _topics(namesrv), 20, "the retry topic routed")
            assert [line for line in log.read_text().splitlines() if WARNING in line] == [warning]
    finally:
        ours.stop()
