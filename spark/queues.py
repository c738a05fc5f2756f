"""What the data source needs of RocketMQ, with blocking connections and no Spark: a topic's queues from
the NameServer, their offsets, pulls, and committing a consumer group's progress.

Offsets are ``{"<brokerName>": {"<queueId>": offset}}`` (JSON keys are strings): the form of the
``startingOffsets``/``endingOffsets`` options and of streaming checkpoints.
"""

from __future__ import annotations

import functools
import json
import ssl
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from gateway.acl.signer import SessionCredentials
from gateway.config import ConfigError
from gateway.remoting import fastjson
from gateway.remoting.blocking import BlockingConnection
from gateway.remoting.bodies import TopicRouteData
from gateway.remoting.codes import PermName, RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.errors import NameServerUnreachable
from gateway.remoting.headers import (
    GetRouteInfoRequestHeader,
    OffsetResponseHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    TopicQueueRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from gateway.remoting.names import topic_problem
from gateway.tls.client import ssl_client_context
from gateway.tls.config import KEYS as TLS_KEYS
from gateway.tls.config import TlsConfig

Offsets = dict[str, dict[str, int]]
DEFAULT_GROUP = "spark-rocketmq-reader"
PULL_BATCH = 32  # the broker's maxTransferCountOnMessageInMemory
FLAG_SUBSCRIPTION = 0x4
_TLS_KEYS = {k.lower(): k for k in TLS_KEYS}  # the tls.* keys' own spelling, for TlsConfig


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    """Options by lower-case name: Spark hands them over case-insensitively (and lower-cased)."""
    return {k.lower(): v for k, v in options.items()}


class SourceError(ValueError):
    """An unusable option, or a topic the NameServers do not route."""


class TopicNotRouted(SourceError):
    """The NameServers route no such topic (a producer may still auto-create it through TBW102)."""


def connection_options(
    options: Mapping[str, str], error: type[ValueError] = SourceError
) -> tuple[tuple[str, ...], str | None, str | None, dict[str, str]]:
    """``namesrvAddr``, ``accessKey``/``secretKey`` and the ``tls.*`` options of lower-cased ``options``,
    checked: (NameServers, access key, secret key, tls properties); a bad one raises ``error``."""
    namesrv = tuple(a.strip() for a in (options.get("namesrvaddr") or "").split(";") if a.strip())
    if not namesrv:
        raise error("option namesrvAddr is required (host:port[;host:port...])")
    access_key, secret_key = options.get("accesskey") or None, options.get("secretkey") or None
    if bool(access_key) != bool(secret_key):
        raise error("options accessKey and secretKey go together")
    tls = {_TLS_KEYS.get(k, k): v for k, v in options.items() if k.startswith("tls.")}
    try:
        TlsConfig.from_properties(tls, "data source options")  # bad values fail here, not in a worker
    except ConfigError as e:
        raise error(str(e)) from None
    return namesrv, access_key, secret_key, tls


@dataclass(frozen=True)
class Settings:
    """The options, checked once on the driver; picklable, so it travels to the workers."""

    namesrv: tuple[str, ...]
    topic: str
    group: str
    commit_group: str | None
    access_key: str | None
    secret_key: str | None
    tls: dict[str, str]
    timeout: float

    @classmethod
    def from_options(cls, given: Mapping[str, str]) -> Settings:
        options = lower_keys(given)
        namesrv, access_key, secret_key, tls = connection_options(options)
        topic = options.get("topic") or ""
        problem = topic_problem(topic)
        if problem is not None:
            raise SourceError(f"option topic: {problem}")
        group = options.get("consumergroup") or None
        timeout = float(options.get("timeoutms", "10000")) / 1000
        return cls(namesrv, topic, group or DEFAULT_GROUP, group, access_key, secret_key, tls, timeout)

    def connect(self, addr: str) -> BlockingConnection:
        """A connection to ``addr`` with the TLS and ACL settings of the options."""
        tls = _ssl_context(tuple(sorted(self.tls.items())))
        sign = None
        if self.access_key and self.secret_key:
            sign = SessionCredentials(self.access_key, self.secret_key).sign
        return BlockingConnection(addr, self.timeout, tls, sign)


@functools.lru_cache(maxsize=8)
def _ssl_context(tls: tuple[tuple[str, str], ...]) -> ssl.SSLContext | None:
    """The client TLS context of these ``tls.*`` options, made once a process (it reads certificate files)."""
    config = TlsConfig.from_properties(dict(tls), "data source options")
    return ssl_client_context(config) if config.tlsEnable else None


@dataclass(frozen=True)
class Queue:
    """A readable message queue and the broker addresses that serve it, master first."""

    broker: str
    queue_id: int
    addrs: tuple[str, ...]


def route(settings: Settings) -> TopicRouteData:
    """The topic's route from the first NameServer that answers."""
    error: OSError | None = None
    request = GetRouteInfoRequestHeader(topic=settings.topic)
    for addr in settings.namesrv:
        try:
            with settings.connect(addr) as conn:
                resp = conn.invoke(RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, request.encode()))
        except OSError as e:
            error = e
            continue
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            refusal = f"code {int(resp.code)} TOPIC_NOT_EXIST: {resp.remark}"
            raise TopicNotRouted(f"topic {settings.topic} is not routed by {addr}: {refusal}")
        if resp.code != ResponseCode.SUCCESS:
            raise SourceError(f"{addr} answered {resp.code}: {resp.remark}")
        return TopicRouteData.from_json(fastjson.loads(resp.body))
    raise SourceError(str(NameServerUnreachable(settings.namesrv, error))) from error


def queues(settings: Settings) -> list[Queue]:
    """Every readable queue of the topic (readQueueNums of each broker that may be read)."""
    data = route(settings)
    addrs = {b.broker_name: tuple(addr for _, addr in sorted(b.broker_addrs.items())) for b in data.broker_datas}
    found = []
    for q in data.queue_datas:
        if q.perm & PermName.PERM_READ and addrs.get(q.broker_name):
            found.extend(Queue(q.broker_name, i, addrs[q.broker_name]) for i in range(q.read_queue_nums))
    return sorted(found, key=lambda q: (q.broker, q.queue_id))


def _offset(conn: BlockingConnection, code: int, topic: str, queue_id: int) -> int:
    resp = conn.invoke(RemotingCommand.request(code, TopicQueueRequestHeader(topic, queue_id).encode()))
    if resp.code != ResponseCode.SUCCESS:
        raise SourceError(f"{conn.addr} answered {resp.code} to an offset query: {resp.remark}")
    return OffsetResponseHeader.decode(resp.ext_fields).offset


def queue_offsets(settings: Settings, qs: list[Queue], which: str) -> Offsets:
    """``earliest`` (GET_MIN_OFFSET) or ``latest`` (GET_MAX_OFFSET) of every queue, asked of its master."""
    code = RequestCode.GET_MIN_OFFSET if which == "earliest" else RequestCode.GET_MAX_OFFSET
    out: Offsets = {}
    conns: dict[str, BlockingConnection] = {}
    try:
        for q in qs:
            conn = conns.get(q.addrs[0]) or conns.setdefault(q.addrs[0], settings.connect(q.addrs[0]))
            out.setdefault(q.broker, {})[str(q.queue_id)] = _offset(conn, code, settings.topic, q.queue_id)
    finally:
        for conn in conns.values():
            conn.close()
    return out


def resolve(settings: Settings, qs: list[Queue], spec: str, option: str, default: str) -> Offsets:
    """An offsets option: ``earliest``, ``latest`` or JSON, where -2 means earliest and -1 latest (as Kafka's
    source) and a queue the JSON leaves out takes ``default``."""
    spec = (spec or default).strip()
    if spec in ("earliest", "latest"):
        return queue_offsets(settings, qs, spec)
    try:
        given = json.loads(spec)
        if not isinstance(given, dict):
            raise ValueError("not an object")
        parsed = {str(b): {str(q): int(o) for q, o in per.items()} for b, per in given.items()}
    except (ValueError, TypeError, AttributeError) as e:
        raise SourceError(
            f'option {option}: "earliest", "latest" or JSON like {{"broker-a": {{"0": 10}}}}, not {spec!r} ({e})'
        ) from None
    bounds = {"earliest": queue_offsets(settings, qs, "earliest"), "latest": queue_offsets(settings, qs, "latest")}
    out: Offsets = {}
    for b, per in bounds[default].items():
        for q in per:
            offset = parsed.get(b, {}).get(q)
            if offset is None:
                offset = bounds[default][b][q]
            elif offset in (-2, -1):
                offset = bounds["earliest" if offset == -2 else "latest"][b][q]
            out.setdefault(b, {})[q] = offset
    return out


def pull_request(settings: Settings, queue: Queue, offset: int) -> RemotingCommand:
    """PULL_MESSAGE from ``offset``: subscription ``*``, no commit, no hold."""
    header = PullMessageRequestHeader(
        consumer_group=settings.group,
        topic=settings.topic,
        queue_id=queue.queue_id,
        queue_offset=offset,
        max_msg_nums=PULL_BATCH,
        sys_flag=FLAG_SUBSCRIPTION,
        commit_offset=0,
        suspend_timeout_millis=0,
        subscription="*",
        sub_version=0,
        expression_type="TAG",
    )
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, header.encode())


_PULL_CODES = frozenset(
    {
        ResponseCode.SUCCESS,
        ResponseCode.PULL_NOT_FOUND,
        ResponseCode.PULL_RETRY_IMMEDIATELY,
        ResponseCode.PULL_OFFSET_MOVED,
    }
)


def read_range(settings: Settings, queue: Queue, start: int, end: int, window: int = 4) -> Iterator[bytes]:
    """Pull bodies holding the messages of ``queue`` at offsets ``start`` <= offset < ``end`` (they may hold
    a few more: callers keep the range), in offset order, from its master (its slaves, in turn, when it
    does not answer). ``window`` pulls are in flight, 32 offsets apart; when an answer ends elsewhere (a short
    batch, offsets the broker no longer holds) the pulls after it are dropped and reading goes on from
    where it says."""
    addrs = list(queue.addrs)
    offset, failures = start, 0
    while offset < end:
        addr = addrs[0]
        conn = settings.connect(addr)
        try:
            for body, reached in _pipelined(conn, settings, queue, offset, end, window):
                failures, offset = 0, reached
                if body:
                    yield body
            if offset < end and addr != queue.addrs[0]:
                # A slave behind its master: stopping here would lose what it does not hold yet.
                behind = f"holds queue {queue.queue_id} up to {offset} of {end}"
                raise SourceError(f"{addr}, a slave of {queue.broker}, {behind}")
            return
        except OSError:
            failures += 1
            if failures >= len(addrs):  # every replica failed in a row
                raise
            addrs = addrs[1:] + addrs[:1]  # the next replica, from the last offset read
        finally:
            conn.close()


def _pipelined(
    conn: BlockingConnection, settings: Settings, queue: Queue, start: int, end: int, window: int
) -> Iterator[tuple[bytes, int]]:
    """(body, the offset read up to) per answer, until ``end`` or the end of the queue; ``window`` pulls
    stay in flight."""
    offset = next_ask = start
    asked: deque[int] = deque()
    while True:
        while len(asked) < window and next_ask < end:
            conn.send(pull_request(settings, queue, next_ask))
            asked.append(next_ask)
            next_ask += PULL_BATCH
        if not asked:
            return
        at = asked.popleft()
        resp = conn.receive()
        if resp.code not in _PULL_CODES:
            raise SourceError(f"{conn.addr} answered {resp.code} to a pull of {queue}: {resp.remark}")
        next_offset = PullMessageResponseHeader.decode(resp.ext_fields).next_begin_offset
        if resp.code == ResponseCode.SUCCESS and next_offset > at:
            offset = next_offset
            yield resp.body or b"", offset
        if next_offset != at + PULL_BATCH or resp.code != ResponseCode.SUCCESS:
            for _ in asked:  # answers to pulls from the wrong offsets
                conn.receive()
            asked.clear()
            if resp.code == ResponseCode.PULL_NOT_FOUND or next_offset <= at:
                return  # the queue ends here, or the broker cannot move on
            offset = next_ask = max(offset, next_offset)


def commit(settings: Settings, qs: list[Queue], offsets: Offsets) -> None:
    """UPDATE_CONSUMER_OFFSET of the commit group for every queue, on its master."""
    if settings.commit_group is None:
        return
    by_addr: dict[str, list[tuple[Queue, int]]] = {}
    for q in qs:
        offset = offsets.get(q.broker, {}).get(str(q.queue_id))
        if offset is not None:
            by_addr.setdefault(q.addrs[0], []).append((q, offset))
    for addr, items in by_addr.items():
        with settings.connect(addr) as conn:
            for q, offset in items:
                header = UpdateConsumerOffsetRequestHeader(settings.commit_group, settings.topic, q.queue_id, offset)
                resp = conn.invoke(RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, header.encode()))
                if resp.code != ResponseCode.SUCCESS:
                    raise SourceError(f"{addr} refused the offset of {q}: {resp.code} {resp.remark}")
