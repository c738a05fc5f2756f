"""Operations of POP consumption on a real broker: the console's consumer groups and /metrics (RocketMQ 5's
pop and consumer names) as messages are popped, acked and revived."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_twisted
from twisted.internet.threads import deferToThread

from gateway.broker.pop.inflight import PopInflightCounter
from gateway.remoting.client import RemotingClient
from gateway.remoting.extra_info import PROPERTY_POP_CK

from . import test_pop_fifo as fifo
from .conftest import BrokerUnderTest, remoting, sleep  # noqa: F401
from .test_broker_server import create_topic
from .test_console import _get
from .test_metrics import sample, scrape
from .test_pop import POP_CONFIG, api, fill, pop, pop_header

BASE = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a"}


@pytest_twisted.async_yield_fixture
async def ops_broker(tmp_path: Path, remoting: RemotingClient) -> AsyncIterator[BrokerUnderTest]:  # noqa: F811
    b = BrokerUnderTest(tmp_path, remoting, metricsExporterType="PROM", metricsPromExporterPort="0", **POP_CONFIG)
    b.start()
    yield b
    await b.stop()


async def wait_for(broker: BrokerUnderTest, name: str, value: float, seconds: float = 10.0, **labels: str) -> dict:
    samples: dict[str, float] = {}
    for _ in range(int(seconds / 0.2)):
        samples = await scrape(broker)
        if sample(samples, name, **labels) == value:
            break
        await sleep(0.2)
    assert sample(samples, name, **labels) == value, (name, labels)
    return samples


@pytest_twisted.ensureDeferred
async def test_console_and_metrics_follow_pops_acks_and_revivals(
    ops_broker: BrokerUnderTest,
    remoting: RemotingClient,  # noqa: F811
) -> None:
    broker = ops_broker
    await fill(broker, "OpsTopic", [b"o0", b"o1", b"o2", b"o3", b"o4"])
    popped = await pop(remoting, broker, pop_header("OpsTopic", "ops_cg", invisible_ms=1000, max_nums=3))
    assert len(popped.messages) == 3

    assert broker.controller is not None
    console = f"http://127.0.0.1:{broker.controller.config.metricsPromExporterPort}/console"
    status, page = await deferToThread(_get, f"{console}/groups")
    assert status == 200
    # group, clients online, consume type, model, lag, inflight
    row = '>ops_cg</a></td><td class="n">0</td><td>POP</td><td>-</td><td class="n">2</td><td class="n">3</td></tr>'
    assert row in page
    status, page = await deferToThread(_get, f"{console}/groups?group=ops_cg")
    assert status == 200 and "<p>Consume type: POP</p>" in page and "<p>Messages in flight: 3</p>" in page
    # topic, queue, broker offset, consumer offset, lag, inflight
    assert '<td>OpsTopic</td><td class="n">0</td><td class="n">5</td><td class="n">3</td><td class="n">2</td>' in page

    group = {**BASE, "topic": "OpsTopic", "consumer_group": "ops_cg"}
    samples = await scrape(broker)
    assert sample(samples, "rocketmq_consumer_inflight_messages", **group) == 3
    assert sample(samples, "rocketmq_consumer_ready_messages", **group) == 2
    ck_put = {**group, "revive_message_type": "CK", "put_status": "PUT_OK"}
    assert sample(samples, "rocketmq_pop_revive_in_message_total", **ck_put) == 1
    assert sample(samples, "rocketmq_messages_out_total", **group) == 3

    await api(remoting).ack_message(broker.addr, "ops_cg", "OpsTopic", popped.messages[0].properties[PROPERTY_POP_CK])
    samples = await scrape(broker)
    assert sample(samples, "rocketmq_consumer_inflight_messages", **group) == 2
    ack_put = {**group, "revive_message_type": "ACK", "put_status": "PUT_OK"}
    assert sample(samples, "rocketmq_pop_revive_in_message_total", **ack_put) == 1

    # The 2 not acked come back through the pop retry topic once their second is over: no longer in flight.
    retry = {**group, "put_status": "PUT_OK"}
    samples = await wait_for(broker, "rocketmq_pop_revive_retry_messages_total", 2, **retry)
    assert sample(samples, "rocketmq_consumer_inflight_messages", **group) == 0
    assert sample(samples, "rocketmq_pop_revive_out_message_total", **group, revive_message_type="CK") == 1
    assert sample(samples, "rocketmq_pop_revive_out_message_total", **group, revive_message_type="ACK") == 1
    assert any(k.startswith("rocketmq_pop_revive_lag{") for k in samples)
    assert any(k.startswith("rocketmq_pop_revive_latency{") for k in samples)
    status, page = await deferToThread(_get, f"{console}/groups?group=ops_cg")
    assert "<p>Messages in flight: 0</p>" in page


@pytest_twisted.ensureDeferred
async def test_orderly_pops_count_one_batch_per_queue(broker: BrokerUnderTest) -> None:
    b = broker
    await create_topic(b, fifo.TOPIC, 1)
    await fifo.fill(b, 0, ["f0", "f1", "f2"])
    first = await fifo.pop(b, max_nums=2, invisible_ms=300)
    assert first.bodies() == ["f0", "f1"]
    assert b.controller is not None
    inflight = b.controller.pop.inflight
    assert inflight.get(fifo.TOPIC, fifo.GROUP, 0) == 2
    # Its invisible time over, the batch is popped again: counted once, not twice.
    await sleep(0.4)
    again = await fifo.pop(b, max_nums=2, invisible_ms=60_000)
    assert again.bodies() == ["f0", "f1"]
    assert inflight.get(fifo.TOPIC, fifo.GROUP, 0) == 2
    assert (await fifo.ack(b, again, again.messages[0])).code == 0
    assert inflight.get(fifo.TOPIC, fifo.GROUP, 0) == 1
    assert (await fifo.ack(b, again, again.messages[1])).code == 0
    assert inflight.get(fifo.TOPIC, fifo.GROUP, 0) == 0


def test_inflight_counter_passes_over_pops_before_start_and_drops_empty_queues() -> None:
    counter = PopInflightCounter(start_time=1000)
    counter.increment("T", "g", 0, 3)
    counter.decrement("T", "g", 999, 0, 1)  # popped before this broker started: never counted here
    assert counter.get("T", "g", 0) == 3
    counter.decrement("T", "g", 1000, 0, 5)
    assert counter.get("T", "g", 0) == 0 and list(counter.items()) == []
    counter.increment("T", "g", 1, 2)
    counter.increment("U", "g", 0, 1)
    counter.clear_group("g")
    assert list(counter.items()) == []
