"""SlaveSynchronize: a slave copies topics, consumer offsets, delay offsets and groups from its master.

A real NameServer, a master and a slave broker in this process on loopback; the slave learns the master from
its REGISTER_BROKER reply, as Apache 4.9.8 does (../shared/golden/ha/slave-sync-requests.txt).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_twisted

from gateway.broker import slave_sync
from gateway.remoting import fastjson
from gateway.remoting.bodies import SubscriptionGroupConfig
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import CreateTopicRequestHeader, UpdateConsumerOffsetRequestHeader
from tests.broker.conftest import BrokerUnderTest, remoting, sleep  # noqa: F401
from tests.namesrv.conftest import namesrv, namesrv_config  # noqa: F401

SYNC_CODES = (
    RequestCode.GET_ALL_TOPIC_CONFIG,
    RequestCode.GET_ALL_CONSUMER_OFFSET,
    RequestCode.GET_ALL_DELAY_OFFSET,
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
)


class Pair:
    def __init__(self, master: BrokerUnderTest, slave: BrokerUnderTest) -> None:
        self.master = master
        self.slave = slave

    async def start(self) -> None:
        await self.master.start().when_ready()
        await self.slave.start().when_ready()

    async def stop(self) -> None:
        await self.slave.stop()
        await self.master.stop()


def make_pair(tmp_path: Path, client: RemotingClient, namesrv_addr: str) -> Pair:
    common = {"namesrvAddr": namesrv_addr, "brokerName": "broker-ha", "brokerClusterName": "HaCluster"}
    master = BrokerUnderTest(tmp_path / "master", client, **common)
    slave = BrokerUnderTest(tmp_path / "slave", client, brokerRole="SLAVE", brokerId="1", **common)
    return Pair(master, slave)


@pytest_twisted.async_yield_fixture
async def pair(tmp_path: Path, remoting: RemotingClient, namesrv) -> AsyncIterator[Pair]:  # noqa: F811
    p = make_pair(tmp_path, remoting, f"127.0.0.1:{namesrv.port}")
    await p.start()
    yield p
    await p.stop()


async def populate(master: BrokerUnderTest) -> None:
    """A topic, committed offsets, a subscription group and a delay offset on the master."""
    for topic in ("SyncTopic", "DoomedTopic"):
        header = CreateTopicRequestHeader(topic, "TBW102", 4, 4, 6, "SINGLE_TAG").encode()
        resp = await master.call(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    for qid, offset in ((0, 7), (3, 42)):
        header = UpdateConsumerOffsetRequestHeader("sync_cg", "SyncTopic", qid, offset).encode()
        resp = await master.call(RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    body = fastjson.dumps(SubscriptionGroupConfig("sync_cg", retry_max_times=3))
    resp = await master.call(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert master.controller is not None
    master.controller.schedule.offset_table[3] = 5  # no request sets it; delivery does, which needs time


async def answers(broker: BrokerUnderTest) -> dict[int, RemotingCommand]:
    return {code: await broker.call(RemotingCommand.request(code, language="JAVA")) for code in SYNC_CODES}


def config_file(broker: BrokerUnderTest, name: str) -> dict:
    return fastjson.loads((broker.root / "store" / "config" / name).read_bytes())


@pytest_twisted.ensureDeferred
async def test_slave_learns_master_and_copies_its_tables(pair: Pair) -> None:
    master, slave = pair.master, pair.slave
    assert slave.controller is not None and master.controller is not None
    assert slave.controller.slave_sync.master_addr == master.addr  # from the REGISTER_BROKER reply
    await populate(master)
    assert "SyncTopic" not in slave.controller.topics.table

    await slave.controller.slave_sync.sync_all()

    s, m = slave.controller, master.controller
    assert s.topics.table == m.topics.table and "SyncTopic" in s.topics.table
    assert s.topics.data_version == m.topics.data_version
    assert s.offsets.offset_table["SyncTopic@sync_cg"] == {0: 7, 3: 42}
    assert s.schedule.offset_table == {3: 5}
    assert s.groups.table["sync_cg"].retry_max_times == 3
    assert s.groups.data_version == m.groups.data_version
    # ...and on disk, where a restarted slave (or a promoted one) reads them.
    assert "SyncTopic" in config_file(slave, "topics.json")["topicConfigTable"]
    assert config_file(slave, "consumerOffset.json")["offsetTable"]["SyncTopic@sync_cg"] == {0: 7, 3: 42}
    assert config_file(slave, "delayOffset.json") == {"offsetTable": {3: 5}}
    assert config_file(slave, "subscriptionGroup.json")["subscriptionGroupTable"]["sync_cg"]["retryMaxTimes"] == 3

    # The slave now answers the four requests as its master does.
    mine, theirs = await answers(slave), await answers(master)
    for code in SYNC_CODES:
        assert mine[code].code == theirs[code].code == ResponseCode.SUCCESS
        assert fastjson.loads(mine[code].body) == fastjson.loads(theirs[code].body), code

    # A topic deleted on the master leaves the slave at the next pass.
    header = {"topic": "DoomedTopic"}
    resp = await master.call(RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, header))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    await s.slave_sync.sync_all()
    assert "DoomedTopic" not in s.topics.table
    assert "DoomedTopic" not in config_file(slave, "topics.json")["topicConfigTable"]


@pytest_twisted.ensureDeferred
async def test_slave_keeps_its_changes_refused_and_offsets_merged(pair: Pair) -> None:
    """Offsets are merged (Java's putAll): a group only the slave knows keeps its offsets; the slave still
    refuses admin changes."""
    master, slave = pair.master, pair.slave
    assert slave.controller is not None
    slave.controller.offsets.commit_offset("slave_only_cg", "SyncTopic", 1, 9)
    await populate(master)
    await slave.controller.slave_sync.sync_all()
    assert slave.controller.offsets.offset_table["SyncTopic@slave_only_cg"] == {1: 9}
    assert slave.controller.offsets.offset_table["SyncTopic@sync_cg"] == {0: 7, 3: 42}
    header = CreateTopicRequestHeader("SlaveTopic", "TBW102", 1, 1, 6, "SINGLE_TAG").encode()
    resp = await slave.call(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header))
    assert resp.code != ResponseCode.SUCCESS


@pytest_twisted.ensureDeferred
async def test_sync_runs_periodically(
    tmp_path: Path,
    remoting: RemotingClient,  # noqa: F811
    namesrv,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(slave_sync, "SYNC_FIRST_DELAY", 0.1)
    monkeypatch.setattr(slave_sync, "SYNC_INTERVAL", 0.2)
    p = make_pair(tmp_path, remoting, f"127.0.0.1:{namesrv.port}")
    await p.start()
    try:
        await populate(p.master)
        assert p.slave.controller is not None
        for _ in range(50):
            if "SyncTopic@sync_cg" in p.slave.controller.offsets.offset_table:
                break
            await sleep(0.1)
        assert "SyncTopic" in p.slave.controller.topics.table
        assert p.slave.controller.offsets.offset_table["SyncTopic@sync_cg"] == {0: 7, 3: 42}
    finally:
        await p.stop()


@pytest_twisted.ensureDeferred
async def test_topics_come_over_vip_port_or_main_port_without_it(pair: Pair) -> None:
    master, slave = pair.master, pair.slave
    assert master.controller is not None and slave.controller is not None
    sync = slave.controller.slave_sync
    await populate(master)
    vip_bound = len(master.controller.ports) > 1  # listenPort-2 may be taken when ports are ephemeral
    await sync.sync_all()
    assert "SyncTopic" in slave.controller.topics.table
    assert (slave_sync.vip_addr(master.addr) in sync.client._channels) == vip_bound
    if vip_bound:
        await master.controller.ports.pop().stopListening()
        await sync.client.close()
    header = CreateTopicRequestHeader("LaterTopic", "TBW102", 1, 1, 6, "SINGLE_TAG").encode()
    resp = await master.call(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    await sync.sync_all()
    assert "LaterTopic" in slave.controller.topics.table
    assert slave_sync.vip_addr(master.addr) not in sync.client._channels


def golden_bodies() -> dict[int, bytes]:
    """The first reply body of each sync request in Apache 4.9.8's capture."""
    path = Path(__file__).resolve().parents[3] / "shared" / "golden" / "ha" / "slave-sync-requests.txt"
    if not path.exists():
        pytest.skip(f"{path} not present")
    bodies: dict[int, bytes] = {}
    code = None
    for line in path.read_text().splitlines():
        m = re.search(r"S->C .* reply to (\d+) ", line)
        if m:
            code = int(m.group(1))
        m = re.match(r"\s+body \d+ bytes \(text[^)]*\): (\{.*\})$", line)
        if m and code in SYNC_CODES and code not in bodies:
            bodies[code] = m.group(1).encode()
    return bodies


@pytest_twisted.ensureDeferred
async def test_master_answers_in_apache_shape(pair: Pair) -> None:
    """Compact fastjson bodies shaped like Apache's; extFields {} only on GET_ALL_TOPIC_CONFIG's reply."""
    golden = golden_bodies()
    await populate(pair.master)
    ours = await answers(pair.master)
    assert ours[RequestCode.GET_ALL_TOPIC_CONFIG].ext_fields == {}
    for code in SYNC_CODES[1:]:
        assert not ours[code].ext_fields
    for code in SYNC_CODES:
        body = ours[code].body
        assert b" " not in body and b"\n" not in body
        if code in golden:
            assert list(fastjson.loads(body)) == list(fastjson.loads(golden[code])), code
    assert re.fullmatch(rb'\{"offsetTable":\{3:5\}\}', ours[RequestCode.GET_ALL_DELAY_OFFSET].body)
    assert re.search(rb'"SyncTopic@sync_cg":\{0:7,3:42\}', ours[RequestCode.GET_ALL_CONSUMER_OFFSET].body)
    topic_body = fastjson.loads(ours[RequestCode.GET_ALL_TOPIC_CONFIG].body)
    golden_topic = fastjson.loads(golden[RequestCode.GET_ALL_TOPIC_CONFIG])
    assert sorted(topic_body["topicConfigTable"]["SyncTopic"]) == sorted(golden_topic["topicConfigTable"]["HaTopic"])
    group_body = fastjson.loads(ours[RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG].body)
    golden_group = fastjson.loads(golden[RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG])
    assert set(group_body["subscriptionGroupTable"]["sync_cg"]) >= set(
        golden_group["subscriptionGroupTable"]["ha_probe_cg"]
    )
