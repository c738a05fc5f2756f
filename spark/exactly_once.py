"""``deliveryGuarantee=exactly-once``: the sink's writes as RocketMQ transactions decided by Spark's commit.

In a task every row is stored as a *half message* (TRAN_MSG=true, PGROUP), invisible to consumers, tagged
with the write's identity in the :data:`TXN_PROPERTY` property: ``<write id> <batch id> <attempt id>``. The
write id is the streaming query's id (stable across restarts from its checkpoint) or, for a batch
``df.write``, a uuid made on the driver; the attempt id is new for every run of a task. The task hands
the driver what END_TRANSACTION needs for each half message.

On the driver, ``commit`` first records the decision in the *ledger*, the NameServers' KV config
(namespace :data:`LEDGER_NAMESPACE`, key ``<write id>.<batch id>``): "commit" and the attempt ids whose
halves it covers. Then it ends those halves with COMMIT, in order per queue, and marks the decision
ended; the halves of other attempts it rolls back. ``abort`` records "abort" and rolls back. A decision,
once recorded, stands: a batch that Spark runs again (its driver died after the decision, before Spark's
own commit log) writes nothing, and only the run that recorded a commit ends its halves with COMMIT.

The check-back: a broker asks a producer of the group (CHECK_TRANSACTION_STATE) about halves nobody
ended. Every Python worker that ran an exactly-once task keeps a producer of the group registered and
answers from the ledger (:func:`answer`): the halves of failed attempts are rolled back, and those of a
commit whose driver did not mark it ended are committed once its grace is over, unless their topic holds
them already (the driver ended them before it died, and the half asked about is the broker's copy).
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType
from twisted.logger import Logger

from gateway.acl.signer import SessionCredentials
from gateway.client import blocking
from gateway.client.security import ClientSecurity
from gateway.client.transaction_producer import LocalTransactionState
from gateway.remoting import fastjson
from gateway.remoting.blocking import BlockingConnection
from gateway.remoting.bodies import KVTable
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import (
    EndTransactionRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    KVConfigRequestHeader,
    QueryMessageRequestHeader,
    SendMessageResponseHeader,
)
from gateway.remoting.message import MessageConst, MessageExt, MessageSysFlag, decode_offset_message_id, decode_records
from gateway.remoting.names import SCHEDULE_TOPIC
from gateway.store.message_store import TIMER_TOPIC
from gateway.tls.config import TlsConfig

from .sink import OutgoingMessage, SendUnit, SinkSettings, open_producer, row_messages, unit_for

log = Logger()

LEDGER_NAMESPACE = "SPARK_ROCKETMQ_EXACTLY_ONCE"
TXN_PROPERTY = "SPARK_TXN"
BATCH_WRITE = -1  # the batch id of a (non-streaming) df.write
GRACE_SEND_TIMEOUTS = 20  # the driver has this many send timeouts to end a decision's halves (60 s by default)
KEEP_PER_WRITE = 16  # a write's newest decisions kept in the ledger: a restarted query re-runs only its last
RESOLVED_TTL = 3600.0  # seconds an ended or aborted decision is kept at most
MAX_TTL = 7 * 24 * 3600.0  # seconds any decision is kept
MAX_REMEMBERED = 100_000  # decisions and committed messages a check-back answerer remembers
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG
EXIT_AFTER_DECISION = "ROCKETMQ_SPARK_EOS_EXIT_AFTER_DECISION"  # test hook, see record_decision_hook
_END_WINDOW = 256
HALVES_IN_FLIGHT = 64  # per task; half messages cannot be batched
CONTROL_TIMEOUT = 10.0  # seconds


class ExactlyOnceError(RuntimeError):
    """The ledger cannot be read or written, or a broker refuses a check-back's query."""


@dataclass(frozen=True)
class HalfMessage:
    """What END_TRANSACTION needs of one stored half message."""

    broker: str
    addr: str
    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str
    transaction_id: str | None
    queue_id: int = -1  # the queue the message goes to on COMMIT
    ordered: bool = False  # a keyed row: its queue's COMMITs are stored in the order written


@dataclass
class HalvesWritten(WriterCommitMessage):
    """A task run's half messages, in the order written (so per queue in row order)."""

    write_id: str
    batch_id: int
    attempt_id: str
    halves: list[HalfMessage] = field(default_factory=list)


@dataclass(frozen=True)
class Decision:
    """A batch's outcome as the ledger holds it."""

    commit: bool
    at: float  # epoch seconds, the driver's clock
    grace: float
    attempts: frozenset[str] = frozenset()
    ended: bool = False  # the driver ended every half of the committed attempts

    def to_text(self) -> str:
        return json.dumps(
            {
                "decision": "commit" if self.commit else "abort",
                "at": int(self.at * 1000),
                "graceMs": int(self.grace * 1000),
                "attempts": sorted(self.attempts),
                "ended": self.ended,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_text(cls, text: str) -> Decision:
        obj = json.loads(text)
        return cls(
            obj["decision"] == "commit",
            obj["at"] / 1000,
            obj["graceMs"] / 1000,
            frozenset(obj.get("attempts", ())),
            bool(obj.get("ended")),
        )


def answer(decision: Decision | None, attempt_id: str, now: float) -> LocalTransactionState:
    """The check-back's answer for a half message of ``attempt_id`` whose batch has ``decision``.

    Undecided: unknown (the broker asks again, and gives up after transactionCheckMax: never visible).
    Aborted, or an attempt the commit does not cover: roll back. Covered by a commit the driver ended:
    roll back too, since the half asked about is the broker's check copy of one already committed. Covered
    by a commit not (yet) ended: unknown while the driver may still be ending it, commit after its grace.
    """
    if decision is None:
        return LocalTransactionState.UNKNOW
    if not decision.commit or attempt_id not in decision.attempts or decision.ended:
        return LocalTransactionState.ROLLBACK_MESSAGE
    if now < decision.at + decision.grace:
        return LocalTransactionState.UNKNOW
    return LocalTransactionState.COMMIT_MESSAGE


def connect(settings: SinkSettings, addr: str) -> BlockingConnection:
    """A connection for the ledger, the ends and the queries: the sink's TLS and ACL, and a timeout of at
    least :data:`CONTROL_TIMEOUT` (a slow answer here is no reason to fail a batch)."""
    connection = settings.connection()
    return replace(connection, timeout=max(connection.timeout, CONTROL_TIMEOUT)).connect(addr)


class Ledger:
    """Decisions in the NameServers' KV config: written to every NameServer, read from any."""

    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings

    @staticmethod
    def key(write_id: str, batch_id: int) -> str:
        return f"{write_id}.{batch_id}"

    def get(self, write_id: str, batch_id: int) -> Decision | None:
        """The recorded decision; None if no NameServer holds one. ExactlyOnceError if none answers."""
        header = KVConfigRequestHeader(LEDGER_NAMESPACE, self.key(write_id, batch_id))
        error: OSError | None = None
        answered = False
        for addr in self.settings.namesrv:
            try:
                with connect(self.settings, addr) as conn:
                    resp = conn.invoke(RemotingCommand.request(RequestCode.GET_KV_CONFIG, header.encode()))
            except OSError as e:
                error = e
                continue
            answered = True
            if resp.code == ResponseCode.SUCCESS:
                value = GetKVConfigResponseHeader.decode(resp.ext_fields).value
                if value:
                    return Decision.from_text(value)
        if not answered:
            raise ExactlyOnceError(f"no NameServer answered for the transaction ledger: {error}") from error
        return None

    def put(self, write_id: str, batch_id: int, decision: Decision) -> None:
        """Record on every NameServer; ExactlyOnceError unless all of them took it."""
        header = KVConfigRequestHeader(LEDGER_NAMESPACE, self.key(write_id, batch_id), decision.to_text())
        for addr in self.settings.namesrv:
            self._invoke(addr, RequestCode.PUT_KV_CONFIG, header)

    def decide(self, write_id: str, batch_id: int, wanted: Decision) -> Decision:
        """The decision that stands: one recorded earlier, else ``wanted``, recorded now."""
        earlier = self.get(write_id, batch_id)
        if earlier is not None:
            return earlier
        self.put(write_id, batch_id, wanted)
        return wanted

    def prune(self, now: float) -> None:
        """Drop decisions no re-run or check-back needs: ended or aborted ones beyond the newest
        :data:`KEEP_PER_WRITE` of their write or older than :data:`RESOLVED_TTL`; any older than :data:`MAX_TTL`."""
        addr = self.settings.namesrv[0]
        header = GetKVListByNamespaceRequestHeader(LEDGER_NAMESPACE)
        with connect(self.settings, addr) as conn:
            resp = conn.invoke(RemotingCommand.request(RequestCode.GET_KVLIST_BY_NAMESPACE, header.encode()))
        if resp.code != ResponseCode.SUCCESS or not resp.body:
            return
        by_write: dict[str, list[tuple[int, str, Decision]]] = {}
        for key, value in KVTable.from_json(fastjson.loads(resp.body)).table.items():
            write_id, _, batch = key.rpartition(".")
            try:
                by_write.setdefault(write_id, []).append((int(batch), key, Decision.from_text(value)))
            except (ValueError, KeyError, TypeError):
                continue  # not ours to judge
        stale = []
        for entries in by_write.values():
            entries.sort(reverse=True)
            for rank, (_, key, d) in enumerate(entries):
                resolved = d.ended or not d.commit
                if now - d.at > MAX_TTL or (resolved and (rank >= KEEP_PER_WRITE or now - d.at > RESOLVED_TTL)):
                    stale.append(key)
        for key in stale:
            for ns_addr in self.settings.namesrv:
                self._invoke(ns_addr, RequestCode.DELETE_KV_CONFIG, KVConfigRequestHeader(LEDGER_NAMESPACE, key))

    def _invoke(self, addr: str, code: int, header: KVConfigRequestHeader) -> None:
        try:
            with connect(self.settings, addr) as conn:
                resp = conn.invoke(RemotingCommand.request(code, header.encode()))
        except OSError as e:
            raise ExactlyOnceError(f"the transaction ledger on {addr} is unreachable: {e}") from e
        if resp.code != ResponseCode.SUCCESS:
            raise ExactlyOnceError(f"the transaction ledger on {addr} refused a change: {resp.code} {resp.remark}")


class LedgerListener:
    """Answers check-backs from the ledger (in the client's worker threads, so it may block).

    Decisions are read once they are final; a commit is answered at most once per message in this process,
    and not at all for a message its topic already holds (the broker's UNIQ_KEY index): the half asked
    about may be a check copy of one the driver ended before it died.
    """

    def __init__(self, settings: SinkSettings) -> None:
        self.settings = settings
        self.ledger = Ledger(settings)
        self._lock = threading.Lock()
        self._decisions: dict[tuple[str, int], tuple[Decision | None, float]] = {}
        self._committed: OrderedDict[str, None] = OrderedDict()

    def execute_local_transaction(self, msg: Any, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW  # never called: halves are sent, not sent in a local transaction

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        txn = parse_txn(msg.properties.get(TXN_PROPERTY))
        uniq = msg.uniq_key
        if txn is None or not uniq:
            return LocalTransactionState.UNKNOW
        write_id, batch_id, attempt_id = txn
        now = time.time()
        state = answer(self._decision(write_id, batch_id, now), attempt_id, now)
        if state is not LocalTransactionState.COMMIT_MESSAGE:
            return state
        with self._lock:
            if uniq in self._committed:
                return LocalTransactionState.ROLLBACK_MESSAGE
            self._committed[uniq] = None
            if len(self._committed) > MAX_REMEMBERED:
                self._committed.popitem(last=False)
        try:
            if already_stored(self.settings, msg):
                return LocalTransactionState.ROLLBACK_MESSAGE
        except (OSError, ExactlyOnceError):
            with self._lock:
                self._committed.pop(uniq, None)
            raise  # UNKNOW: asked again on the next check
        return LocalTransactionState.COMMIT_MESSAGE

    def _decision(self, write_id: str, batch_id: int, now: float) -> Decision | None:
        key = (write_id, batch_id)
        with self._lock:
            known, read_at = self._decisions.get(key, (None, 0.0))
        final = known is not None and (known.ended or not known.commit or now >= known.at + known.grace)
        if final or now - read_at < 1.0:
            return known
        known = self.ledger.get(write_id, batch_id)
        with self._lock:
            self._decisions[key] = (known, now)
            if len(self._decisions) > MAX_REMEMBERED:
                self._decisions.pop(next(iter(self._decisions)))
        return known


def already_stored(settings: SinkSettings, half: MessageExt) -> bool:
    """Whether the message ``half`` stands for is stored already, in its topic or parked by a delay or a
    timer (QUERY_MESSAGE of its UNIQ_KEY on the half's broker)."""
    real_topic = half.properties.get(MessageConst.REAL_TOPIC, "")
    uniq = half.uniq_key
    with connect(settings, half.store_host) as conn:
        for topic in (real_topic, SCHEDULE_TOPIC, TIMER_TOPIC):
            header = QueryMessageRequestHeader(topic, uniq or "", 32, half.born_timestamp, int(time.time() * 1000))
            request = RemotingCommand.request(RequestCode.QUERY_MESSAGE, header.encode())
            request.ext_fields[UNIQUE_KEY_QUERY] = "true"
            resp = conn.invoke(request)
            if resp.code == ResponseCode.QUERY_NOT_FOUND:
                continue
            if resp.code != ResponseCode.SUCCESS:
                raise ExactlyOnceError(f"{half.store_host} refused a query of {uniq}: {resp.code} {resp.remark}")
            if any(m.uniq_key == uniq for m in decode_records(resp.body)):
                return True
    return False


def parse_txn(value: str | None) -> tuple[str, int, str] | None:
    """(write id, batch id, attempt id) of a :data:`TXN_PROPERTY` value; None if it is not one."""
    parts = (value or "").split(" ")
    if len(parts) != 3:
        return None
    try:
        return parts[0], int(parts[1]), parts[2]
    except ValueError:
        return None


_participants: dict[tuple[Any, ...], blocking.TransactionProducer] = {}
_participants_lock = threading.Lock()


def participant(settings: SinkSettings) -> blocking.TransactionProducer:
    """This process's producer of the group, which answers check-backs from the ledger (:class:`LedgerListener`)
    for as long as the process lives: Spark reuses its Python workers, so one is made per process and settings."""
    key = (
        settings.namesrv,
        settings.producer_group,
        settings.access_key,
        settings.secret_key,
        tuple(sorted(settings.tls.items())),
    )
    with _participants_lock:
        producer = _participants.get(key)
        if producer is None:
            credentials = None
            if settings.access_key and settings.secret_key:
                credentials = SessionCredentials(settings.access_key, settings.secret_key)
            security = ClientSecurity(credentials, TlsConfig.from_properties(settings.tls, "sink options"))
            producer = blocking.TransactionProducer(
                settings.producer_group,
                list(settings.namesrv),
                transaction_listener=LedgerListener(settings),
                security=security,
                send_timeout=settings.send_timeout,
            )
            producer.start()
            _participants[key] = producer
        return producer


def task_identity(fallback_write_id: str) -> tuple[str, int]:
    """(write id, batch id) of the running task: a streaming query's id and micro-batch, else the batch
    write's own id."""
    ctx = TaskContext.get()
    query_id = ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None
    batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
    if query_id and batch is not None:
        return query_id, int(batch)
    return fallback_write_id, BATCH_WRITE


def send_halves(settings: SinkSettings, txn: str, outgoing: Iterable[OutgoingMessage]) -> list[HalfMessage]:
    """Store every message as a half message tagged ``txn``: singly (a batch cannot hold halves), pipelined
    by the sink's sender; the halves come back in the order given. SinkError (the broker's code and remark)
    if one is refused for good."""
    stored: dict[str, HalfMessage] = {}
    order: list[str] = []
    topics: set[str] = set()

    def on_sent(unit: SendUnit, answer: SendMessageResponseHeader) -> None:
        msg = unit.messages[0]
        uniq = msg.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX]
        commit_log_offset = decode_offset_message_id(answer.msg_id)[1]
        addr = sender.chooser.master(unit.mq.broker_name)
        broker = unit.mq.broker_name
        stored[uniq] = HalfMessage(
            broker,
            addr,
            answer.queue_offset,
            commit_log_offset,
            uniq,
            answer.transaction_id,
            unit.mq.queue_id,
            unit.ordered,
        )

    # One message a request: more of them in flight than at-least-once's batches, within a bound on memory.
    window = min(settings.window * settings.batch_size, HALVES_IN_FLIGHT)
    sender = open_producer(replace(settings, window=window), on_sent)
    try:
        for out in outgoing:
            msg = out.message
            msg.properties[MessageConst.TRANSACTION_PREPARED] = "true"
            msg.properties[MessageConst.PRODUCER_GROUP] = settings.producer_group
            msg.properties[TXN_PROPERTY] = txn
            order.append(msg.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX])
            if msg.topic not in topics:  # known before its first half can need a check-back
                make_known(settings, [msg.topic])
                topics.add(msg.topic)
            # A keyed row keeps its queue on a retry; the order within a queue is made by the ENDs.
            queue = sender.chooser.choose(msg.topic, out.sharding_key)
            sender.send(unit_for(queue, [msg], out.sharding_key is not None))
        sender.flush()
    finally:
        sender.close()
    return [stored[uniq] for uniq in order]


def make_known(settings: SinkSettings, topics: Iterable[str]) -> None:
    """Make this process's :func:`participant` known to the brokers of ``topics``: a broker asks only
    producers it has heard from."""
    producer = participant(settings)
    for topic in topics:
        producer.fetch_publish_message_queues(topic)  # the route: heartbeats go to its brokers from now on
    producer.send_heartbeat()


class ExactlyOnce:
    """The sink's :class:`~spark.sink.Delivery` for ``deliveryGuarantee=exactly-once``; see the module doc."""

    def __init__(self) -> None:
        self.write_id = uuid.uuid4().hex  # made on the driver: the same for every task of a batch write

    # -- in the task

    def write(self, settings: SinkSettings, schema: StructType, rows: Iterator[Any]) -> HalvesWritten:
        write_id, batch_id = task_identity(self.write_id)
        written = HalvesWritten(write_id, batch_id, uuid.uuid4().hex)
        if Ledger(settings).get(write_id, batch_id) is not None:
            # Decided by an earlier run of this batch, whose halves the check-back settles: this process
            # answers for the brokers of the topics; what this run would write would only be rolled back.
            topics = (
                {settings.topic}
                if settings.topic
                else {out.message.topic for out in row_messages(settings, schema, rows)}
            )
            make_known(settings, topics)
            return written
        txn = f"{write_id} {batch_id} {written.attempt_id}"
        written.halves = send_halves(settings, txn, row_messages(settings, schema, rows))
        return written

    # -- on the driver

    def commit(self, settings: SinkSettings, messages: list[WriterCommitMessage | None], batch_id: int | None) -> None:
        self._settle(settings, messages, batch_id, commit=True)

    def abort(self, settings: SinkSettings, messages: list[WriterCommitMessage | None], batch_id: int | None) -> None:
        self._settle(settings, messages, batch_id, commit=False)

    def _settle(
        self, settings: SinkSettings, messages: list[WriterCommitMessage | None], batch_id: int | None, *, commit: bool
    ) -> None:
        written = [m for m in messages if isinstance(m, HalvesWritten)]
        if not written and batch_id is not None:
            return  # no task of this micro-batch finished: its query id is unknown here, and nothing is to end
        write_id = written[0].write_id if written else self.write_id
        batch = BATCH_WRITE if batch_id is None else batch_id
        ledger = Ledger(settings)
        now = round(time.time(), 3)  # the ledger keeps milliseconds
        wanted = Decision(
            commit, now, settings.send_timeout * GRACE_SEND_TIMEOUTS, frozenset(m.attempt_id for m in written)
        )
        decision = ledger.decide(write_id, batch, wanted)
        record_decision_hook()
        covered = {m.attempt_id for m in written if decision.commit and m.attempt_id in decision.attempts}
        left = end_transactions(
            settings, [h for m in written if m.attempt_id not in covered for h in m.halves], commit=False
        )
        if decision is wanted and decision.commit:
            commits = [h for m in written if m.attempt_id in covered for h in m.halves]
            left_committed = end_transactions(settings, commits, commit=True, deadline=decision.at + decision.grace / 2)
            if not left_committed:
                _best_effort(ledger.put, write_id, batch, replace(decision, ended=True))
            left += left_committed
        if left:
            log.warn("{n} half messages of {key} left to the check-back", n=left, key=Ledger.key(write_id, batch))
        # A decision recorded by another run is not ended here: that run may have ended some of its halves
        # before it died. The check-back commits the rest after the grace, never one stored already.
        _best_effort(ledger.prune, now)


def _best_effort(change: Any, *args: Any) -> None:
    """A ledger change the outcome does not hang on (marking a decision ended, pruning): logged if it fails."""
    try:
        change(*args)
    except (ExactlyOnceError, OSError) as e:
        log.warn("transaction ledger not tidied: {error}", error=e)


def record_decision_hook() -> None:
    """Test hook: with :data:`EXIT_AFTER_DECISION` naming a file, the commit writes it and exits the moment
    its decision is recorded, before ending any half message (a driver dying between the two)."""
    marker = os.environ.get(EXIT_AFTER_DECISION)
    if marker and not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
        os._exit(70)


def end_transactions(
    settings: SinkSettings, halves: Iterable[HalfMessage], *, commit: bool, deadline: float = float("inf")
) -> int:
    """END_TRANSACTION (COMMIT or ROLLBACK) for ``halves``, pipelined per broker in their order; how many
    were not ended for sure (refused, unanswered, or commits not sent before ``deadline``, epoch seconds).
    Those are left to the check-back, so none of this fails the write."""
    kind = MessageSysFlag.TRANSACTION_COMMIT_TYPE if commit else MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
    by_addr: dict[str, list[HalfMessage]] = {}
    for h in halves:
        by_addr.setdefault(h.addr, []).append(h)
    left = 0
    for addr, items in by_addr.items():
        ended = 0
        try:
            ended = _end_on(settings, addr, items, kind, deadline)
        except OSError as e:
            log.warn("ending transactions on {addr} failed: {error}", addr=addr, error=e)
        left += len(items) - ended
    return left


def _end_on(settings: SinkSettings, addr: str, items: list[HalfMessage], kind: int, deadline: float) -> int:
    """END_TRANSACTION of ``items`` on one connection, ``_END_WINDOW`` in flight; how many succeeded.

    A keyed half's COMMIT waits for the answer to the one before it on its queue: Apache's broker ends
    transactions on a thread pool, so two COMMITs of one queue in flight may be stored in either order."""
    serial = kind == MessageSysFlag.TRANSACTION_COMMIT_TYPE
    ended = 0
    todo = deque(items)
    keyed: dict[int, deque[HalfMessage]] = {}  # queue id -> its keyed halves not yet sent, in order
    busy: set[int] = set()  # queues with a keyed COMMIT awaiting its answer
    in_flight: dict[int, HalfMessage] = {}  # opaque -> half
    with connect(settings, addr) as conn:

        def ask(h: HalfMessage) -> None:
            header = EndTransactionRequestHeader(
                producer_group=settings.producer_group,
                tran_state_table_offset=h.tran_state_table_offset,
                commit_log_offset=h.commit_log_offset,
                commit_or_rollback=kind,
                msg_id=h.msg_id,
                transaction_id=h.transaction_id,
                bname=h.broker,
            )
            in_flight[conn.send(RemotingCommand.request(RequestCode.END_TRANSACTION, header.encode()))] = h
            if serial and h.ordered:
                busy.add(h.queue_id)

        while True:
            while len(in_flight) < _END_WINDOW and time.time() <= deadline:
                ready = [q for q, waiting in keyed.items() if waiting and q not in busy]
                if ready:
                    ask(keyed[ready[0]].popleft())
                elif todo:
                    h = todo.popleft()
                    if serial and h.ordered:
                        keyed.setdefault(h.queue_id, deque()).append(h)
                    else:
                        ask(h)
                else:
                    break
            if not in_flight:
                return ended
            resp = conn.receive()
            h = in_flight.pop(resp.opaque, None)
            if h is None:
                continue
            if h.ordered:
                busy.discard(h.queue_id)
            if resp.code == ResponseCode.SUCCESS:
                ended += 1
            else:
                log.warn("{addr} did not end a half message: {code} {remark}", addr=addr, code=resp.code,
                         remark=resp.remark)  # fmt: skip
