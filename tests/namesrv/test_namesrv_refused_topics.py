"""Issue 25 item 2: an Apache 4.9.8 broker whose topics.json holds names 4.9.8 allowed registers with our NameServer.

4.9.8 checks no group name, so a consumer group with dots gives a retry topic RocketMQ 5 refuses. The NameServer
takes the registration, routes the legal topics, leaves the refused ones out and warns once per broker, again
only when the refused set changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import pytest_twisted
from twisted.logger import formatEvent, globalLogPublisher

from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import RegisterBrokerRequestHeader
from gateway.remoting.message import body_crc

from .support import CLUSTER, register_request, route_json, route_request

TOPICS_JSON = Path(__file__).parents[1] / "broker" / "fixtures" / "apache-4.9.8-config" / "topics.json"
BROKER = "127.0.0.1:10911"
DOTTED = "%RETRY%com.example.orders-consumer"
# The other kinds 4.9.8 let through: too long, another illegal character, blank.
LONG = "T" * 128
SLASH = "orders/eu"
REFUSED = {DOTTED, LONG, SLASH, " "}


def _apache_topics(*extra: str) -> dict:
    """topics.json as Apache 4.9.8 wrote it, with ``extra`` topics shaped as its others are."""
    wrapper = fastjson.loads(TOPICS_JSON.read_bytes())
    table = wrapper["topicConfigTable"]
    for name in extra:
        table[name] = {**table["TopicTest"], "topicName": name}
    return wrapper


def _register(wrapper: dict) -> RemotingCommand:
    data = fastjson.dumps({"topicConfigSerializeWrapper": wrapper, "filterServerList": []})
    header = RegisterBrokerRequestHeader("broker-a", BROKER, CLUSTER, "127.0.0.1:10912", 0, False, body_crc(data))
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, header.encode(), data)


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    """Every warning logged while the test runs."""
    lines: list[str] = []

    def observer(event: dict) -> None:
        if event.get("log_level") is not None and event["log_level"].name == "warn":
            lines.append(formatEvent(event))

    globalLogPublisher.addObserver(observer)
    yield lines
    globalLogPublisher.removeObserver(observer)


def _refused_warnings(lines: list[str]) -> list[str]:
    return [line for line in lines if "under names this NameServer refuses" in line]


@pytest_twisted.ensureDeferred
async def test_apache_topics_with_refused_names_register_and_route_the_legal_ones(addr, client, warnings):
    wrapper = _apache_topics(LONG, SLASH, " ")
    response = await client.invoke(addr, _register(wrapper))
    assert response.code == ResponseCode.SUCCESS, response.remark

    listed = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
    topics = set(fastjson.loads(listed.body)["topicList"])
    legal = set(wrapper["topicConfigTable"]) - REFUSED
    assert topics == legal and "%RETRY%please_rename_unique_group_name_4" in topics
    route = route_json(await client.invoke(addr, route_request("TopicTest")))
    assert route["queueDatas"][0]["brokerName"] == "broker-a"
    # A client cannot ask for a refused name: the 5.x rule, answered before any table is looked at.
    response = await client.invoke(addr, route_request(DOTTED))
    assert response.code == ResponseCode.INVALID_PARAMETER
    assert "contains illegal characters" in response.remark

    (warning,) = _refused_warnings(warnings)
    assert warning.startswith(f"broker broker-a at {BROKER} registered 4 topics under names this NameServer refuses")
    for name in (DOTTED, LONG[:100], SLASH):
        assert f'"{name}' in warning
    assert f"The specified topic: {DOTTED}, contains illegal characters" in warning
    assert "The specified topic is blank." in warning

    # The 30 s re-registration says nothing new; a changed set is named again, once.
    wrapper["dataVersion"]["counter"] += 1
    assert (await client.invoke(addr, _register(wrapper))).code == ResponseCode.SUCCESS
    assert len(_refused_warnings(warnings)) == 1
    del wrapper["topicConfigTable"][LONG]
    assert (await client.invoke(addr, _register(wrapper))).code == ResponseCode.SUCCESS
    assert len(_refused_warnings(warnings)) == 2
    assert "registered 3 topics" in _refused_warnings(warnings)[1]


@pytest_twisted.ensureDeferred
async def test_compressed_registration_with_a_refused_name(addr, client, warnings):
    request = register_request("broker-b", "127.0.0.1:10921", {"Zipped": 2, DOTTED: 1}, compressed=True)
    response = await client.invoke(addr, request)
    assert response.code == ResponseCode.SUCCESS, response.remark
    listed = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
    assert fastjson.loads(listed.body)["topicList"] == ["Zipped"]
    (warning,) = _refused_warnings(warnings)
    assert warning.startswith("broker broker-b at 127.0.0.1:10921 registered 1 topic under names")
