"""An offset past the end: the master moves the consumer (PULL_OFFSET_MOVED), a slave, which may only be
behind, does not and sends it back to the group's broker (PULL_RETRY_IMMEDIATELY), as 4.9.8 does."""

from __future__ import annotations

import pytest_twisted

from gateway.remoting.codes import ResponseCode
from gateway.remoting.headers import PullMessageResponseHeader
from tests.broker.conftest import make_broker, remoting  # noqa: F401
from tests.broker.test_broker_server import pull_request
from tests.ha.test_replication import TOPIC, caught_up, fill, pair  # noqa: F401


@pytest_twisted.ensureDeferred
async def test_an_offset_past_the_end_is_corrected_by_the_master_only(pair) -> None:  # noqa: F811
    master, slave = pair
    s = slave.start()
    await fill(master, 8, seed=11)
    await caught_up(master.controller, s)
    s.registration.master_addr = master.addr  # (no NameServer here to name it)
    await s.slave_sync.sync_all()  # the slave knows the topic
    request = pull_request(TOPIC, 0, 1000, sub="*", timeout_ms=0)
    on_master = await master.call(request)
    assert on_master.code == ResponseCode.PULL_OFFSET_MOVED
    on_slave = await slave.call(pull_request(TOPIC, 0, 1000, sub="*", timeout_ms=0))
    assert on_slave.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert PullMessageResponseHeader.decode(on_slave.ext_fields).suggest_which_broker_id == 0
