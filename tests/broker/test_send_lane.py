"""The C send lane against the Python send processor: the same requests, sent over real sockets to a broker with
the lane and to one without, get the same answer bytes and leave the same records, consume queues and index."""

from __future__ import annotations

import random
import socket
import struct
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import threads
from twisted.logger import globalLogPublisher

from compat_tests.servers import create_topic_request
from gateway.acl.signer import SessionCredentials
from gateway.broker import send_lane
from gateway.remoting.codec import FrameDecoder, encode_parts
from gateway.remoting.codes import RequestCode, ResponseCode, SerializeType
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import SendMessageRequestHeader
from gateway.remoting.message import decode_records, encode_batch, properties_to_string
from tests.acl.conftest import ADMIN, PLAIN_ACL_YML, USER, signed

from .conftest import BrokerUnderTest

pytestmark = pytest.mark.skipif(send_lane._c_lane is None, reason="the C send lane is not built or refused")

BORN = 1764300000000


def header(
    topic: str, props: dict[str, str] | None, queue_id: int = 0, batch: bool = False
) -> SendMessageRequestHeader:
    return SendMessageRequestHeader(
        producer_group="lane_pg",
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=BORN + queue_id,
        flag=7,
        properties=properties_to_string(props) if props is not None else None,
        reconsume_times=0,
        batch=batch,
    )


def v2(topic, props, body=b"hello", queue_id=0, stype=SerializeType.JSON, batch=False) -> RemotingCommand:
    ext = header(topic, props, queue_id, batch).encode_v2()
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, body, language="JAVA", serialize_type=stype)


def v1(topic, props, body=b"hello", queue_id=0, stype=SerializeType.JSON) -> RemotingCommand:
    ext = header(topic, props, queue_id).encode()
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, ext, body, language="CPP", serialize_type=stype)


def batch(topic, props, entries, queue_id=0, stype=SerializeType.JSON, body=None) -> RemotingCommand:
    """SEND_BATCH_MESSAGE as the Java client sends it: V2's header with batch=true, (flag, body, properties) each
    (or ``body`` as it is)."""
    ext = header(topic, props, queue_id, batch=True).encode_v2()
    body = encode_batch(entries) if body is None else body
    return RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, ext, body, language="JAVA", serialize_type=stype)


GOOD_ENTRY = encode_batch([(0, b"ok", "TAGS\x01t")])


def plain(key: str, **more: str) -> dict[str, str]:
    return {"UNIQ_KEY": f"U{key}", "KEYS": f"k{key} other", "TAGS": "TagA", "WAIT": "true", **more}


# (request, whether the lane takes it)
REQUESTS = [
    # The first send of a group and topic: Python checks the names (and remembers them), caches the topic's bytes.
    (v2("Lane", plain("1")), False),
    (v2("Lane", plain("2"), queue_id=1, stype=SerializeType.ROCKETMQ), True),
    (v1("Lane", plain("3"), queue_id=2), True),
    (v1("Lane", plain("4"), queue_id=3, stype=SerializeType.ROCKETMQ), True),
    (v2("Lane", plain("5", KEYS="ключ 鍵")), False),  # properties not ASCII: Python's
    (v2("Lane", None, body=b""), True),
    (v2("Lane", plain("6", WAIT="false"), body=bytes(range(256)) * 256), True),
    (v2("Lane", plain("7", DELAY="3")), False),
    (v2("Lane", plain("8", TRAN_MSG="true", PGROUP="lane_pg")), False),
    (v2("Fresh", plain("9")), False),
    (v2("Lane", plain("10"), queue_id=9), False),
    (v2("%RETRY%lane_pg", plain("11")), False),
    (
        v2("Lane", {"WAIT": "true"}, body=encode_batch([(0, b"b1", properties_to_string(plain("12")))]), batch=True),
        False,
    ),
    (v2("Lane", plain("13"), body=b"x" * (4 * 1024 * 1024 + 1)), False),
    (v2("Lane", plain("14"), queue_id=1), True),
    # Batches: their messages' own properties (and the map's last TAGS for the tags code), every encoding.
    (
        batch("Lane", {"WAIT": "true"}, [(i, b"b%d" % i, properties_to_string(plain(f"15.{i}"))) for i in range(3)]),
        True,
    ),
    (batch("Lane", {}, [(0, b"x", ""), (5, b"", "TAGS\x01a\x02TAGS\x01b")], 2, SerializeType.ROCKETMQ), True),
    (batch("Lane", None, []), False),  # empty: the processor's MESSAGE_ILLEGAL
    (batch("Lane", None, [(0, b"x" * (3 * 1024 * 1024), ""), (0, b"y" * (2 * 1024 * 1024), "")]), False),  # too big
    (batch("Lane", {"DELAY": "2"}, [(0, b"d", "")]), False),
    # Properties not ASCII: the lane takes the messages Python makes; then malformed ones, parsed in C, with Java's
    # map's TAGS: the last with a value, whatever segments surround it.
    (batch("Lane", None, [(1, b"u", "TAGS\x01\u00fcmlaut\x02KEYS\x01\u30ad\u30fc"), (2, b"v", "")], 3), True),
    (
        batch(
            "Lane",
            {"KEYS": "outer"},
            [
                (0, b"m", "TAGS\x01x\x02junk\x02TAGS\x01\x02\x01v\x02TAGS\x01last\x02"),
                (0, b"n", "TAGS\x01y\x02TAGS\x01"),
            ],
            3,
        ),
        True,
    ),
    # Bodies that are not batches, which the processor refuses: truncated, lengths past the end or negative, a total
    # that does not add up, bytes after the last message, properties that are not UTF-8.
    (batch("Lane", None, [], body=GOOD_ENTRY[:10]), False),
    (batch("Lane", None, [], body=GOOD_ENTRY[:16] + b"\x00\x00\x01\x00" + GOOD_ENTRY[20:]), False),
    (batch("Lane", None, [], body=GOOD_ENTRY[:22] + b"\xff\xff" + GOOD_ENTRY[24:]), False),
    (batch("Lane", None, [], body=b"\x00\x00\x00\x01" + GOOD_ENTRY[4:]), False),
    (batch("Lane", None, [], body=GOOD_ENTRY + b"\x00" * 5), False),
    (batch("Lane", None, [(0, b"x", "")], body=GOOD_ENTRY[:-1] + b"\xff"), False),
]


def exchange(port: int, frames: list[bytes], pipelined: bool = False) -> list[bytes]:
    """Send the frames on one connection (a blocking socket, off the reactor) and read their answers: one at a time,
    or all sent at once (one read for the broker) and the answers put in the frames' order (by opaque)."""
    answers = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        for frame in [b"".join(frames)] if pipelined else frames:
            s.sendall(frame)
            for _ in frames if pipelined else [frame]:
                (length,) = struct.unpack(">I", _read(s, 4))
                answers.append(_read(s, length))
    if pipelined:
        answers.sort(key=_opaque)
    return answers


def numbered(requests: list[RemotingCommand], first: int) -> list[bytes]:
    """The requests' frames, their opaques numbered from ``first``."""
    frames = []
    for opaque, request in enumerate(requests, first):
        request.opaque = opaque
        frames.append(b"".join(encode_parts(request)))
    return frames


def assert_same_answers(brokers: list[BrokerUnderTest], requests: list[RemotingCommand], answers: list) -> None:
    """Each request's answer from the lane's broker and the processor's, byte for byte (msgId names each broker's
    own address: made alike)."""
    hosts = [b.controller.store_host.hex().upper().encode() for b in brokers]
    for request, a, b in zip(requests, *answers, strict=True):
        a, b = a.replace(hosts[0], b"HOST" * 4), b.replace(hosts[1], b"HOST" * 4)
        assert a == b, f"request {request.opaque} {request.ext_fields}: {a!r} != {b!r}"


def _opaque(answer: bytes) -> int:
    (cmd,) = FrameDecoder().feed(struct.pack(">I", len(answer)) + answer)
    return cmd.opaque


def _read(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        assert chunk, "connection closed"
        data += chunk
    return data


def records(broker: BrokerUnderTest) -> list[dict]:
    store = broker.controller.store
    end = store.commit_log.max_offset
    found = []
    for m in decode_records(bytes(store.commit_log.get_message(0, end))):
        fields = dict(vars(m)) if hasattr(m, "__dict__") else {f: getattr(m, f) for f in m.__slots__}
        for varying in ("store_timestamp", "born_host", "store_host", "msg_id"):  # the clock; the ports
            fields.pop(varying, None)
        found.append(fields)
    return found


def consume_queue(broker: BrokerUnderTest, topic: str, queue_id: int) -> list[tuple[int, int, int]]:
    cq = broker.controller.store.consume_queue_table.get((topic, queue_id))
    if cq is None:
        return []
    return [cq.get_unit(i) for i in range(cq.min_offset_in_queue, cq.max_offset_in_queue)]


# A metrics exporter on: the RPC latency histograms count every answered request.
METERED = {"metricsExporterType": "PROM", "metricsPromExporterPort": "0"}


def latency_counts(broker: BrokerUnderTest) -> dict[tuple, int]:
    """rocketmq_rpc_latency's samples per (request code, response code, oneway, long polling)."""
    latency = broker.controller.dispatcher.rpc_latency
    return {key: latency.count(key) for key in latency.table}


@pytest.mark.parametrize("pipelined", [False, True], ids=["one-by-one", "pipelined"])
@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"flushDiskType": "SYNC_FLUSH"},
        {"brokerRole": "SYNC_MASTER"},  # no slave: SLAVE_NOT_AVAILABLE
        METERED,
        {"flushDiskType": "SYNC_FLUSH", **METERED},
    ],
    ids=["async", "sync-flush", "sync-master", "async-metered", "sync-flush-metered"],
)
@pytest_twisted.ensureDeferred
async def test_lane_answers_and_stores_what_the_processor_does(
    tmp_path: Path, remoting, settings: dict[str, str], pipelined: bool
) -> None:
    brokers = [BrokerUnderTest(tmp_path / name, remoting, **settings) for name in ("lane", "python")]
    for b in brokers:
        b.start()
    try:
        with_lane, without = brokers
        assert with_lane.controller.factory.lane is not None
        without.controller.factory.lane = None  # its connections from now on: the processor only
        for b in brokers:
            assert (await b.call(create_topic_request("Lane", 4))).code == ResponseCode.SUCCESS
        frames = numbered([r for r, _ in REQUESTS], 1000)
        answers = []
        for b in brokers:
            port = b.controller.config.listenPort
            answers.append(await threads.deferToThread(exchange, port, frames, pipelined))
        lane = with_lane.controller.factory.lane
        assert lane.taken == sum(1 for _, in_lane in REQUESTS if in_lane)
        # One by one, every frame (a batch's too) is read in place; sent at once, those read with the first (which
        # the lane leaves) are decoded first, and taken from their commands, in order.
        batches = sum(1 for r, in_lane in REQUESTS if in_lane and r.code == RequestCode.SEND_BATCH_MESSAGE)
        assert lane.batches == batches == 4
        assert lane.in_place == lane.taken if not pipelined else lane.in_place < lane.taken
        assert_same_answers(brokers, [r for r, _ in REQUESTS], answers)
        assert records(with_lane) == records(without)
        for queue_id in range(4):
            assert consume_queue(with_lane, "Lane", queue_id) == consume_queue(without, "Lane", queue_id)
        tables = [{k: v for k, v in b.controller.store.commit_log.topic_queue_table.items()} for b in brokers]
        assert tables[0] == tables[1] and tables[0][("Lane", 0)] == 8 and tables[0][("Lane", 1)] == 2
        for key in ("k1", "ключ", "鍵", "U6", "キー"):
            found = [len(b.controller.store.query_message("Lane", key, 10, 0, 2**62).buffers) for b in brokers]
            assert found[0] == found[1] == 1, key
        if "metricsExporterType" in settings:  # the lane's sends counted as the processor's are
            counts = [latency_counts(b) for b in brokers]
            assert counts[0] == counts[1]
            stored = [(r.code, _code(a)) for (r, _), a in zip(REQUESTS, answers[0], strict=True)]
            for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
                n = stored.count((code, ResponseCode.SUCCESS))
                assert n > 0 and counts[0][(code, ResponseCode.SUCCESS, False, False)] == n
    finally:
        for b in brokers:
            await b.stop()


@pytest_twisted.ensureDeferred
async def test_lane_answers_sync_flush_sends_once_on_disk(tmp_path: Path, remoting) -> None:
    broker = BrokerUnderTest(tmp_path, remoting, flushDiskType="SYNC_FLUSH")
    controller = broker.start()
    try:
        assert (await broker.call(create_topic_request("Lane", 4))).code == ResponseCode.SUCCESS
        frames = []
        for i, stype in enumerate([SerializeType.JSON, SerializeType.JSON, SerializeType.ROCKETMQ]):
            request = v2("Lane", plain(str(i)), queue_id=i, stype=stype)
            request.opaque = i + 1
            frames.append(b"".join(encode_parts(request)))
        answers = await threads.deferToThread(exchange, controller.config.listenPort, frames)
        assert controller.factory.lane.taken == 2  # the first send of the group is Python's
        assert all(_code(a) == ResponseCode.SUCCESS for a in answers)
        assert controller.store.commit_log.flushed_where == controller.store.commit_log.max_offset
    finally:
        await broker.stop()


def _code(answer: bytes) -> int:
    (cmd,) = FrameDecoder().feed(struct.pack(">I", len(answer)) + answer)
    return cmd.code


def random_requests(rng: random.Random, n: int) -> list[RemotingCommand]:
    """Sends of every shape the lane must tell apart: both codes and encodings, plain and not, topics that exist and
    not, queues in range and not, properties ASCII and not, bodies of many sizes."""
    requests = []
    for i in range(n):
        topic = rng.choice(["Lane", "Lane", "Lane", "Other", "Missing", "%RETRY%lane_pg", "TBW102"])
        props = {"UNIQ_KEY": f"R{i}"} if rng.random() < 0.9 else None
        if props is not None:
            if rng.random() < 0.6:
                props["TAGS"] = rng.choice(["a", "b", "TagA", "ümlaut"])
            if rng.random() < 0.5:
                props["KEYS"] = " ".join(rng.choice(["k1", "k2", "x y", "鍵"]) for _ in range(rng.randint(1, 3)))
            if rng.random() < 0.2:
                props["WAIT"] = rng.choice(["true", "false", "FALSE"])
            if rng.random() < 0.1:
                props["DELAY"] = "1"  # (a timer's answer and record name the time it was sent: not compared)
            if rng.random() < 0.05:
                props["TRAN_MSG"] = "true"
        body = rng.randbytes(rng.choice([0, 1, 100, 1024, 5000]))
        queue_id = rng.choice([0, 1, 2, 3, 3, 7])
        stype = rng.choice([SerializeType.JSON, SerializeType.ROCKETMQ])
        if rng.random() < 0.15:  # a batch: its messages' own properties (tags, keys, text of every script)
            entries = []
            for j in range(rng.randint(1, 5)):
                inner = {"UNIQ_KEY": f"R{i}-{j}"}
                if rng.random() < 0.6:
                    inner["TAGS"] = rng.choice(["a", "b", "TagA", "ümlaut"])
                if rng.random() < 0.4:
                    inner["KEYS"] = rng.choice(["k1", "x y", "鍵"])
                body = rng.randbytes(rng.choice([0, 10, 1024]))
                entries.append((rng.randint(0, 9), body, properties_to_string(inner)))
            requests.append(batch(topic, props, entries, queue_id, stype))
            continue
        make = v2 if rng.random() < 0.7 else v1
        requests.append(make(topic, props, body=body, queue_id=queue_id, stype=stype))
    return requests


# An account that may send to Lane only; the others' sends are denied, as unsigned and badly signed ones are.
LANE_ACL_YML = """\
accounts:
  - accessKey: lane-user
    secretKey: lane-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - Lane=PUB
  - accessKey: the-boss
    secretKey: boss-secret
    admin: true
"""
LANER, BOSS = SessionCredentials("lane-user", "lane-secret"), SessionCredentials("the-boss", "boss-secret")


def acl_settings(root: Path, plain_acl_yml: str) -> dict[str, str]:
    """ACL on, with a RocketMQ home under ``root`` whose conf/plain_acl.yml is ``plain_acl_yml``."""
    (root / "home" / "conf").mkdir(parents=True)
    (root / "home" / "conf" / "plain_acl.yml").write_text(plain_acl_yml)
    return {"aclEnable": "true", "rocketmqHome": str(root / "home")}


def sign_some(rng: random.Random, requests: list[RemotingCommand]) -> None:
    """Most requests signed by the account that may send to Lane; some with a wrong secret, some not at all."""
    for request in requests:
        roll = rng.random()
        if roll < 0.85:
            LANER.sign(request)
        elif roll < 0.93:
            SessionCredentials("lane-user", "not-the-secret").sign(request)


@pytest.mark.parametrize("with_acl", [False, True], ids=["plain", "acl-metered"])
@pytest_twisted.ensureDeferred
async def test_lane_against_processor_random_sends(tmp_path: Path, remoting, with_acl: bool) -> None:
    rng = random.Random(29)
    requests = random_requests(rng, 400)
    settings = {**acl_settings(tmp_path, LANE_ACL_YML), **METERED} if with_acl else {}  # every hook the lane honours
    if with_acl:
        sign_some(rng, requests)
    brokers = [BrokerUnderTest(tmp_path / name, remoting, **settings) for name in ("lane", "python")]
    for b in brokers:
        b.start()
    try:
        brokers[1].controller.factory.lane = None
        for b in brokers:
            for topic, queues in (("Lane", 4), ("Other", 2)):
                create = create_topic_request(topic, queues)
                if with_acl:
                    BOSS.sign(create)
                assert (await b.call(create)).code == ResponseCode.SUCCESS
        frames = numbered(requests, 1)
        answers = []
        for b in brokers:
            port = b.controller.config.listenPort
            got = []
            for start in range(0, len(frames), 20):  # pipelined twenty at a time: both lane paths
                got += await threads.deferToThread(exchange, port, frames[start : start + 20], True)
            answers.append(got)
        assert_same_answers(brokers, requests, answers)
        assert records(brokers[0]) == records(brokers[1])
        lane = brokers[0].controller.factory.lane
        batches = sum(1 for r, a in zip(requests, answers[0], strict=True) if r.code == 320 and _code(a) == 0)
        assert batches > 10 and brokers[0].controller.factory.lane.batches > 5  # stored, most by the lane
        if with_acl:  # commands only; denials answered, each the processor's bytes
            assert lane.taken > 50 and lane.in_place == 0
            assert sum(_code(a) == ResponseCode.SYSTEM_ERROR for a in answers[0]) > 20
            assert latency_counts(brokers[0]) == latency_counts(brokers[1])
        else:
            assert lane.taken > 100 and 0 < lane.in_place < lane.taken
    finally:
        for b in brokers:
            await b.stop()


def acl_requests() -> list[tuple[RemotingCommand, str | None]]:
    """Plain sends to an ACL broker, signed and not: (request, the reason it is denied or None)."""

    def send(topic: str, key: str, queue_id: int = 0, creds: SessionCredentials = USER) -> RemotingCommand:
        return signed(v2(topic, plain(key), queue_id=queue_id), creds)

    tampered = send("topicB", "t", 1)
    tampered.body = b"evil"
    return [
        (send("topicB", "1"), None),  # the group's first send: Python's
        (send("topicB", "2", 1), None),
        (send("topicB", "3", 2, SessionCredentials("RocketMQ", "not-the-secret")), "Check signature failed"),
        (send("topicA", "4"), "No default permission for topic:topicA"),
        (v2("topicB", plain("5")), "No accessKey is configured"),
        (tampered, "Check signature failed"),
        (send("topicB", "6", 3), None),
        (send("topicB", "7", 2), None),
    ]


@pytest.mark.parametrize("pipelined", [False, True], ids=["one-by-one", "pipelined"])
@pytest_twisted.ensureDeferred
async def test_lane_with_acl_serves_only_what_the_hooks_admit(tmp_path: Path, remoting, pipelined: bool) -> None:
    settings = acl_settings(tmp_path, PLAIN_ACL_YML)
    brokers = [BrokerUnderTest(tmp_path / name, remoting, **settings) for name in ("lane", "python")]
    denials: list[str] = []

    def observe(event: dict) -> None:
        if event.get("log_format", "").startswith("ACL denied"):
            denials.append(event["log_format"])

    for b in brokers:
        b.start()
    globalLogPublisher.addObserver(observe)
    try:
        with_lane, without = brokers
        without.controller.factory.lane = None
        for b in brokers:
            assert (await b.call(signed(create_topic_request("topicB", 4), ADMIN))).code == ResponseCode.SUCCESS
        requests = acl_requests()
        frames = numbered([r for r, _ in requests], 1)
        answers = []
        for b in brokers:
            denials.clear()
            answers.append(await threads.deferToThread(exchange, b.controller.config.listenPort, frames, pipelined))
            assert len(denials) == sum(1 for _, reason in requests if reason)  # each denial checked and told once
        for (_, reason), a in zip(requests, answers[0], strict=True):
            (cmd,) = FrameDecoder().feed(struct.pack(">I", len(a)) + a)
            if reason is None:
                assert cmd.code == ResponseCode.SUCCESS, cmd.remark
            else:
                assert cmd.code == ResponseCode.SYSTEM_ERROR and reason in cmd.remark
        assert_same_answers(brokers, [r for r, _ in requests], answers)
        assert records(with_lane) == records(without)
        assert with_lane.controller.factory.lane.taken == 3 and with_lane.controller.factory.lane.in_place == 0
    finally:
        globalLogPublisher.removeObserver(observe)
        for b in brokers:
            await b.stop()
