"""What operators see of replication: GET_BROKER_HA_STATUS (mqadmin haStatus) on a master and on its slave."""

from __future__ import annotations

import pytest_twisted

from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from tests.broker.conftest import make_broker, remoting  # noqa: F401
from tests.ha.test_replication import caught_up, fill, pair  # noqa: F401


@pytest_twisted.ensureDeferred
async def test_ha_status_of_a_master_and_its_slave(pair) -> None:  # noqa: F811
    master, slave = pair
    m, s = master.controller, slave.start()
    await fill(master, 30, seed=7)
    await caught_up(m, s)
    request = RemotingCommand.request(RequestCode.GET_BROKER_HA_STATUS)
    resp = await master.call(request)
    assert resp.code == ResponseCode.SUCCESS
    info = fastjson.loads(resp.body)
    end = m.store.commit_log.max_offset
    assert info["master"] is True and info["masterCommitLogMaxOffset"] == end
    assert info["inSyncSlaveNums"] == 1
    (conn,) = info["haConnectionInfo"]
    assert conn["slaveAckOffset"] == end and conn["diff"] == 0 and conn["inSync"] is True
    assert conn["transferFromWhere"] == end and conn["addr"].startswith("127.0.0.1:")
    assert m.ha_service.slave_fall_behind() == 0

    resp = await slave.call(RemotingCommand.request(RequestCode.GET_BROKER_HA_STATUS))
    info = fastjson.loads(resp.body)
    client = info["haClientRuntimeInfo"]
    assert info["master"] is False and client["activated"] is True
    assert client["masterAddr"] == f"127.0.0.1:{m.config.haListenPort}" and client["maxOffset"] == end
    assert client["lastReadTimestamp"] > 0
