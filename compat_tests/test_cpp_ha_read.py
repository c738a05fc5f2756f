"""The C++ client (PyPI ``rocketmq==0.4.4``) keeps consuming from the slave while the master is down.

A NameServer, a master and its 4.x slave run as separate processes. The C++ producer sends to the master;
once the slave holds everything (and the topic, through its metadata sync), the master is SIGKILLed. The
route then names only the slave, and a C++ push consumer gets every message from it and commits its
offsets there, as against Apache 4.9.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand

from .servers import call

if importlib.util.find_spec("rocketmq") is None:
    pytest.skip("PyPI rocketmq==0.4.4 (the C++ client) is not installed", allow_module_level=True)

from tests.ha.procs import has_topic, until
from tests.ha.test_chaos_4x import QUEUES, Pair

from .test_cpp_client import _unique, check_messages, committed_offsets, consume, produce

pytestmark = [pytest.mark.compat, pytest.mark.chaos]


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    """NameServer, master and slave processes; it has what the C++ helpers need of "servers" (``namesrv_addr``,
    ``create_topic``)."""
    p = Pair(tmp_path, "ASYNC_MASTER")
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
    pair.master_proc.kill()

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
    assert sum(committed_offsets(pair.slave, group, topic, QUEUES).values()) == 60
