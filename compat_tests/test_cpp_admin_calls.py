"""The broker's admin calls to a consumer, answered by the unmodified C++ client (PyPI ``rocketmq``): its
running info through GET_CONSUMER_RUNNING_INFO, and a reset by time (INVOKE_BROKER_TO_RESET_OFFSET), which the
broker pushes to a C++ member in the C++ body form; the member then consumes everything again."""

from __future__ import annotations

import time

import pytest

from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand

from .servers import call
from .test_cpp_client import Background, _unique
from .test_cpp_delay_retry import produce, retrying_group

pytestmark = pytest.mark.compat


def _until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached in {timeout} s"
        time.sleep(0.2)


def test_running_info_and_reset_offset_reach_a_cpp_consumer(servers, tmp_path):
    topic = _unique("CppAdmin")
    servers.create_topic(topic, 2)
    group = retrying_group(servers, "cpp_admin")
    consumer = Background(tmp_path / "home-bg", servers, topic, group, timeout=90)
    broker = servers.broker_addr
    try:
        consumer.wait_started()
        produce(tmp_path, servers, topic, _unique("admin"), 6)

        def delivered() -> int:
            return len([e for e in consumer.events() if e["event"] == "msg"])

        def committed() -> int:
            total = 0
            for queue_id in (0, 1):
                ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)}
                answer = call(broker, RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, ext))
                total += int(answer.ext_fields["offset"]) if answer.code == ResponseCode.SUCCESS else 0
            return total

        _until(lambda: delivered() >= 6, 60, "6 messages consumed")
        _until(lambda: committed() == 6, 30, "the C++ client's offsets committed")

        answer = call(
            broker, RemotingCommand.request(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
        )
        (member,) = fastjson.loads(answer.body)["connectionSet"]
        assert member["language"] == "CPP"
        ext = {"consumerGroup": group, "clientId": member["clientId"], "jstackEnable": "false"}
        info = call(broker, RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, ext), timeout=15)
        assert info.code == ResponseCode.SUCCESS, info.remark
        assert topic.encode() in info.body

        ext = {"topic": topic, "group": group, "timestamp": "0", "isForce": "true"}
        reset = call(broker, RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext))
        assert reset.code == ResponseCode.SUCCESS, reset.remark
        assert sorted(fastjson.loads(reset.body)["offsetTable"].values()) == [0, 0]
        _until(lambda: delivered() >= 12, 60, "every message consumed again after the reset")
    finally:
        consumer.finish()
