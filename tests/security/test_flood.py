"""Config-change floods (issue 8 item 9): many new groups or topics cost a few config writes and NameServer
registrations, not one each, other clients keep their latency, and nothing is lost at stop or restart."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.task import Clock

from gateway.broker import managers
from gateway.broker.config import BrokerConfig
from gateway.broker.managers import PERSIST_DELAY, SubscriptionGroupManager, TopicConfigManager
from gateway.broker.registration import CHANGE_DELAY, BrokerRegistration
from gateway.namesrv.service import NamesrvController
from gateway.remoting import fastjson
from gateway.remoting.bodies import (
    ConsumerData,
    HeartbeatData,
    RegisterBrokerBody,
    SubscriptionData,
    SubscriptionGroupConfig,
    TopicConfig,
)
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import ConsumerSendMsgBackRequestHeader
from gateway.remoting.message import decode_offset_message_id
from tests.broker.conftest import BrokerUnderTest
from tests.broker.test_broker_server import send, send_header

GROUPS = 300


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Config files written, by name (the broker writes them in the reactor's thread pool)."""
    counts: Counter[str] = Counter()
    write = managers.write_atomically

    def counted(path: Any, data: bytes) -> None:
        counts[Path(path).name] += 1
        write(path, data)

    monkeypatch.setattr(managers, "write_atomically", counted)
    return counts


@pytest.fixture
def registrations(namesrv: NamesrvController) -> list[float]:
    """When the NameServer received each REGISTER_BROKER."""
    seen: list[float] = []

    def hook(channel: Any, request: RemotingCommand) -> None:
        if request.code == RequestCode.REGISTER_BROKER:
            seen.append(time.monotonic())

    namesrv.dispatcher.hooks.append(hook)
    return seen


def _heartbeat(groups: list[str], client_id: str = "flooder") -> RemotingCommand:
    consumers = [ConsumerData(g, subscription_data_set=[SubscriptionData.build("FloodTopic", "*")]) for g in groups]
    body = orjson.dumps(HeartbeatData(client_id, consumer_data_set=consumers).to_json())
    return RemotingCommand.request(RequestCode.HEART_BEAT, body=body)


async def _flood_with_victim(broker: BrokerUnderTest, requests: list[RemotingCommand]) -> tuple[float, float]:
    """Send ``requests`` pipelined on one connection while a second client sends GET_MAX_OFFSET one after the
    other; (seconds until every request was answered, the victim's slowest answer)."""
    started = time.monotonic()
    answers = DeferredList([broker.call(r, timeout=60) for r in requests], fireOnOneErrback=True, consumeErrors=True)
    done: list[float] = []

    def answered(results: list[tuple[bool, Any]]) -> list[tuple[bool, Any]]:
        done.append(time.monotonic())
        return results

    answers.addCallback(answered)
    victim = RemotingClient(reactor)
    slowest = 0.0
    try:
        while not done:
            t0 = time.monotonic()
            resp = await victim.invoke(
                broker.addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": "0"})
            )
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            slowest = max(slowest, time.monotonic() - t0)
    finally:
        await victim.close()
    for ok, resp in await answers:
        assert ok and resp.code == ResponseCode.SUCCESS, resp
    return done[0] - started, slowest


def _file_table(broker: BrokerUnderTest, name: str, key: str) -> dict[str, Any]:
    return fastjson.loads((broker.root / "store" / "config" / name).read_bytes())[key]


@pytest_twisted.ensureDeferred
async def test_one_heartbeat_with_many_new_groups_costs_one_write(make_broker, addr, registrations, writes) -> None:
    b = make_broker(namesrvAddr=addr)
    b.start()
    try:
        await b.controller.when_ready()
        # Start-up's own writes may still be under way (off the reactor): let them land before counting.
        await b.controller.groups.file.flush()
        await b.controller.topics.file.flush()
        writes.clear()
        registered = len(registrations)
        groups = [f"cg_one_{i}" for i in range(GROUPS)]
        assert (await b.call(_heartbeat(groups))).code == ResponseCode.SUCCESS
        await b.controller.groups.file.flush()
        await b.controller.topics.file.flush()
        # One write of each file for the whole heartbeat (before: two fsyncs and a registration per group).
        assert writes == {"subscriptionGroup.json": 1, "topics.json": 1}
        on_disk = _file_table(b, "subscriptionGroup.json", "subscriptionGroupTable")
        assert set(groups) <= set(on_disk)
        topics = _file_table(b, "topics.json", "topicConfigTable")
        assert {f"%RETRY%{g}" for g in groups} <= set(topics)
        await _until(lambda: len(registrations) > registered)
        assert len(registrations) - registered == 1
    finally:
        await b.stop()


@pytest_twisted.ensureDeferred
async def test_heartbeat_flood_is_coalesced_and_others_keep_their_latency(
    make_broker, addr, registrations, writes
) -> None:
    b = make_broker(namesrvAddr=addr)
    b.start()
    await b.controller.when_ready()
    writes.clear()
    registered = len(registrations)
    groups = [f"cg_flood_{i}" for i in range(GROUPS)]
    # Each its own request, as 300 consumers starting at once (the attack: 3,000 anonymous ones).
    seconds, slowest = await _flood_with_victim(b, [_heartbeat([g], f"client{i}") for i, g in enumerate(groups)])
    # Before: ~30 ms of fsyncs per group on the reactor, ~9 s in all, the victim waiting seconds.
    assert seconds < 5.0 and slowest < 1.0, (seconds, slowest)
    flood_writes = sum(writes.values())
    assert flood_writes <= 2 * (2 + seconds / PERSIST_DELAY) and flood_writes < GROUPS / 10, writes
    assert len(registrations) - registered <= 2 + seconds / CHANGE_DELAY, len(registrations) - registered
    # Stopped at once: the writes still pending happen at stop, and a restart has every group.
    await b.stop()
    again = make_broker(namesrvAddr=addr)
    again.start()
    try:
        assert set(groups) <= set(again.controller.groups.table)
        assert all(again.controller.topics.select(f"%RETRY%{g}") is not None for g in groups)
    finally:
        await again.stop()


@pytest_twisted.ensureDeferred
async def test_topic_flood_through_tbw102_and_send_back(make_broker, addr, registrations, writes) -> None:
    """The same shape on the send paths: topics auto-created from TBW102, and each new group's %DLQ% topic
    created by CONSUMER_SEND_MSG_BACK."""
    b = make_broker(namesrvAddr=addr)
    b.start()
    try:
        await b.controller.when_ready()
        sent = await send(b, "Origin", b"m", {})
        offset = decode_offset_message_id(sent.ext_fields["msgId"])[1]
        writes.clear()
        registered = len(registrations)
        n = 50
        sends = [
            RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_header(f"AutoTopic{i}", {}), b"x")
            for i in range(n)
        ]
        backs = [
            RemotingCommand.request(
                RequestCode.CONSUMER_SEND_MSG_BACK,
                ConsumerSendMsgBackRequestHeader(offset=offset, group=f"cg_back_{i}", delay_level=-1).encode(),
            )
            for i in range(n)
        ]
        seconds, _ = await _flood_with_victim(b, sends + backs)
        await b.controller.topics.file.flush()
        assert writes["topics.json"] <= 2 + seconds / PERSIST_DELAY and writes["topics.json"] < n / 5, writes
        assert len(registrations) - registered <= 2 + seconds / CHANGE_DELAY
        topics = _file_table(b, "topics.json", "topicConfigTable")
        assert {f"AutoTopic{i}" for i in range(n)} | {f"%DLQ%cg_back_{i}" for i in range(n)} <= set(topics)
    finally:
        await b.stop()


@pytest_twisted.ensureDeferred
async def test_start_on_a_new_store_registers_once(make_broker, addr, registrations) -> None:
    # A new store's state files create system topics (the timer's rmq_sys_wheel_timer): the first full
    # registration carries them, not a second registration of changes a moment later.
    b = make_broker(namesrvAddr=addr)
    b.start()
    try:
        await b.controller.when_ready()
        d: Deferred[None] = Deferred()
        reactor.callLater(3 * CHANGE_DELAY, d.callback, None)
        await d
        assert len(registrations) == 1
    finally:
        await b.stop()


async def _until(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        d: Deferred[None] = Deferred()
        reactor.callLater(0.02, d.callback, None)
        await d


# ---------------------------------------------------------------------------------------------- with a Clock


class _NameServers:
    """A RemotingClient stand-in: each REGISTER_BROKER waits until the test answers it."""

    def __init__(self) -> None:
        self.calls: list[Deferred[RemotingCommand]] = []
        self.requests: list[RemotingCommand] = []

    def invoke(self, addr: str, request: RemotingCommand, timeout: float) -> Deferred[RemotingCommand]:
        d: Deferred[RemotingCommand] = Deferred()
        self.calls.append(d)
        self.requests.append(request)
        return d

    def answer(self) -> None:
        self.calls[-1].callback(RemotingCommand.request(RequestCode.REGISTER_BROKER).response(ResponseCode.SUCCESS))


def test_registrations_of_topic_changes_are_coalesced(tmp_path: Path) -> None:
    clock = Clock()
    cfg = BrokerConfig(brokerName="broker-a", brokerClusterName="DefaultCluster", namesrvAddr="127.0.0.1:9876")
    namesrv = _NameServers()
    broker = SimpleNamespace(reactor=clock, config=cfg, topics=TopicConfigManager(cfg, tmp_path))
    registration = BrokerRegistration(broker, namesrv)  # type: ignore[arg-type]
    for _ in range(100):
        registration.topics_changed()
    assert namesrv.calls == []
    clock.advance(CHANGE_DELAY)
    assert len(namesrv.calls) == 1
    # Changes while it is in flight: exactly one more registration, after it.
    for _ in range(100):
        registration.topics_changed()
    clock.advance(10 * CHANGE_DELAY)
    assert len(namesrv.calls) == 1
    namesrv.answer()
    clock.advance(CHANGE_DELAY)
    assert len(namesrv.calls) == 2
    namesrv.answer()
    clock.advance(10 * CHANGE_DELAY)
    assert len(namesrv.calls) == 2
    # A change not yet registered when the broker stops is dropped (it is about to unregister).
    registration.topics_changed()
    registration.drop_changes()
    clock.advance(10 * CHANGE_DELAY)
    assert len(namesrv.calls) == 2


def test_registration_of_changes_carries_only_the_changed_topics(tmp_path: Path) -> None:
    clock = Clock()
    cfg = BrokerConfig(brokerName="broker-a", brokerClusterName="DefaultCluster", namesrvAddr="127.0.0.1:9876")
    namesrv = _NameServers()
    topics = TopicConfigManager(cfg, tmp_path)
    broker = SimpleNamespace(reactor=clock, config=cfg, topics=topics)
    registration = BrokerRegistration(broker, namesrv)  # type: ignore[arg-type]
    for name in ("New1", "New2"):
        topics.update_topic_config(TopicConfig(name, 2, 2))
        registration.topics_changed(name)
    clock.advance(CHANGE_DELAY)
    (request,) = namesrv.requests
    body = RegisterBrokerBody.from_json(fastjson.loads(request.body))
    assert set(body.topic_config_serialize_wrapper.topic_config_table) == {"New1", "New2"}
    assert body.topic_config_serialize_wrapper.data_version == topics.data_version
    namesrv.answer()
    registration.register_all()  # the periodic registration still carries everything
    assert (
        "TBW102"
        in RegisterBrokerBody.from_json(
            fastjson.loads(namesrv.requests[-1].body)
        ).topic_config_serialize_wrapper.topic_config_table
    )


def test_group_changes_share_writes(tmp_path: Path, writes: Counter[str]) -> None:
    clock = Clock()
    groups = SubscriptionGroupManager(
        BrokerConfig(brokerName="broker-a", brokerClusterName="DefaultCluster"), tmp_path, clock=clock
    )
    for i in range(1000):
        groups.find(f"auto{i}")
    assert writes["subscriptionGroup.json"] == 0
    clock.advance(PERSIST_DELAY)
    assert writes["subscriptionGroup.json"] == 1
    # Admin changes are answered once written; all those of one reactor turn share the next turn's write.
    fired: list[int] = []
    groups.update(SubscriptionGroupConfig("admin1")).addCallback(lambda _: fired.append(1))
    groups.delete("auto0").addCallback(lambda _: fired.append(2))
    assert fired == [] and writes["subscriptionGroup.json"] == 1
    clock.advance(0)
    assert fired == [1, 2] and writes["subscriptionGroup.json"] == 2
    table = fastjson.loads((tmp_path / "subscriptionGroup.json").read_bytes())["subscriptionGroupTable"]
    assert "admin1" in table and "auto999" in table and "auto0" not in table
    # Nothing changed: nothing to wait for, nothing written.
    assert groups.file.flush().called
    clock.advance(1)
    assert writes["subscriptionGroup.json"] == 2


def test_a_failed_write_is_retried_by_the_next_flush(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    cfg = BrokerConfig(brokerName="broker-a", brokerClusterName="DefaultCluster")
    topics = TopicConfigManager(cfg, tmp_path, clock=clock)
    write = managers.write_atomically

    def disk_full(path: Any, data: bytes) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(managers, "write_atomically", disk_full)
    failures: list[Any] = []
    topics.create_topic_in_send_message_method("Auto", "TBW102", 4)
    topics.file.flush().addErrback(failures.append)
    clock.advance(0)
    assert len(failures) == 1 and not (tmp_path / "topics.json").exists()
    clock.advance(10)  # not retried on its own
    monkeypatch.setattr(managers, "write_atomically", write)
    # The broker flushes at stop: the change that failed to reach the disk is written then.
    assert not topics.file.flush().called
    clock.advance(0)
    assert "Auto" in fastjson.loads((tmp_path / "topics.json").read_bytes())["topicConfigTable"]


@pytest_twisted.ensureDeferred
async def test_a_silent_name_server_delays_a_topic_creating_send_by_a_second_at_most(make_broker) -> None:
    from twisted.internet.protocol import Factory, Protocol

    silent = reactor.listenTCP(0, Factory.forProtocol(Protocol), interface="127.0.0.1")  # reads, never answers
    b = make_broker(namesrvAddr=f"127.0.0.1:{silent.getHost().port}")
    b.start()
    try:
        t0 = time.monotonic()
        resp = await send(b, "CreatedWhileNameServerIsSilent", b"x", {})
        waited = time.monotonic() - t0
        assert resp.code == ResponseCode.SUCCESS
        assert 0.9 <= waited < 4.0, waited  # the registration's own timeout is 6 s
    finally:
        await b.stop()
        await silent.stopListening()
