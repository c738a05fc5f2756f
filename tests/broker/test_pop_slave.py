"""POP on a master with a slave: the revive group's offsets are consumer offsets, which the slave copies."""

from __future__ import annotations

from pathlib import Path

import pytest_twisted

from gateway.broker.pop.records import REVIVE_GROUP, revive_topic
from gateway.remoting.client import RemotingClient
from tests.broker.conftest import BrokerUnderTest, remoting  # noqa: F401
from tests.namesrv.conftest import namesrv, namesrv_config  # noqa: F401

from .test_pop import POP_CONFIG, fill, pop, pop_header, pop_until


@pytest_twisted.ensureDeferred
async def test_slave_copies_revive_offsets(tmp_path: Path, remoting: RemotingClient, namesrv) -> None:  # noqa: F811
    common = {"namesrvAddr": f"127.0.0.1:{namesrv.port}", "brokerName": "broker-a", **POP_CONFIG}
    master = BrokerUnderTest(tmp_path / "master", remoting, **common)
    slave = BrokerUnderTest(tmp_path / "slave", remoting, brokerRole="SLAVE", brokerId="1", **common)
    await master.start().when_ready()
    await slave.start().when_ready()
    try:
        await fill(master, "PopHa", [b"x"])
        await pop(remoting, master, pop_header("PopHa", invisible_ms=1000))
        back = await pop_until(remoting, master, "PopHa", 8.0, invisible_ms=60000)
        assert [m.body for m in back.messages] == [b"x"]
        assert master.controller is not None and slave.controller is not None
        topic = revive_topic("DefaultCluster")
        committed = {q: master.controller.offsets.query_offset(REVIVE_GROUP, topic, q) for q in range(8)}
        assert max(committed.values()) >= 0
        await slave.controller.slave_sync.sync_all()
        assert {q: slave.controller.offsets.query_offset(REVIVE_GROUP, topic, q) for q in range(8)} == committed
    finally:
        await slave.stop()
        await master.stop()
