"""Routes a NameServer lost come back at the broker's next periodic registration (issue #25, item 1).

A NameServer and a broker run as processes with a short registerNameServerPeriod; each test makes the
NameServer lose the broker, then auto-creates a topic at once: that registration of the change reaches a
NameServer that no longer knows the broker, which takes it as the whole table with the current data version.
Every topic must be routed again within one period.
"""

from __future__ import annotations

import re
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from twisted.internet.task import Clock

from compat_tests.servers import call, free_port
from gateway.broker.config import BrokerConfig, load_broker_config
from gateway.broker.managers import TopicConfigManager
from gateway.broker.registration import CHANGE_DELAY, BrokerRegistration
from gateway.config import ConfigError
from gateway.remoting import fastjson
from gateway.remoting.blocking import BlockingConnection
from gateway.remoting.bodies import DataVersion, RegisterBrokerBody, TopicConfig
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from tests.broker.test_broker_server import send_header
from tests.ha.procs import Proc, until, write_properties
from tests.namesrv.support import register_request, route_request
from tests.security.test_flood import _NameServers

BROKER_NAME = "broker-a"
PERIOD_MS = 2000
# The next period starts within PERIOD_MS; the rest is for a loaded test machine.
HEAL_WITHIN = PERIOD_MS / 1000 + 3.0
EARLIER_TOPIC = "EarlierTopic"


class Servers:
    """NameServers and one broker as processes under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[Proc] = []
        self.namesrvs: dict[str, Proc] = {}
        self.broker = ""
        self.broker_proc: Proc | None = None

    def start_namesrv(self, name: str, port: int | None = None, **conf: str) -> str:
        port = port or free_port()
        props = {
            "listenPort": str(port),
            "bindAddress": "127.0.0.1",
            "kvConfigPath": str(self.root / f"{name}-kv.json"),
        }
        proc = Proc("gateway.namesrv", write_properties(self.root / f"{name}.properties", props | conf), self.root)
        self.procs.append(proc)
        addr = f"127.0.0.1:{port}"
        self.namesrvs[addr] = proc
        until(lambda: answers(addr), 30, f"NameServer {name} listening")
        return addr

    def start_broker(self, namesrv: str, **conf: str) -> str:
        port = free_port()
        props = {
            "brokerClusterName": "DefaultCluster",
            "brokerName": BROKER_NAME,
            "brokerIP1": "127.0.0.1",
            "bindAddress": "127.0.0.1",
            "listenPort": str(port),
            "namesrvAddr": namesrv,
            "storePathRootDir": str(self.root / "store"),
            "mappedFileSizeCommitLog": str(16 * 1024 * 1024),
            "registerNameServerPeriod": str(PERIOD_MS),
            "registerNameServerPeriodMin": "1000",
        }
        self.broker_proc = Proc("gateway.broker", write_properties(self.root / "broker.conf", props | conf), self.root)
        self.procs.append(self.broker_proc)
        self.broker = f"127.0.0.1:{port}"
        until(lambda: routed(namesrv, "TBW102"), 30, "the broker registered")
        return self.broker

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    s = Servers(tmp_path)
    try:
        yield s
    finally:
        s.stop()


def answers(addr: str) -> bool:
    return call(addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 3).code == ResponseCode.SUCCESS


def routed(namesrv: str, topic: str) -> bool:
    return call(namesrv, route_request(topic), 3).code == ResponseCode.SUCCESS


def send(broker: str, topic: str) -> None:
    """One message to ``topic``, auto-created through TBW102 if new."""
    req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_header(topic, {}), b"body")
    resp = call(broker, req, 10)
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def assert_heals(namesrv: str, *topics: str) -> None:
    """Every topic is routed again by ``namesrv`` within HEAL_WITHIN seconds."""
    deadline = time.monotonic() + HEAL_WITHIN
    while True:
        lost = [t for t in topics if not routed(namesrv, t)]
        if not lost:
            return
        assert time.monotonic() < deadline, f"no route for {lost} after {HEAL_WITHIN} s"
        time.sleep(0.1)


def lose_by_rogue_registration(namesrv: str) -> None:
    """Another peer registers as the master of BROKER_NAME and goes: the NameServer drops the name and its
    topics when that channel closes (as Apache's does)."""
    with BlockingConnection(namesrv, 5) as conn:
        assert conn.invoke(register_request(BROKER_NAME, "127.0.0.1:1", {})).code == ResponseCode.SUCCESS
    until(lambda: not routed(namesrv, EARLIER_TOPIC), 10, "the routes lost")


@pytest.mark.parametrize("force_register", ["true", "false"])
def test_routes_dropped_by_a_rogue_registration_heal_after_an_auto_create(
    servers: Servers, force_register: str
) -> None:
    namesrv = servers.start_namesrv("ns")
    broker = servers.start_broker(namesrv, forceRegister=force_register)
    send(broker, EARLIER_TOPIC)
    assert routed(namesrv, EARLIER_TOPIC)

    lose_by_rogue_registration(namesrv)
    send(broker, "LaterTopic")

    assert_heals(namesrv, "TBW102", EARLIER_TOPIC, "LaterTopic", BROKER_NAME)
    # And they stay: the periodic registrations after do not take them away.
    time.sleep(PERIOD_MS / 1000)
    assert_heals(namesrv, "TBW102", EARLIER_TOPIC, "LaterTopic")


def test_routes_heal_on_a_restarted_name_server_told_of_an_auto_create_first(servers: Servers) -> None:
    namesrv = servers.start_namesrv("ns")
    broker = servers.start_broker(namesrv)
    send(broker, EARLIER_TOPIC)

    port = int(namesrv.rpartition(":")[2])
    servers.namesrvs[namesrv].kill()
    servers.start_namesrv("ns-again", port)
    send(broker, "LaterTopic")

    assert_heals(namesrv, "TBW102", EARLIER_TOPIC, "LaterTopic")


def test_a_name_server_added_to_namesrv_addr_at_run_time_gets_every_route(servers: Servers) -> None:
    first = servers.start_namesrv("ns1")
    broker = servers.start_broker(first)
    send(broker, EARLIER_TOPIC)
    second = servers.start_namesrv("ns2")

    # Read at start only, and checked there: not changed (nor persisted) remotely.
    refused = RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, body=b"registerNameServerPeriodMin=0\n")
    assert call(broker, refused, 5).code == ResponseCode.NO_PERMISSION
    update = RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, body=f"namesrvAddr={first};{second}\n".encode())
    assert call(broker, update, 5).code == ResponseCode.SUCCESS
    send(broker, "LaterTopic")

    assert_heals(second, "TBW102", EARLIER_TOPIC, "LaterTopic")
    assert_heals(first, "TBW102", EARLIER_TOPIC, "LaterTopic")


def test_routes_of_an_expired_broker_heal_once_it_is_heard_again(servers: Servers) -> None:
    namesrv = servers.start_namesrv("ns", brokerChannelExpiredTime="4000", scanNotActiveBrokerInterval="200")
    broker = servers.start_broker(namesrv)
    send(broker, EARLIER_TOPIC)

    assert servers.broker_proc is not None
    servers.broker_proc.proc.send_signal(signal.SIGSTOP)
    try:
        until(lambda: not routed(namesrv, "TBW102"), 10, "the broker expired")
    finally:
        servers.broker_proc.proc.send_signal(signal.SIGCONT)

    assert_heals(namesrv, "TBW102", EARLIER_TOPIC)
    send(broker, "LaterTopic")
    assert_heals(namesrv, "TBW102", EARLIER_TOPIC, "LaterTopic")


def requests_served(metrics_port: int, code: str) -> int:
    """How many ``code`` requests the NameServer has answered, from its rocketmq_rpc_latency histogram."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    counts = re.findall(rf'rocketmq_rpc_latency_count{{[^}}]*request_code="{code}"[^}}]*}} (\S+)', text)
    return int(sum(float(c) for c in counts))


def test_without_force_register_an_unchanged_broker_asks_the_data_version_and_stays_live(servers: Servers) -> None:
    metrics_port = free_port()
    namesrv = servers.start_namesrv(
        "ns",
        brokerChannelExpiredTime=str(PERIOD_MS + 1500),
        scanNotActiveBrokerInterval="200",
        metricsExporterType="PROM",
        metricsPromExporterHost="127.0.0.1",
        metricsPromExporterPort=str(metrics_port),
    )
    servers.start_broker(namesrv, forceRegister="false")
    registered = requests_served(metrics_port, "register_broker")
    asked = requests_served(metrics_port, "query_data_version")

    time.sleep(2.5 * PERIOD_MS / 1000)

    assert requests_served(metrics_port, "register_broker") == registered
    assert requests_served(metrics_port, "query_data_version") >= asked + 2
    assert routed(namesrv, "TBW102")  # each unchanged answer refreshed the broker


@pytest.mark.parametrize("value", ["999", "60001"])
def test_register_name_server_period_min_out_of_bounds_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match=r"key registerNameServerPeriodMin: .* is not from 1000 to 60000 ms"):
        load_broker_config(overrides={"registerNameServerPeriodMin": value})


def test_the_full_registration_after_registered_changes_carries_a_new_data_version(tmp_path: Path) -> None:
    clock = Clock()
    cfg = BrokerConfig(brokerName=BROKER_NAME, brokerClusterName="DefaultCluster", namesrvAddr="127.0.0.1:9876")
    namesrv = _NameServers()
    topics = TopicConfigManager(cfg, tmp_path)
    broker = SimpleNamespace(reactor=clock, config=cfg, topics=topics)
    registration = BrokerRegistration(broker, namesrv)  # type: ignore[arg-type]

    def registered() -> DataVersion:
        namesrv.answer()
        body = RegisterBrokerBody.from_json(fastjson.loads(namesrv.requests[-1].body))
        return body.topic_config_serialize_wrapper.data_version

    registration.register_all()
    unchanged = registered()
    registration.register_all()
    assert registered() == unchanged  # nothing new for a NameServer that has it all

    topics.update_topic_config(TopicConfig("New", 2, 2))
    registration.topics_changed("New")
    clock.advance(CHANGE_DELAY)
    changes = registered()
    registration.register_all()
    full = registered()
    assert full.counter > changes.counter
    registration.register_all()
    assert registered() == full
