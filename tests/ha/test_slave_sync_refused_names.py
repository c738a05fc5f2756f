"""Issue 25 item 2: our slave follows an Apache 4.9.8 master whose tables hold names 4.9.8 allowed.

Apache 4.9.8 checks no group name: its tables hold a group named "" (written during an ordinary C++ client
run), dotted and long groups, their retry topics and offsets. The slave takes every legal entry of each sync
body, leaves the others out of its tables (one warning per table, again only when they change) and keeps them
in its state files, as Apache's slave would.

None of our servers sends such names, so the master here is a real TCP server that answers the four sync
requests with the bodies Apache 4.9.8 served for tests/broker/fixtures/apache-4.9.8-config (recorded in
fixtures/apache-4.9.8-sync/); compat_tests/test_apache_ha.py runs the same against Apache's own broker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import reactor
from twisted.logger import formatEvent, globalLogPublisher

from gateway.remoting import fastjson
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.dispatch import RequestDispatcher
from gateway.remoting.protocol import RemotingServerFactory
from tests.broker.conftest import BrokerUnderTest, remoting  # noqa: F401
from tests.broker.test_apache_state_files import DOTS, LEGAL_GROUP, LONG, REFUSED
from tests.namesrv.conftest import namesrv, namesrv_config  # noqa: F401
from tests.namesrv.support import register_request

# The bodies Apache's master served for the fixture store whose names REFUSED lists (the slave, like that test's
# broker, is given two delay levels).
BODIES = Path(__file__).parent / "fixtures" / "apache-4.9.8-sync"
SYNC_CODES = (
    RequestCode.GET_ALL_TOPIC_CONFIG,
    RequestCode.GET_ALL_CONSUMER_OFFSET,
    RequestCode.GET_ALL_DELAY_OFFSET,
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
)
# Each state file's sync request.
FILES = {
    "subscriptionGroup.json": RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
    "topics.json": RequestCode.GET_ALL_TOPIC_CONFIG,
    "consumerOffset.json": RequestCode.GET_ALL_CONSUMER_OFFSET,
    "delayOffset.json": RequestCode.GET_ALL_DELAY_OFFSET,
}


class RecordedMaster:
    """A master on 127.0.0.1 that answers the sync requests with ``bodies`` (request code → body)."""

    def __init__(self, bodies: dict[int, bytes]) -> None:
        self.bodies = bodies
        dispatcher = RequestDispatcher()
        for code in SYNC_CODES:
            dispatcher.register(code, lambda _channel, request: request.response(body=self.bodies[request.code]))
        self.port = reactor.listenTCP(0, RemotingServerFactory(dispatcher), interface="127.0.0.1")
        self.addr = f"127.0.0.1:{self.port.getHost().port}"


@pytest_twisted.async_yield_fixture
async def master() -> AsyncIterator[RecordedMaster]:
    m = RecordedMaster({code: (BODIES / f"{code.name}.json").read_bytes() for code in SYNC_CODES})
    yield m
    await m.port.stopListening()


@pytest_twisted.async_yield_fixture
async def warnings() -> AsyncIterator[list[str]]:
    """The text of every warning logged meanwhile."""
    seen: list[str] = []

    def observer(event: dict[str, Any]) -> None:
        if event.get("log_level") is not None and event["log_level"].name == "warn":
            seen.append(formatEvent(event))

    globalLogPublisher.addObserver(observer)
    yield seen
    globalLogPublisher.removeObserver(observer)


def _file(slave: BrokerUnderTest, name: str, key: str) -> dict[Any, Any]:
    return fastjson.loads((slave.root / "store" / "config" / name).read_bytes())[key]


def _warned(warnings: list[str], name: str) -> list[str]:
    return [w for w in warnings if f"{name} from master " in w]


@pytest_twisted.ensureDeferred
async def test_slave_takes_the_legal_entries_of_a_master_holding_names_we_refuse(
    tmp_path: Path,
    remoting: RemotingClient,  # noqa: F811
    namesrv,  # noqa: F811
    master: RecordedMaster,
    warnings: list[str],
) -> None:
    namesrv_addr = f"127.0.0.1:{namesrv.port}"
    registered = await remoting.invoke(namesrv_addr, register_request("broker-a", master.addr, {"TopicTest": 4}), 5)
    assert registered.code == ResponseCode.SUCCESS, registered.remark
    slave = BrokerUnderTest(
        tmp_path / "slave",
        remoting,
        namesrvAddr=namesrv_addr,
        brokerRole="SLAVE",
        brokerId="1",
        messageDelayLevel="1s 5s",
    )
    await slave.start().when_ready()
    try:
        s = slave.controller
        assert s is not None and s.slave_sync.master_addr == master.addr
        await s.slave_sync.sync_all()

        # Every legal entry is live: the group, its offsets, its retry topic, the long group's retry topic.
        assert LEGAL_GROUP in s.groups.table and not set(s.groups.table) & {"", DOTS, LONG}
        assert s.offsets.query_offset(LEGAL_GROUP, "TopicTest", 3) == 26
        assert {"TopicTest", "%RETRY%" + LEGAL_GROUP, "%RETRY%" + LONG} <= set(s.topics.table)
        assert "%RETRY%" + DOTS not in s.topics.table
        assert s.schedule.offset_table == {1: 0, 2: 0}
        # ...and what the slave tells its peers holds no refused name.
        for (name, key), names in REFUSED.items():
            answer = await slave.call(RemotingCommand.request(FILES[name]))
            assert answer.code == ResponseCode.SUCCESS and not set(fastjson.loads(answer.body)[key]) & names, name

        # One warning per table, naming its file, the master and each entry; the files keep the entries.
        recorded = {name: fastjson.loads((BODIES / f"{code.name}.json").read_bytes()) for name, code in FILES.items()}
        for (name, key), names in REFUSED.items():
            (warning,) = _warned(warnings, name)
            assert (
                f"from master {master.addr}: left out {len(names)} entr" in warning
                and "(kept in the file, never used)" in warning
            )
            written = _file(slave, name, key)
            assert {n: written.get(n) for n in names} == {n: recorded[name][key][n] for n in names}, name
        assert '"": The specified group is blank.' in _warned(warnings, "subscriptionGroup.json")[0]
        assert not list((tmp_path / "slave" / "store").glob(f"*/%RETRY%{DOTS}"))

        # The next passes warn no more while the master holds the same names...
        await s.slave_sync.sync_all()
        assert all(len(_warned(warnings, name)) == 1 for name, _key in REFUSED)
        # ...and once more for the table whose names change; the slave's file follows the master's.
        groups = fastjson.loads(master.bodies[RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG])
        del groups["subscriptionGroupTable"][""]
        groups["dataVersion"]["counter"] += 1
        master.bodies[RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG] = fastjson.dumps(groups)
        await s.slave_sync.sync_all()
        later = _warned(warnings, "subscriptionGroup.json")
        assert len(later) == 2 and "left out 2 entries" in later[1] and '""' not in later[1]
        assert set(_file(slave, "subscriptionGroup.json", "subscriptionGroupTable")) & {"", DOTS, LONG} == {DOTS, LONG}
        assert all(len(_warned(warnings, name)) == 1 for name, _key in REFUSED if name != "subscriptionGroup.json")
    finally:
        await slave.stop()
