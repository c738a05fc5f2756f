"""Issue 27 item 4 in one process: a broker whose commitlog is a one-member DLedger group (it elects itself)
takes every kind of put through the ledger, each answered once its entry is committed: plain, batch, delayed
(delivered by the master's schedule service), transactional (half message, then END_TRANSACTION commit) and a
consumer's send-back; the records sit at their entry's position + 48."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest_twisted

from compat_tests.servers import free_port
from gateway.broker.pop.records import REVIVE_GROUP, revive_topic
from gateway.remoting import fastjson
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import ConsumerSendMsgBackRequestHeader
from gateway.remoting.message import decode_offset_message_id, decode_record, encode_batch
from tests.dledger.test_server import partition

from .conftest import BrokerUnderTest, sleep
from .test_broker_server import create_topic, send, send_header
from .test_pop import POP_CONFIG, fill, pop, pop_header, pop_until
from .test_schedule import FAST_LEVELS, pull_all, wait_for
from .test_transaction import COMMIT, TransactionalProducer


def dledger_broker(make_broker) -> BrokerUnderTest:
    return make_broker(
        enableDLegerCommitLog="true",
        dLegerGroup="broker-a",
        dLegerPeers=f"n0-127.0.0.1:{free_port()}",
        dLegerSelfId="n0",
        minVoteIntervalMs="50",
        maxVoteIntervalMs="100",
        messageDelayLevel=FAST_LEVELS,
    )


async def until_master(broker: BrokerUnderTest, timeout: float = 10.0) -> None:
    controller = broker.controller
    assert controller is not None
    deadline = time.monotonic() + timeout
    while (controller.config.brokerId, controller.config.brokerRole) != (0, "SYNC_MASTER"):
        assert time.monotonic() < deadline, "the member did not become the master"
        await sleep(0.05)


@pytest_twisted.ensureDeferred
async def test_every_put_goes_through_the_ledger(make_broker) -> None:
    broker = dledger_broker(make_broker)
    controller = broker.start()
    producer = TransactionalProducer()
    try:
        await until_master(broker)
        ledger = controller.dledger.ledger
        await create_topic(broker, "DL", 2)

        resp = await send(broker, "DL", b"plain", {"KEYS": "k1"}, queue_id=1)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert resp.ext_fields["queueOffset"] == "0"
        entry = ledger.get(ledger.ledger_end_index)
        # The record's physical offset is its entry's position + 48 (DLedgerCommitLog's append hook).
        assert decode_offset_message_id(resp.ext_fields["msgId"])[1] == entry.pos + 48
        assert ledger.committed_index == ledger.ledger_end_index

        batch = encode_batch([(0, b"b1", ""), (0, b"b2", "")])
        req = RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, send_header("DL", {}, 1, batch=True), batch)
        resp = await broker.call(req)
        assert (resp.code, resp.ext_fields["queueOffset"]) == (ResponseCode.SUCCESS, "1"), resp.remark
        assert [m.body for m in await pull_all(broker, "DL", 1)] == [b"plain", b"b1", b"b2"]

        # Delayed: parked in SCHEDULE_TOPIC_XXXX, then delivered by the master's schedule service.
        resp = await send(broker, "DL", b"later", {"DELAY": "1"}, queue_id=0)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert [m.body for m in await wait_for(broker, "DL", 1, queue_id=0)] == [b"later"]

        # Transactional: the half message, then its commit, both through the ledger.
        await producer.register(broker)
        half = await producer.send_half(broker, "DL", b"tx", "U1")
        assert (await producer.end(broker, half, COMMIT)).code == ResponseCode.SUCCESS
        assert [m.body for m in await wait_for(broker, "DL", 4, queue_id=1)][-1] == b"tx"

        # A consumer's send-back goes to the group's retry topic (delay level 3 + reconsume times).
        (plain,) = [m for m in await pull_all(broker, "DL", 1) if m.body == b"plain"]
        header = ConsumerSendMsgBackRequestHeader(offset=plain.commitlog_offset, group="cg", delay_level=-1)
        resp = await broker.call(RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header.encode()))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert [m.body for m in await wait_for(broker, "%DLQ%cg", 1)] == [b"plain"]

        info = await broker.call(RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
        table = fastjson.loads(info.body)["table"]
        assert (table["dLedgerRole"], table["dLedgerLeaderId"], table["dLedgerSelfId"]) == ("LEADER", "n0", "n0")
        assert table["dLedgerCommittedIndex"] == table["dLedgerLedgerEndIndex"] == str(ledger.ledger_end_index)
    finally:
        await producer.client.close()
        await broker.stop()


def three_members(tmp_path, remoting, **settings: str) -> list[BrokerUnderTest]:
    """Members n0..n2 of one DLedger group in this process (not started)."""
    peers = ";".join(f"n{i}-127.0.0.1:{free_port()}" for i in range(3))
    return [
        BrokerUnderTest(
            tmp_path / f"n{i}",
            remoting,
            enableDLegerCommitLog="true",
            dLegerGroup="broker-a",
            dLegerPeers=peers,
            dLegerSelfId=f"n{i}",
            minVoteIntervalMs="50",
            maxVoteIntervalMs="150",
            messageDelayLevel=FAST_LEVELS,
            **{"heartBeatTimeIntervalMs": "200", **settings},
        )
        for i in range(3)
    ]


async def the_master(members: list[BrokerUnderTest], timeout: float = 10.0) -> BrokerUnderTest:
    deadline = time.monotonic() + timeout
    while not (masters := [m for m in members if m.controller.config.brokerId == 0]):
        assert time.monotonic() < deadline, "no master"
        await sleep(0.05)
    (master,) = masters
    return master


@pytest_twisted.ensureDeferred
async def test_the_masters_own_puts_in_a_three_member_group(tmp_path, remoting) -> None:
    """Three members in this process: commits come from the followers' acks, later than the puts, so the master's
    own re-puts (delay delivery, a transaction check-back's copy of the half message) are decided afterwards."""
    members = three_members(tmp_path, remoting, transactionCheckInterval="200", transactionTimeOut="600")
    producer = TransactionalProducer()
    try:
        for member in members:
            member.start()
        deadline = time.monotonic() + 10
        broker = await the_master(members)
        await create_topic(broker, "DL3", 2)
        resp = await send(broker, "DL3", b"later", {"DELAY": "1"}, queue_id=0)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert [m.body for m in await wait_for(broker, "DL3", 1, queue_id=0)] == [b"later"]
        # A half message nobody resolves is copied and checked back under the copy's offsets.
        await producer.register(broker)
        pending = await producer.send_half(broker, "DL3", b"pending", "P1")
        while not producer.checks:
            assert time.monotonic() < deadline + 10, "no check-back"
            await sleep(0.05)
        header, msg = producer.checks[0]
        assert msg.body == b"pending" and header.tran_state_table_offset > int(pending["queueOffset"])
        assert decode_offset_message_id(header.offset_msg_id)[1] == header.commit_log_offset
        answer = {"msgId": header.offset_msg_id, "queueOffset": str(header.tran_state_table_offset)}
        assert (await producer.end(broker, answer, COMMIT, check=True)).code == ResponseCode.SUCCESS
        assert [m.body for m in await wait_for(broker, "DL3", 1, queue_id=1)] == [b"pending"]
    finally:
        await producer.client.close()
        for member in members:
            await member.stop()


@pytest_twisted.ensureDeferred
async def test_the_ledgers_data_files_in_store_path_dledger_commitlog(tmp_path, remoting) -> None:
    data = tmp_path / "ledger-data"
    port = free_port()
    settings = {
        "enableDLegerCommitLog": "true",
        "dLegerGroup": "broker-a",
        "dLegerPeers": f"n0-127.0.0.1:{port}",
        "dLegerSelfId": "n0",
        "minVoteIntervalMs": "50",
        "maxVoteIntervalMs": "100",
        "storePathDLedgerCommitLog": str(data),
    }
    broker = BrokerUnderTest(tmp_path, remoting, **settings)
    broker.start()
    try:
        await until_master(broker)
        await create_topic(broker, "DP", 1)
        resp = await send(broker, "DP", b"in the data path", {})
        assert resp.code == ResponseCode.SUCCESS, resp.remark
    finally:
        await broker.stop()
    # DLedger's layout: data files there, the index and checkpoint under storePathRootDir/dledger-n0.
    assert [p.name for p in data.iterdir()] == ["00000000000000000000"]
    member_dir = tmp_path / "store" / "dledger-n0"
    assert not (member_dir / "data").exists() and (member_dir / "index").is_dir()
    # Opened again from there: the message is read back.
    broker = BrokerUnderTest(tmp_path, remoting, **settings)
    broker.start()
    try:
        await until_master(broker)
        assert [m.body for m in await pull_all(broker, "DP", 0)] == [b"in the data path"]
    finally:
        await broker.stop()


async def bodies(broker: BrokerUnderTest, topic: str) -> list[bytes]:
    """The bodies in the topic's queues 0 and 1, sorted."""
    found = []
    for queue_id in (0, 1):
        found += [m.body for m in await pull_all(broker, topic, queue_id)]
    return sorted(found)


@pytest_twisted.ensureDeferred
async def test_a_delivery_counts_once_committed_and_one_never_committed_is_delivered_again(tmp_path, remoting) -> None:
    """As Apache's services, which wait for the commit: the master's delay and timer deliveries and its transaction
    check's copy of a half message move their progress (the delay offset, the timer checkpoint, the half queue's
    offset, all of which a slave copies) only once a majority holds them. A master cut off from its followers
    appends them but never commits them; the new master, holding the progress its slave copied meanwhile, does
    them again (once)."""
    # Heartbeats of 1 s: the cut-off master keeps its leadership for 3 s, past the deliveries' and check's time.
    members = three_members(
        tmp_path,
        remoting,
        heartBeatTimeIntervalMs="1000",
        maxWaitAckTimeMs="10000",
        transactionCheckInterval="200",
        transactionTimeOut="1000",
    )
    producer = TransactionalProducer()
    heal = None
    try:
        for member in members:
            member.start()
        master = await the_master(members)
        await create_topic(master, "DLD", 2)
        assert (await send(master, "DLD", b"delayed", {"DELAY": "1"})).code == ResponseCode.SUCCESS
        deliver_ms = int(time.time() * 1000) + 1000
        resp = await send(master, "DLD", b"timed", {"TIMER_DELIVER_MS": str(deliver_ms)})
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        await producer.send_half(master, "DLD", b"half", "H1")
        ledger = master.controller.dledger.ledger
        committed = ledger.committed_index
        servers = {m.controller.config.dLegerSelfId: m.controller.dledger.server for m in members}
        heal = partition(SimpleNamespace(servers=servers), master.controller.config.dLegerSelfId)
        deadline = time.monotonic() + 5
        # Both deliveries and the half message's copy appended, none committed.
        while ledger.ledger_end_index < committed + 3:
            assert time.monotonic() < deadline, "the deliveries and the copy were not appended"
            await sleep(0.02)
        assert ledger.committed_index == committed
        assert master.controller.schedule.offset_table.get(1, 0) == 0
        assert master.controller.timer.commit_offset == 0
        assert master.controller.offsets.query_offset("CID_RMQ_SYS_TRANS", "RMQ_SYS_TRANS_HALF_TOPIC", 0) <= 0
        # A slave copying the master's topics and progress now copies none of that progress.
        for follower in (m for m in members if m is not master):
            follower.controller.registration.master_addr = master.addr
            await follower.controller.slave_sync.sync_all()
            assert follower.controller.schedule.offset_table.get(1, 0) == 0
            timer = follower.controller.timer
            assert (timer.commit_offset, timer.delivered) == (0, set())
            assert follower.controller.offsets.query_offset("CID_RMQ_SYS_TRANS", "RMQ_SYS_TRANS_HALF_TOPIC", 0) <= 0
        # Without a majority the cut-off master steps down; the others elect one that delivers both and checks
        # the half message back.
        new = await the_master([m for m in members if m is not master])
        await producer.register(new)
        assert len(await wait_for(new, "DLD", 2)) == 2
        while not producer.checks:
            assert time.monotonic() < deadline + 10, "no check-back from the new master"
            await sleep(0.05)
        header, msg = producer.checks[0]
        assert msg.body == b"half"
        answer = {"msgId": header.offset_msg_id, "queueOffset": str(header.tran_state_table_offset)}
        assert (await producer.end(new, answer, COMMIT, check=True)).code == ResponseCode.SUCCESS
        assert [m.body for m in await wait_for(new, "DLD", 1, queue_id=1)] == [b"half"]
        await sleep(1.0)  # nothing delivered twice
        everything = [b"delayed", b"half", b"timed"]
        assert await bodies(new, "DLD") == everything
        heal()
        heal = None
        # Back, the old master follows and its uncommitted entries are cut: every log holds each once.
        deadline = time.monotonic() + 10
        while await bodies(master, "DLD") != everything:
            assert time.monotonic() < deadline, "the old master did not catch up"
            await sleep(0.1)
    finally:
        if heal is not None:
            heal()
        await producer.client.close()
        for member in members:
            await member.stop()


@pytest_twisted.ensureDeferred
async def test_pops_and_revives_count_once_committed(tmp_path, remoting) -> None:
    """Pop on a DLedger ledger: the group's offset moves past popped messages only once their checkpoint is
    committed, and the revive offset past a checkpoint only once its message's re-put to the retry topic is. A
    master cut off from its followers answers a pop and revives, into entries never committed; the new master,
    from the offsets its slave copied, revives the one and hands out the other again."""
    members = three_members(tmp_path, remoting, heartBeatTimeIntervalMs="1500", maxWaitAckTimeMs="10000", **POP_CONFIG)
    heal = None
    try:
        for member in members:
            member.start()
        master = await the_master(members)
        await fill(master, "DLP", [b"popped"])
        popped = await pop(remoting, master, pop_header("DLP", invisible_ms=2000))
        assert [m.body for m in popped.messages] == [b"popped"]
        assert (await send(master, "DLP", b"second", {})).code == ResponseCode.SUCCESS
        controller = master.controller
        topic = revive_topic("DefaultCluster")
        ledger = controller.dledger.ledger
        # The checkpoint reaches its revive queue (through the timer topic) a second before the revive time.
        deadline = time.monotonic() + 10
        while sum(controller.store.get_max_offset_in_queue(topic, q) for q in range(8)) == 0:
            assert time.monotonic() < deadline, "the checkpoint did not reach its revive queue"
            await sleep(0.05)
        while ledger.committed_index != ledger.ledger_end_index:
            await sleep(0.02)
        committed = ledger.committed_index
        servers = {m.controller.config.dLegerSelfId: m.controller.dledger.server for m in members}
        heal = partition(SimpleNamespace(servers=servers), controller.config.dLegerSelfId)
        # Popped while cut off: answered, its checkpoint appended and never committed, the offset left.
        second = await pop(remoting, master, pop_header("DLP", invisible_ms=60000))
        assert [m.body for m in second.messages] == [b"second"]
        assert controller.offsets.query_offset("pg", "DLP", 0) == 1
        again = await pop(remoting, master, pop_header("DLP", invisible_ms=60000))
        assert again.messages == []  # the queue is not popped while its checkpoint awaits the commit

        def appended_to_retry() -> bool:
            return any(
                decode_record(ledger.get(i).body).topic.startswith("%RETRY%")
                for i in range(committed + 1, ledger.ledger_end_index + 1)
            )

        while not appended_to_retry():  # the revived message appended, never committed
            assert time.monotonic() < deadline, "nothing revived"
            await sleep(0.02)
        assert ledger.committed_index == committed
        assert all(controller.offsets.query_offset(REVIVE_GROUP, topic, q) < 0 for q in range(8))
        for follower in (m for m in members if m is not master):
            follower.controller.registration.master_addr = master.addr
            # A table whose fetch times out in a loaded suite is logged, not raised: sync until the topic came.
            for _ in range(5):
                await follower.controller.slave_sync.sync_all()
                if follower.controller.topics.select("DLP") is not None:
                    break
            assert follower.controller.topics.select("DLP") is not None, "the topic never reached the follower"
            assert all(follower.controller.offsets.query_offset(REVIVE_GROUP, topic, q) < 0 for q in range(8))
            assert follower.controller.offsets.query_offset("pg", "DLP", 0) == 1
        new = await the_master([m for m in members if m is not master])
        got = []
        while len(got) < 2:
            assert time.monotonic() < deadline + 15, f"only {got} from the new master"
            back = await pop_until(remoting, new, "DLP", 2.0, invisible_ms=60000)
            got += [(m.body, m.reconsume_times) for m in back.messages]
        assert sorted(got) == [(b"popped", 1), (b"second", 0)]
    finally:
        if heal is not None:
            heal()
        for member in members:
            await member.stop()
