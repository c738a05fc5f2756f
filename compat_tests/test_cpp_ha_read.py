"""The C++ client (PyPI ``rocketmq==0.4.4``) keeps consuming from the slave while the master is down.

A NameServer, a master and its 4.x slave run as separate processes. The C++ producer sends to the master;
once the slave holds everything (and the topic, through its metadata sync), the master is SIGKILLed. The
route then names only the slave, and a C++ push consumer gets every message from it and commits its
offsets there, as against Apache 4.9.
"""

from __future__ import annotations

import importlib.util
import signal
from pathlib import Path

import pytest

from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import CreateTopicRequestHeader

from .servers import call

if importlib.util.find_spec("rocketmq") is None:
    pytest.skip("PyPI rocketmq==0.4.4 (the C++ client) is not installed", allow_module_level=True)

from tests.ha.procs import Proc, free_port, has_topic, until, write_properties

from .test_cpp_client import _unique, check_messages, consume, produce

pytestmark = [pytest.mark.compat, pytest.mark.chaos]

QUEUES = 4


class Pair:
    """What the C++ helpers need of "servers" (``namesrv_addr``, ``create_topic``), over three processes."""

    def __init__(self, root: Path) -> None:
        self.procs: list[Proc] = []
        port = free_port()
        self.namesrv_addr = f"127.0.0.1:{port}"
        conf = write_properties(
            root / "namesrv.properties",
            {"listenPort": str(port), "bindAddress": "127.0.0.1", "kvConfigPath": str(root / "kv.json")},
        )
        self.procs.append(Proc("gateway.namesrv", conf, root))
        self.master = self._broker(root, "master", {"brokerRole": "ASYNC_MASTER", "brokerId": "0"})
        self.slave = self._broker(root, "slave", {"brokerRole": "SLAVE", "brokerId": "1"})

    def _broker(self, root: Path, name: str, role: dict[str, str]) -> str:
        port = free_port()
        conf = write_properties(
            root / f"{name}.conf",
            {
                "brokerClusterName": "DefaultCluster",
                "brokerName": "broker-cpp-ha",
                "brokerIP1": "127.0.0.1",
                "bindAddress": "127.0.0.1",
                "listenPort": str(port),
                "namesrvAddr": self.namesrv_addr,
                "storePathRootDir": str(root / name),
                **role,
            },
        )
        self.procs.append(Proc("gateway.broker", conf, root))
        addr = f"127.0.0.1:{port}"
        until(lambda: call(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 3), 30, name)
        return addr

    def create_topic(self, topic: str, queues: int = QUEUES) -> None:
        header = CreateTopicRequestHeader(
            topic=topic,
            default_topic="TBW102",
            read_queue_nums=queues,
            write_queue_nums=queues,
            perm=6,
            topic_filter_type="SINGLE_TAG",
        )
        request = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header.encode())
        assert call(self.master, request).code == ResponseCode.SUCCESS
        until(lambda: self._routed(topic), 30, f"route of {topic}")

    def _routed(self, topic: str) -> bool:
        resp = call(self.namesrv_addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
        return resp.code == ResponseCode.SUCCESS

    def max_offset(self, addr: str) -> int:
        resp = call(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 3)
        return int(fastjson.loads(resp.body)["table"]["commitLogMaxOffset"])

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


@pytest.fixture
def pair(tmp_path: Path):
    p = Pair(tmp_path)
    yield p
    p.stop()


def test_cpp_push_consumer_reads_from_the_slave_while_the_master_is_down(pair: Pair, tmp_path: Path) -> None:
    topic = _unique("CppHaRead")
    pair.create_topic(topic)
    run_id = _unique("ha")
    produce(tmp_path, pair, topic, run_id, 60)
    end = pair.max_offset(pair.master)
    until(lambda: pair.max_offset(pair.slave) == end, 30, "the slave holding everything")
    until(lambda: has_topic(pair.slave, topic), 30, "the topic on the slave")
    pair.procs[1].proc.send_signal(signal.SIGKILL)
    pair.procs[1].proc.wait(10)

    def only_the_slave() -> bool:
        resp = call(pair.namesrv_addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
        if resp.code != ResponseCode.SUCCESS:
            return False
        (data,) = fastjson.loads(resp.body)["brokerDatas"]
        return {str(k) for k in data["brokerAddrs"]} == {"1"}

    until(only_the_slave, 30, "a route naming only the slave")
    group = _unique("cpp_ha")
    run = consume(tmp_path, pair, topic, group, 60, timeout=90)
    check_messages(run.messages, run_id, range(60), topic, "push consumer on the slave")
    # Its offsets were committed to the slave.
    committed = 0
    for queue_id in range(QUEUES):
        request = RemotingCommand.request(
            RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)}
        )
        resp = call(pair.slave, request)
        if resp.code == ResponseCode.SUCCESS:
            committed += int(resp.ext_fields["offset"])
    assert committed == 60
