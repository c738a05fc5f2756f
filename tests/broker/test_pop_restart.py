"""POP state across a SIGKILL of the broker process: acked pops stay acked, unacked ones come back after their
invisible time, and every acknowledged send is still there (checkpoints, acks and the group's offset are in the
commit log and consumerOffset.json, the revive service starts again from the revive group's offset)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest_twisted
from twisted.internet import reactor

from compat_tests.servers import GatewayServers, call
from gateway.client.api import MQClientAPI, PopResult
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.extra_info import PROPERTY_POP_CK
from tests.broker.conftest import sleep
from tests.broker.test_broker_server import send_header
from tests.broker.test_pop import pop_header

TOPIC = "PopRestart"
GROUP = "pop-restart"
# Revive passes every 200 ms; offsets reach consumerOffset.json every 500 ms.
CONFIG = {"reviveInterval": "200", "reviveMaxSlow": "1", "flushConsumerOffsetInterval": "500"}


async def pop_all(client: MQClientAPI, addr: str, seconds: float, invisible_ms: int) -> list[PopResult]:
    """Pop until ``seconds`` pass with nothing more coming."""
    results = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        result = await client.pop_message(addr, "broker-a", pop_header(TOPIC, GROUP, invisible_ms=invisible_ms), 10)
        if result.messages:
            results.append(result)
        else:
            await sleep(0.2)
    return results


@pytest_twisted.ensureDeferred
async def test_sigkill_keeps_acked_pops_acked_and_brings_unacked_back(tmp_path: Path) -> None:
    servers = GatewayServers(tmp_path, CONFIG).start()
    remoting = RemotingClient(reactor)
    try:
        servers.create_topic(TOPIC, 1)
        sent = [b"m%d" % i for i in range(6)]
        for body in sent:
            req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_header(TOPIC, {}), body)
            assert call(servers.broker_addr, req).code == ResponseCode.SUCCESS
        client = MQClientAPI(remoting, [servers.namesrv_addr])
        first = await client.pop_message(
            servers.broker_addr, "broker-a", pop_header(TOPIC, GROUP, invisible_ms=4000), 10
        )
        assert [m.body for m in first.messages] == sent
        for m in first.messages[:3]:
            await client.ack_message(servers.broker_addr, GROUP, TOPIC, m.properties[PROPERTY_POP_CK])
        await sleep(1.0)  # the group's offset reaches its file (flushConsumerOffsetInterval)
        servers.kill()
        await remoting.close()

        servers.start()
        remoting = RemotingClient(reactor)
        client = MQClientAPI(remoting, [servers.namesrv_addr])
        req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_header(TOPIC, {}), b"after")
        assert call(servers.broker_addr, req).code == ResponseCode.SUCCESS
        # The new message at once (the group's offset went on from 6, nothing acked again); then, once the
        # invisible time is over, the three unacked ones, once, from the retry topic.
        back = await pop_all(client, servers.broker_addr, 8.0, 60000)
        assert [m.body for m in back[0].messages] == [b"after"]
        revived = back[1:]
        assert sorted(m.body for r in revived for m in r.messages) == sent[3:], back
        assert all(m.reconsume_times == 1 for r in revived for m in r.messages)
        assert all(r.pop_time >= first.pop_time + 4000 for r in revived)
    finally:
        servers.kill()
        await remoting.close()
