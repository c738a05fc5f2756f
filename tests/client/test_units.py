"""Client pieces that need no server: allocation, message ids, queue selection, process queues, routes."""

from __future__ import annotations

import os
import socket
import struct

from gateway.client.message_id import create_uniq_id, local_ip
from gateway.client.process_queue import ProcessQueue
from gateway.client.rebalance import allocate_averagely
from gateway.client.route import TopicPublishInfo, default_topic_route, publish_queues, subscribe_queues
from gateway.remoting.bodies import BrokerData, MessageQueue, QueueData, TopicRouteData
from gateway.remoting.message import MessageExt


def _queues(n: int, broker: str = "b") -> list[MessageQueue]:
    return [MessageQueue("t", broker, i) for i in range(n)]


def test_allocate_averagely_matches_java() -> None:
    mqs = _queues(10)
    cids = ["c0", "c1", "c2"]
    shares = [allocate_averagely(c, mqs, cids) for c in cids]
    # 10 over 3: the first id gets one more, blocks are consecutive.
    assert [[mq.queue_id for mq in s] for s in shares] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    # More consumers than queues: one each, the rest idle.
    assert [len(allocate_averagely(f"c{i}", _queues(2), [f"c{j}" for j in range(4)])) for i in range(4)] == [1, 1, 0, 0]
    assert allocate_averagely("stranger", mqs, cids) == []


def test_allocate_averagely_covers_every_queue_once() -> None:
    for n_mq in range(1, 20):
        for n_cid in range(1, 8):
            mqs, cids = _queues(n_mq), [f"c{i}" for i in range(n_cid)]
            allocated = [mq for c in cids for mq in allocate_averagely(c, mqs, cids)]
            assert sorted(allocated) == mqs


def test_uniq_id_layout() -> None:
    ids = [create_uniq_id() for _ in range(1000)]
    assert len(set(ids)) == 1000
    raw = bytes.fromhex(ids[0])
    assert len(ids[0]) == 32 and ids[0] == ids[0].upper()
    assert raw[:4] == socket.inet_aton(local_ip())
    assert struct.unpack(">H", raw[4:6])[0] == os.getpid() & 0xFFFF
    counters = [struct.unpack(">H", bytes.fromhex(i)[14:16])[0] for i in ids]
    assert counters[1] == (counters[0] + 1) & 0xFFFF


def test_select_one_message_queue_avoids_the_failed_broker() -> None:
    info = TopicPublishInfo(_queues(2, "a") + _queues(2, "b"), send_which_queue=0)
    picks = [info.select_one_message_queue("a").broker_name for _ in range(6)]
    assert picks == ["b"] * 6
    assert {info.select_one_message_queue().queue_id for _ in range(4)} == {0, 1}


def _msg(offset: int) -> MessageExt:
    return MessageExt("t", b"x" * 10, 0, {}, 0, offset, 0, 0, 0, "1.2.3.4:5", 0, "1.2.3.4:5", 0, 0, 0, 0, "id")


def test_process_queue_commits_the_lowest_unconsumed_offset() -> None:
    pq = ProcessQueue()
    assert pq.remove_messages([_msg(0)]) == -1
    msgs = [_msg(o) for o in range(5, 10)]
    pq.put_messages(msgs)
    assert (pq.msg_count, pq.msg_size, pq.max_span()) == (5, 50, 4)
    assert pq.remove_messages([msgs[1], msgs[2]]) == 5  # 5 is still being consumed
    assert pq.remove_messages([msgs[0]]) == 8
    assert pq.remove_messages([msgs[3], msgs[4]]) == 10  # all done: one past the highest
    assert pq.msg_size == 0


def test_routes_to_queues() -> None:
    route = TopicRouteData(
        queue_datas=[QueueData("b2", 8, 8, 6), QueueData("b1", 8, 2, 7), QueueData("ro", 3, 3, 4)],
        broker_datas=[
            BrokerData("c", "b1", {0: "h:1"}),
            BrokerData("c", "b2", {1: "h:2"}),
            BrokerData("c", "ro", {0: "h:3"}),
        ],
    )
    # Writable queues of brokers with a master only; readable queues of all.
    assert publish_queues("t", route) == [MessageQueue("t", "b1", 0), MessageQueue("t", "b1", 1)]
    assert len(subscribe_queues("t", route)) == 8 + 8 + 3
    # TBW102 stand-in: min(4, readQueueNums) queues per broker.
    assert [(q.read_queue_nums, q.write_queue_nums) for q in default_topic_route(route, 4).queue_datas] == [
        (4, 4),
        (4, 4),
        (3, 3),
    ]
