"""What the benchmark puts on the wire: blocking set-up calls, pre-built SEND_MESSAGE_V2 frames, pull frames.

Every request says ``language=JAVA, version=409``, as a 4.9.8 Java client does, so Apache RocketMQ and our
servers take the same code paths they take for real producers and consumers.
"""

from __future__ import annotations

import datetime
import os
import random
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import orjson

from gateway.remoting import fastjson
from gateway.remoting.bodies import ClusterInfo, TopicRouteData
from gateway.remoting.codec import FrameDecoder, encode
from gateway.remoting.codes import VERSION_4_9_8, PermName, RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import (
    CreateTopicRequestHeader,
    PullMessageRequestHeader,
    PullSysFlag,
    TopicQueueRequestHeader,
)
from gateway.remoting.message import MESSAGE_MAGIC_CODE, NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR, MessageConst

DEFAULT_TOPIC = "TBW102"
# Store results that mean "stored" (FLUSH_DISK_TIMEOUT etc. are reported as errors but the message exists).
STORED_CODES = frozenset(
    {
        ResponseCode.SUCCESS,
        ResponseCode.FLUSH_DISK_TIMEOUT,
        ResponseCode.SLAVE_NOT_AVAILABLE,
        ResponseCode.FLUSH_SLAVE_TIMEOUT,
    }
)

_BROKER_MARKER = b"\\u0000BROKER\\u0000"
_II = struct.Struct(">ii")
_Q = struct.Struct(">q")
T = TypeVar("T")


class SetupError(Exception):
    """The target refused or failed a set-up step (route, topic creation, offsets)."""


@dataclass(frozen=True, slots=True)
class QueueRef:
    """One message queue: broker name, its master's address, queue id."""

    broker_name: str
    addr: str
    queue_id: int


def java_request(code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
    """A request as a 4.9.8 Java client sends it (JSON header, language JAVA, version 409)."""
    return RemotingCommand.request(code, ext, body, language="JAVA", version=VERSION_4_9_8)


def rpc(addr: str, request: RemotingCommand | bytes, timeout: float = 5.0) -> RemotingCommand:
    """One blocking request/response over a fresh connection; ``request`` may be a ready frame with opaque 1."""
    if isinstance(request, RemotingCommand):
        request.opaque = 1
        request = encode(request)
    host, _, port = addr.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock:
            sock.sendall(request)
            decoder = FrameDecoder()
            while True:
                data = sock.recv(65536)
                if not data:
                    raise SetupError(f"{addr} closed the connection")
                for cmd in decoder.feed(data):
                    if cmd.is_response and cmd.opaque == 1:
                        return cmd
    except OSError as e:
        raise SetupError(f"{addr}: {e}") from None


def get_route(namesrv: str, topic: str) -> TopicRouteData | None:
    """GET_ROUTEINFO_BY_TOPIC; None when the NameServer does not know the topic (17)."""
    resp = rpc(namesrv, java_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
    if resp.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    if resp.code != ResponseCode.SUCCESS:
        raise SetupError(f"route of {topic}: code {resp.code} {resp.remark}")
    return TopicRouteData.from_json(fastjson.loads(resp.body))


def route_queues(route: TopicRouteData, perm: int = PermName.PERM_WRITE) -> list[QueueRef]:
    """The write queues of a route on brokers that have a master and whose topic perm includes ``perm``."""
    masters = {b.broker_name: b.master_addr() for b in route.broker_datas}
    out = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        addr = masters.get(qd.broker_name)
        if addr and qd.perm & perm:
            out.extend(QueueRef(qd.broker_name, addr, q) for q in range(qd.write_queue_nums))
    return out


def masters(namesrv: str) -> list[str]:
    """The master address of every broker the NameServer knows."""
    resp = rpc(namesrv, java_request(RequestCode.GET_BROKER_CLUSTER_INFO))
    if resp.code != ResponseCode.SUCCESS:
        raise SetupError(f"cluster info: code {resp.code} {resp.remark}")
    info = ClusterInfo.from_json(fastjson.loads(resp.body))
    return sorted(addr for bd in info.broker_addr_table.values() if (addr := bd.master_addr()))


def _poll(fn: Callable[[], T], what: str, timeout: float = 15.0) -> T:
    """``fn()`` until it returns something truthy; SetupError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := fn()):
        if time.monotonic() > deadline:
            raise SetupError(f"gave up after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)
    return value


def ensure_topic(namesrv: str, topic: str, queues: int, mode: str, builder: SendFrameBuilder) -> list[QueueRef]:
    """The topic's writable queues, creating the topic first if the NameServer does not know it.

    Waits for a broker to have registered. ``mode`` ``auto`` then sends one message per broker with
    ``defaultTopic=TBW102`` (what a Java producer's first send does); ``admin`` sends
    UPDATE_AND_CREATE_TOPIC to every master (mqadmin updateTopic). Either way, waits until the
    NameServer routes the topic.
    """
    master_addrs = _poll(lambda: masters(namesrv), "a broker to register with the NameServer")
    route = get_route(namesrv, topic)
    if route is None:
        if mode == "auto":
            template = _poll(
                lambda: get_route(namesrv, DEFAULT_TOPIC), f"a route for {DEFAULT_TOPIC} (else use --create admin)", 5
            )
            addrs = {q.addr: q.broker_name for q in route_queues(template, PermName.PERM_INHERIT)}
            for addr, broker_name in sorted(addrs.items()):
                resp = rpc(addr, builder.single(broker_name, 0))
                if resp.code != ResponseCode.SUCCESS:
                    raise SetupError(f"auto-create of {topic} on {addr}: code {resp.code} {resp.remark}")
        else:
            header = CreateTopicRequestHeader(
                topic=topic,
                default_topic=DEFAULT_TOPIC,
                read_queue_nums=queues,
                write_queue_nums=queues,
                perm=PermName.PERM_READ | PermName.PERM_WRITE,
                topic_filter_type="SINGLE_TAG",
                topic_sys_flag=0,
            )
            for addr in master_addrs:
                resp = rpc(addr, java_request(RequestCode.UPDATE_AND_CREATE_TOPIC, header.encode()))
                if resp.code != ResponseCode.SUCCESS:
                    raise SetupError(f"UPDATE_AND_CREATE_TOPIC on {addr}: code {resp.code} {resp.remark}")

        def routed() -> TopicRouteData | None:
            r = get_route(namesrv, topic)
            return r if r is not None and route_queues(r) else None

        route = _poll(routed, f"a route for {topic}")
    queues_found = route_queues(route)
    if not queues_found:
        raise SetupError(f"{topic} has no writable queue on a master")
    return queues_found


def max_offset(queue: QueueRef, topic: str) -> int:
    """GET_MAX_OFFSET of one queue (the consume queue's next offset)."""
    header = TopicQueueRequestHeader(topic=topic, queue_id=queue.queue_id)
    resp = rpc(queue.addr, java_request(RequestCode.GET_MAX_OFFSET, header.encode()))
    if resp.code != ResponseCode.SUCCESS:
        raise SetupError(f"GET_MAX_OFFSET {topic}:{queue.queue_id}: code {resp.code} {resp.remark}")
    return int(resp.ext("offset", "0"))


class SendFrameBuilder:
    """SEND_MESSAGE_V2 frames as a 4.9.8 Java producer writes them, from one template.

    The JSON header is built once with ``bytes %`` slots for the fields that change per message:
    queueId (``e``), bornTimestamp (``g``), the time and counter parts of UNIQ_KEY (in ``i``) and the
    opaque. Properties are UNIQ_KEY, WAIT=true, TAGS, in the Java HashMap's order; extFields a..n
    except ``l`` (only set for retry topics).
    """

    def __init__(self, topic: str, group: str, tag: str, body: bytes, default_queue_nums: int) -> None:
        self.body = body
        # UNIQ_KEY = client IP, pid, class-loader hash (fixed per process), then ms since the start of
        # the month and a 16-bit counter (MessageClientIDSetter).
        fix = bytes([127, 0, 0, 1]) + (os.getpid() & 0xFFFF).to_bytes(2, "big") + random.getrandbits(32).to_bytes(4)
        month = datetime.datetime.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        self.month_start_ms = int(month.timestamp() * 1000)
        self.counter = 0
        props = PROPERTY_SEPARATOR.join(
            f"{k}{NAME_VALUE_SEPARATOR}{v}"
            for k, v in (
                (MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX, fix.hex().upper() + "\x00UNIQ\x00"),
                (MessageConst.WAIT_STORE_MSG_OK, "true"),
                (MessageConst.TAGS, tag),
            )
        )
        header = {
            "code": RequestCode.SEND_MESSAGE_V2,
            "extFields": {
                "a": group,
                "b": topic,
                "c": DEFAULT_TOPIC,
                "d": str(default_queue_nums),
                "e": "\x00QUEUE\x00",
                "f": "0",
                "g": "\x00BORN\x00",
                "h": "0",
                "i": props,
                "j": "0",
                "k": "false",
                "m": "false",
                "n": "\x00BROKER\x00",
            },
            "flag": 0,
            "language": "JAVA",
            "opaque": "\x00OPAQUE\x00",
            "serializeTypeCurrentRPC": "JSON",
            "version": VERSION_4_9_8,
        }
        raw = orjson.dumps(header).replace(b"%", b"%%")
        for marker, slot in (
            (b'"\\u0000OPAQUE\\u0000"', b"%d"),
            (b"\\u0000QUEUE\\u0000", b"%d"),
            (b"\\u0000BORN\\u0000", b"%d"),
            (b"\\u0000UNIQ\\u0000", b"%08X%04X"),
        ):
            raw = raw.replace(marker, slot)
        self._template = raw

    def template(self, broker_name: str) -> bytes:
        """The header template for one broker (``n``); slots: queueId, born, UNIQ time, UNIQ counter, opaque."""
        return self._template.replace(_BROKER_MARKER, orjson.dumps(broker_name)[1:-1].replace(b"%", b"%%"))

    def frames(self, template: bytes, queue_ids: list[int], first_opaque: int) -> list[bytes]:
        """Frames for consecutive opaques, one message per queue id; all share one timestamp."""
        now = int(time.time() * 1000)
        since_month = (now - self.month_start_ms) & 0xFFFFFFFF
        body = self.body
        blen = len(body)
        pack = _II.pack
        out = []
        counter = self.counter
        for i, qid in enumerate(queue_ids):
            header = template % (qid, now, since_month, counter & 0xFFFF, first_opaque + i)
            counter += 1
            out.append(pack(4 + len(header) + blen, len(header)))
            out.append(header)
            out.append(body)
        self.counter = counter
        return out

    def single(self, broker_name: str, queue_id: int) -> bytes:
        """One whole frame with opaque 1 (the auto-create send)."""
        return b"".join(self.frames(self.template(broker_name), [queue_id], 1))


def pull_frame(group: str, queue: QueueRef, topic: str, offset: int, max_nums: int, opaque: int) -> bytes:
    """PULL_MESSAGE as a pull/lite-pull consumer sends it: subscription ``*`` in the header, no suspend."""
    header = PullMessageRequestHeader(
        consumer_group=group,
        topic=topic,
        queue_id=queue.queue_id,
        queue_offset=offset,
        max_msg_nums=max_nums,
        sys_flag=PullSysFlag.SUBSCRIPTION,
        commit_offset=0,
        suspend_timeout_millis=20000,
        subscription="*",
        sub_version=0,
        expression_type="TAG",
        bname=queue.broker_name,
    )
    cmd = java_request(RequestCode.PULL_MESSAGE, header.encode())
    cmd.opaque = opaque
    return encode(cmd)


def scan_records(body: bytes, lo: int, hi: int) -> tuple[int, int, bool]:
    """(records with queue offset in [lo, hi), their total size, well-formed) for a PULL body.

    Walks TOTALSIZE fields and checks each MAGICCODE only: a full decode would cost more than the
    broker spends serving the record.
    """
    pos = 0
    n = 0
    size = 0
    end = len(body)
    unpack = _II.unpack_from
    unpack_q = _Q.unpack_from
    while pos < end:
        if end - pos < 28:
            return n, size, False
        total, magic = unpack(body, pos)
        if magic != MESSAGE_MAGIC_CODE or total < 28 or pos + total > end:
            return n, size, False
        (qoff,) = unpack_q(body, pos + 20)
        if lo <= qoff < hi:
            n += 1
            size += total
        pos += total
    return n, size, True
