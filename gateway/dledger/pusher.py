"""Replication (``DLedgerEntryPusher`` of dledger 0.3.1.2) on the reactor.

The leader runs one :class:`EntryDispatcher` per peer: COMPARE walks back from its ledger end until the follower
holds the same entry, TRUNCATE cuts the follower's log there, APPEND then pushes every entry (up to 1000 awaiting an
answer, the oldest pushed again after ``maxPushTimeOutMs``), COMMIT tells an idle follower the commit index once a
second. Each acknowledged push raises the peer's water mark for the term; the quorum ack check takes the water mark
a majority has reached as the commit index and answers the appends waiting for it, or fails them after
``maxWaitAckTimeMs``. A follower's :class:`EntryHandler` keeps the APPEND pushes by index (they may arrive out of
order) and writes them in order, COMPARE, TRUNCATE and COMMIT first.

DLedger runs these as threads woken every millisecond; here one :meth:`DLedgerEntryPusher.run` does their work,
called on every event that gives it some (an append, an answer, a push) and every 10 ms for the timers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twisted.internet import defer, task
from twisted.logger import Logger

from .codes import DLedgerError, DLedgerRequestCode, DLedgerResponseCode
from .config import DLedgerConfig
from .entry import DLedgerEntry
from .member_state import MemberRole, MemberState
from .protocol import PushEntryRequest, PushEntryResponse, PushType
from .rpc import DLedgerRpcService
from .store import DLedgerFileStore

log = Logger()

TICK_S = 0.01
# EntryDispatcher.maxPendingSize: pushes awaiting an answer per peer.
MAX_PENDING_PUSHES = 1000
# Pushes one run sends or writes before it lets the reactor serve others (DLedger's threads just go on).
WORK_PER_RUN = 256
# EntryHandler: COMMIT/COMPARE/TRUNCATE pushes queued (DLedger's ArrayBlockingQueue(1024)), and our bound on the
# APPEND pushes held (DLedger's map is unbounded): twice what an honest leader has in flight, and their bytes.
MAX_QUEUED_PUSHES = 1024
MAX_HELD_APPENDS = 2 * MAX_PENDING_PUSHES
MAX_HELD_APPEND_BYTES = 64 * 1024 * 1024
# A follower answers a push it cannot place after this long with INCONSISTENT_STATE (TimeoutFuture(1000)).
PUSH_HOLD_MS = 1000
# After a failed compare or truncate the dispatcher rests, as DLedger's thread sleeps.
ERROR_PAUSE_MS = 500

CommitListener = Callable[[int], None]


def same_entry(a: DLedgerEntry | None, b: DLedgerEntry | None) -> bool:
    """``DLedgerEntry.equals``: everything but the CRCs (which DLedger never computes)."""
    if a is None or b is None:
        return False
    return (a.size, a.magic, a.index, a.term, a.channel, a.pos, a.body) == (
        b.size,
        b.magic,
        b.index,
        b.term,
        b.channel,
        b.pos,
        b.body,
    )


def _first_index(request: PushEntryRequest) -> int:
    if request.batch_entry:
        return request.batch_entry[0].index
    return request.entry.index if request.entry is not None else -1


def _last_index(request: PushEntryRequest) -> int:
    if request.batch_entry:
        return request.batch_entry[-1].index
    return request.entry.index if request.entry is not None else -1


def _count(request: PushEntryRequest) -> int:
    if request.batch_entry:
        return len(request.batch_entry)
    return int(request.entry is not None)


@dataclass(slots=True)
class AppendResult:
    """An entry the leader appended: ``committed`` fires with it once a majority holds it, or errbacks
    :class:`~.codes.DLedgerError` (WAIT_QUORUM_ACK_TIMEOUT, TERM_CHANGED)."""

    entry: DLedgerEntry
    committed: defer.Deferred[DLedgerEntry] = field(default_factory=defer.Deferred)
    created_ms: float = 0.0


class DLedgerEntryPusher:
    """The leader's dispatchers and quorum ack check, the follower's entry handler."""

    def __init__(
        self,
        config: DLedgerConfig,
        member_state: MemberState,
        store: DLedgerFileStore,
        rpc: DLedgerRpcService,
        reactor: Any,
    ) -> None:
        self.config = config
        self.member_state = member_state
        self.store = store
        self.rpc = rpc
        self.reactor = reactor
        self.water_marks_by_term: dict[int, dict[str, int]] = {}
        self.pending_by_term: dict[int, dict[int, AppendResult]] = {}
        self.dispatchers = {
            peer: EntryDispatcher(self, peer) for peer in member_state.peers if peer != member_state.self_id
        }
        self.entry_handler = EntryHandler(self)
        self.commit_listeners: list[CommitListener] = []
        # QuorumAckChecker's state.
        self.last_quorum_index = -1
        self.last_check_leak_ms = self.now()
        self.last_print_water_mark_ms = self.now()
        self._loop = task.LoopingCall(self.run)
        self._loop.clock = reactor
        self._wakeup: Any = None
        self.running = False

    def now(self) -> float:
        return self.reactor.seconds() * 1000

    def start(self) -> None:
        self.running = True
        self._loop.start(TICK_S, now=False)

    def stop(self) -> None:
        self.running = False
        if self._loop.running:
            self._loop.stop()
        if self._wakeup is not None and self._wakeup.active():
            self._wakeup.cancel()
        self.fail_pending(DLedgerResponseCode.TERM_CHANGED, "the member stopped")

    def wakeup(self) -> None:
        """Run again in the next reactor turn (once, however often asked)."""
        if self.running and (self._wakeup is None or not self._wakeup.active()):
            self._wakeup = self.reactor.callLater(0, self.run)

    def run(self) -> None:
        if not self.running:
            return
        role = self.member_state.role
        try:
            if role is MemberRole.LEADER:
                for dispatcher in self.dispatchers.values():
                    dispatcher.do_work()
                self.check_quorum()
            self.entry_handler.do_work()
        except Exception:
            log.failure("[{id}] Error in the entry pusher", id=self.member_state.self_id)

    # -- water marks and waiting appends

    def _water_marks(self, term: int) -> dict[str, int]:
        marks = self.water_marks_by_term.get(term)
        if marks is None:
            log.info("Initialize the watermark for term={term}", term=term)
            marks = self.water_marks_by_term[term] = dict.fromkeys(self.member_state.peers, -1)
        return marks

    def update_peer_water_mark(self, term: int, peer: str, index: int) -> None:
        marks = self._water_marks(term)
        if marks[peer] < index:
            marks[peer] = index

    def get_peer_water_mark(self, term: int, peer: str) -> int:
        return self._water_marks(term)[peer]

    def _pending(self, term: int) -> dict[int, AppendResult]:
        pending = self.pending_by_term.get(term)
        if pending is None:
            pending = self.pending_by_term[term] = {}
        return pending

    def is_pending_full(self, term: int) -> bool:
        return len(self._pending(term)) > self.config.max_pending_requests_num

    def append(self, body: bytes) -> AppendResult:
        """The leader's append (``handleAppend``): written here, then waited for; :class:`DLedgerError` at once
        when this member cannot take it."""
        ms = self.member_state
        if ms.role is not MemberRole.LEADER or not self.running:
            raise DLedgerError(DLedgerResponseCode.NOT_LEADER, f"{ms.self_id} is not the leader ({ms.leader_id})")
        if ms.transferee is not None:
            raise DLedgerError(DLedgerResponseCode.LEADER_TRANSFERRING, f"handing over to {ms.transferee}")
        if self.is_pending_full(ms.term):
            raise DLedgerError(
                DLedgerResponseCode.LEADER_PENDING_FULL,
                f"more than maxPendingRequestsNum={self.config.max_pending_requests_num} appends await their quorum",
            )
        entry = self.store.append_as_leader(body, ms.term)
        self.update_peer_water_mark(entry.term, ms.self_id, entry.index)
        result = AppendResult(entry, created_ms=self.now())
        if self._pending(entry.term).setdefault(entry.index, result) is not result:
            log.warn("[MONITOR] get old wait at index={index}", index=entry.index)
        self.wakeup()
        return result

    def fail_pending(self, code: DLedgerResponseCode, why: str, keep_term: int | None = None) -> None:
        """Fail every waiting append (of every term but ``keep_term``)."""
        for term in [t for t in self.pending_by_term if t != keep_term]:
            pending = self.pending_by_term.pop(term)
            if pending:
                # (DLedger logs each index; one line says it for all.)
                log.info("[TermChange] Will clear the pending responses of indexes {first}-{last} of term {term}: "
                         "{why}", first=min(pending), last=max(pending), term=term, why=why)  # fmt: skip
            for index, result in pending.items():
                result.committed.errback(DLedgerError(code, f"index {index} of term {term}: {why}"))

    def update_committed_index(self, term: int, committed_index: int) -> None:
        """Raise the store's commit index (``updateCommittedIndex``) and tell the listeners when it moved."""
        store = self.store
        if committed_index == -1 or store.ledger_end_index == -1 or term < self.member_state.term:
            return
        before = store.committed_index
        store.update_committed_index(committed_index)
        if store.committed_index != before:
            for listener in list(self.commit_listeners):
                try:
                    listener(store.committed_index)
                except Exception:
                    log.failure("commit listener failed")

    # -- QuorumAckChecker

    def check_quorum(self) -> None:
        ms, store = self.member_state, self.store
        now = self.now()
        if now - self.last_print_water_mark_ms > 3000:
            log.debug(
                "[{id}][{role}] term={term} ledgerBegin={begin} ledgerEnd={end} committed={committed} "
                "watermarks={marks}",
                id=ms.self_id,
                role=ms.role.name,
                term=ms.term,
                begin=store.ledger_begin_index,
                end=store.ledger_end_index,
                committed=store.committed_index,
                marks=self.water_marks_by_term,
            )
            self.last_print_water_mark_ms = now
        if ms.role is not MemberRole.LEADER:
            return
        term = ms.term
        pending = self._pending(term)
        marks = self._water_marks(term)
        if len(self.pending_by_term) > 1:
            self.fail_pending(DLedgerResponseCode.TERM_CHANGED, f"term changed to {term}", keep_term=term)
        for old in [t for t in self.water_marks_by_term if t != term]:
            log.info("[TermChange] Will clear the watermarks for term changed from {old} to {term}", old=old, term=term)
            del self.water_marks_by_term[old]
            # (DLedger keeps the last quorum index of an earlier leadership: appends at or below it, after a
            # truncation, would wait for the once-a-second sweep.)
            self.last_quorum_index = -1
        quorum_index = sorted(marks.values(), reverse=True)[len(marks) // 2]
        self.update_committed_index(term, quorum_index)
        need_check = False
        acked = 0
        for i in range(quorum_index, self.last_quorum_index, -1):
            result = pending.pop(i, None)
            if result is None:
                need_check = True
                break
            result.committed.callback(result.entry)
            acked += 1
        if acked == 0:
            self._check_timeouts(pending, quorum_index + 1, term)
        if now - self.last_check_leak_ms > 1000 or need_check:
            self.update_peer_water_mark(term, ms.self_id, store.ledger_end_index)
            for i in [i for i in pending if i <= quorum_index]:
                result = pending.pop(i)
                result.committed.callback(result.entry)
            self.last_check_leak_ms = now
        self.last_quorum_index = quorum_index

    def _check_timeouts(self, pending: dict[int, AppendResult], begin: int, term: int) -> None:
        """``checkResponseFuturesTimeout``: fail the oldest appends that waited ``maxWaitAckTimeMs``."""
        now = self.now()
        i = begin
        while (result := pending.get(i)) is not None and now - result.created_ms >= self.config.max_wait_ack_time_ms:
            del pending[i]
            result.committed.errback(
                DLedgerError(
                    DLedgerResponseCode.WAIT_QUORUM_ACK_TIMEOUT,
                    f"index {i} of term {term} not held by a quorum after {self.config.max_wait_ack_time_ms} ms",
                )
            )
            i += 1

    def handle_push(self, request: PushEntryRequest) -> defer.Deferred[PushEntryResponse]:
        return self.entry_handler.handle_push(request)


class EntryDispatcher:
    """The leader's pushes to one peer: COMPARE, TRUNCATE, then APPEND and COMMIT."""

    def __init__(self, pusher: DLedgerEntryPusher, peer_id: str) -> None:
        self.pusher = pusher
        self.peer_id = peer_id
        self.type = PushType.COMPARE
        self.last_push_commit_ms = -1.0
        self.compare_index = -1
        self.write_index = -1
        self.term = -1
        self.leader_id: str | None = None
        self.last_check_leak_ms = pusher.now()
        self.pending: dict[int, float] = {}  # index -> when it was pushed
        # enableBatchPush: the entries gathered for the next push, and the pushes out: first index -> (when, count).
        self.batch: list[DLedgerEntry] = []
        self.batch_pending: dict[int, tuple[float, int]] = {}
        # peerPushQuota: bytes pushed in the current second to a peer far behind (DLedger's Quota, one second).
        self._quota_second = -1
        self._quota_bytes = 0
        # A COMPARE or TRUNCATE awaiting its answer (DLedger's thread blocks on it); the term's count, so an answer
        # from an earlier leadership is ignored; when to go on after an error.
        self._waiting = False
        self._epoch = 0
        self._resume_ms = 0.0

    @property
    def store(self) -> DLedgerFileStore:
        return self.pusher.store

    def _check_and_fresh_state(self) -> bool:
        ms = self.pusher.member_state
        if ms.role is not MemberRole.LEADER:
            return False
        if self.term != ms.term or self.leader_id != ms.leader_id:
            self.term = ms.term
            self.leader_id = ms.self_id
            self._epoch += 1
            self._waiting = False
            self.change_state(-1, PushType.COMPARE)
        return True

    def _build(self, entry: DLedgerEntry | None, push_type: PushType) -> PushEntryRequest:
        ms = self.pusher.member_state
        return PushEntryRequest(
            group=ms.group,
            remote_id=self.peer_id,
            leader_id=self.leader_id,
            local_id=ms.self_id,
            term=self.term,
            entry=entry,
            type=push_type,
            commit_index=self.store.committed_index,
        )

    def _push(self, request: PushEntryRequest) -> defer.Deferred[PushEntryResponse]:
        return self.pusher.rpc.call(DLedgerRequestCode.PUSH, request)

    def change_state(self, index: int, target: PushType) -> None:
        log.info(
            "[Push-{peer}]Change state from {old} to {new} at {index}",
            peer=self.peer_id,
            old=self.type.name,
            new=target.name,
            index=index,
        )
        if target is PushType.APPEND:
            self.compare_index = -1
            self.pusher.update_peer_water_mark(self.term, self.peer_id, index)
            self.pusher.wakeup()
            self.write_index = index + 1
            self.batch = []
        elif target is PushType.COMPARE:
            if self.type is PushType.APPEND:
                self.compare_index = -1
                self.pending.clear()
                self.batch_pending.clear()
        elif target is PushType.TRUNCATE:
            self.compare_index = -1
        self.type = target

    def do_work(self) -> None:
        if self.pusher.now() < self._resume_ms or not self._check_and_fresh_state() or self._waiting:
            return
        try:
            if self.type is PushType.APPEND:
                if self.pusher.config.enable_batch_push:
                    self._do_batch_append()
                else:
                    self._do_append()
            else:
                self._do_compare()
        except Exception as e:
            self._failed(e)

    def _failed(self, e: BaseException) -> None:
        log.error(
            "[Push-{peer}]Error in EntryDispatcher writeIndex={write} compareIndex={compare}: {error}",
            peer=self.peer_id,
            write=self.write_index,
            compare=self.compare_index,
            error=e,
        )
        self._waiting = False
        self.change_state(-1, PushType.COMPARE)
        self._resume_ms = self.pusher.now() + ERROR_PAUSE_MS

    # -- APPEND and COMMIT

    def _do_append(self) -> None:
        for _ in range(WORK_PER_RUN):
            if self.type is not PushType.APPEND or self.pusher.now() < self._resume_ms:
                return
            if self.write_index > self.store.ledger_end_index:
                self._do_commit()
                self._do_check_append_response()
                return
            now = self.pusher.now()
            if len(self.pending) >= MAX_PENDING_PUSHES or now - self.last_check_leak_ms > 1000:
                water_mark = self.pusher.get_peer_water_mark(self.term, self.peer_id)
                for index in [i for i in self.pending if i < water_mark]:
                    del self.pending[index]
                self.last_check_leak_ms = now
            if len(self.pending) >= MAX_PENDING_PUSHES:
                self._do_check_append_response()
                return
            self._do_append_inner(self.write_index)
            self.write_index += 1
        self.pusher.wakeup()  # more to push: after the reactor has served the others

    def _entry_for_append(self, index: int) -> DLedgerEntry | None:
        try:
            return self.store.get(index)
        except DLedgerError as e:
            if e.code is DLedgerResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN:
                log.info(
                    "[Push-{peer}]Get INDEX_LESS_THAN_LOCAL_BEGIN when requested index is {index}, try to compare",
                    peer=self.peer_id,
                    index=index,
                )
                self.change_state(-1, PushType.COMPARE)
                return None
            raise

    def _do_append_inner(self, index: int) -> None:
        entry = self._entry_for_append(index)
        if entry is None:
            return
        self._check_quota(entry)
        request = self._build(entry, PushType.APPEND)
        self.pending[index] = self.pusher.now()
        self._push(request).addCallback(self._appended, self._epoch, index, self.term)
        self.last_push_commit_ms = self.pusher.now()

    def _check_quota(self, entry: DLedgerEntry) -> None:
        """``checkQuotaAndWait``: to a peer more than 1000 entries and ``peerPushThrottlePoint`` bytes behind, push
        at most ``peerPushQuota`` bytes a second (this one goes; the next wait for the next second)."""
        store, config = self.store, self.pusher.config
        if store.ledger_end_index - entry.index <= MAX_PENDING_PUSHES:
            return
        if store.data.wrote_where - entry.pos < config.peer_push_throttle_point:
            return
        now = self.pusher.now()
        second = int(now // 1000)
        if second != self._quota_second:
            self._quota_second, self._quota_bytes = second, 0
        self._quota_bytes += entry.size
        if self._quota_bytes >= config.peer_push_quota:
            self._resume_ms = (second + 1) * 1000
            log.warn("[Push-{peer}]Quota exhaust, will sleep {ms}ms", peer=self.peer_id, ms=int(self._resume_ms - now))

    def _appended(self, x: PushEntryResponse, epoch: int, index: int, term: int) -> None:
        code = DLedgerResponseCode(x.code)
        if code is DLedgerResponseCode.SUCCESS:
            if x.index != index:  # DLedger trusts the echoed index; a wrong one must not move the water mark
                log.warn(
                    "[Push-{peer}]SUCCESS for index={got} answers the push of {index}; ignored",
                    peer=self.peer_id,
                    got=x.index,
                    index=index,
                )
                return
            self.pending.pop(index, None)
            self.pusher.update_peer_water_mark(term, self.peer_id, index)
            self.pusher.wakeup()
        else:
            self._push_failed(code, "push", epoch, index, term)

    def _push_failed(self, code: DLedgerResponseCode, what: str, epoch: int, index: int, term: int) -> None:
        """An append push (``what``: push or batch push) not taken: compare again after INCONSISTENT_STATE (when
        this dispatcher is still in the epoch that pushed), else only log it and let the retry timer push again."""
        if code is DLedgerResponseCode.INCONSISTENT_STATE:
            log.info(
                "[Push-{peer}]Get INCONSISTENT_STATE when {what} index={index} term={term}",
                peer=self.peer_id,
                what=what,
                index=index,
                term=term,
            )
            if epoch == self._epoch:
                self.change_state(-1, PushType.COMPARE)
                self.pusher.wakeup()
        else:
            log.warn(
                "[Push-{peer}]Get error response code {code} index={index} term={term}",
                peer=self.peer_id,
                code=code.name,
                index=index,
                term=term,
            )

    def _do_commit(self) -> None:
        if self.pusher.now() - self.last_push_commit_ms > 1000:
            self._push(self._build(None, PushType.COMMIT))  # the answer does not matter
            self.last_push_commit_ms = self.pusher.now()

    def _do_check_append_response(self) -> None:
        water_mark = self.pusher.get_peer_water_mark(self.term, self.peer_id)
        sent = self.pending.get(water_mark + 1)
        if sent is not None and self.pusher.now() - sent > self.pusher.config.max_push_time_out_ms:
            log.warn("[Push-{peer}]Retry to push entry at {index}", peer=self.peer_id, index=water_mark + 1)
            self._do_append_inner(water_mark + 1)

    # -- APPEND in batches (enableBatchPush)

    def _do_batch_append(self) -> None:
        for _ in range(WORK_PER_RUN):
            if self.type is not PushType.APPEND:
                return
            if self.write_index > self.store.ledger_end_index:
                if self.batch:
                    self._send_batch()
                self._do_commit()
                self._do_check_batch_append_response()
                return
            now = self.pusher.now()
            if len(self.batch_pending) >= MAX_PENDING_PUSHES or now - self.last_check_leak_ms > 1000:
                water_mark = self.pusher.get_peer_water_mark(self.term, self.peer_id)
                for first in [f for f, (_, count) in self.batch_pending.items() if f + count - 1 <= water_mark]:
                    del self.batch_pending[first]
                self.last_check_leak_ms = now
            if len(self.batch_pending) >= MAX_PENDING_PUSHES:
                self._do_check_batch_append_response()
                return
            entry = self._entry_for_append(self.write_index)
            if entry is not None:
                self.batch.append(entry)
                if sum(e.size for e in self.batch) >= self.pusher.config.max_batch_push_size:
                    self._send_batch()
            self.write_index += 1
        self.pusher.wakeup()

    def _send_batch(self) -> None:
        batch, self.batch = self.batch, []
        request = self._build(None, PushType.APPEND)
        request.batch_entry = batch
        first, count = batch[0].index, len(batch)
        self.batch_pending[first] = (self.pusher.now(), count)
        self._push(request).addCallback(self._batch_appended, self._epoch, first, count, self.term)
        self.last_push_commit_ms = self.pusher.now()

    def _batch_appended(self, x: PushEntryResponse, epoch: int, first: int, count: int, term: int) -> None:
        code = DLedgerResponseCode(x.code)
        if code is DLedgerResponseCode.SUCCESS:
            if (x.index, x.count) != (first, count):
                log.warn(
                    "[Push-{peer}]SUCCESS for index={got} count={got_count} answers the push of {first}+{count}; "
                    "ignored",
                    peer=self.peer_id,
                    got=x.index,
                    got_count=x.count,
                    first=first,
                    count=count,
                )
                return
            self.batch_pending.pop(first, None)
            self.pusher.update_peer_water_mark(term, self.peer_id, first + count - 1)
            self.pusher.wakeup()
        else:
            self._push_failed(code, "batch push", epoch, first, term)

    def _do_check_batch_append_response(self) -> None:
        water_mark = self.pusher.get_peer_water_mark(self.term, self.peer_id)
        pushed = self.batch_pending.get(water_mark + 1)
        if pushed is not None and self.pusher.now() - pushed[0] > self.pusher.config.max_push_time_out_ms:
            first, last = water_mark + 1, water_mark + pushed[1]
            log.warn(
                "[Push-{peer}]Retry to push entry from {first} to {last}", peer=self.peer_id, first=first, last=last
            )
            gathered, self.batch = self.batch, [self.store.get(i) for i in range(first, last + 1)]
            self._send_batch()
            self.batch = gathered  # (DLedger drops what it had gathered; the follower would then see a gap)

    # -- COMPARE and TRUNCATE

    def _do_compare(self) -> None:
        store = self.store
        if self.type not in (PushType.COMPARE, PushType.TRUNCATE):
            return
        if self.compare_index == -1 and store.ledger_end_index == -1:
            return
        if self.compare_index == -1:
            self.compare_index = store.ledger_end_index
            log.info("[Push-{peer}][DoCompare] compareIndex=-1 means start to compare", peer=self.peer_id)
        elif not store.ledger_begin_index <= self.compare_index <= store.ledger_end_index:
            log.info(
                "[Push-{peer}][DoCompare] compareIndex={index} out of range {begin}-{end}",
                peer=self.peer_id,
                index=self.compare_index,
                begin=store.ledger_begin_index,
                end=store.ledger_end_index,
            )
            self.compare_index = store.ledger_end_index
        entry = store.get(self.compare_index)
        self._waiting = True
        epoch = self._epoch
        self._push(self._build(entry, PushType.COMPARE)).addCallback(self._compared, epoch, self.compare_index)

    def _compared(self, response: PushEntryResponse, epoch: int, compare_index: int) -> None:
        if epoch != self._epoch:
            return
        self._waiting = False
        try:
            self._after_compare(response, compare_index)
        except Exception as e:
            self._failed(e)

    def _after_compare(self, response: PushEntryResponse, compare_index: int) -> None:
        store = self.store
        code = DLedgerResponseCode(response.code)
        if code not in (DLedgerResponseCode.SUCCESS, DLedgerResponseCode.INCONSISTENT_STATE):
            raise DLedgerError(code, f"compareIndex={compare_index}")
        truncate_index = -1
        if code is DLedgerResponseCode.SUCCESS:
            if compare_index == response.end_index:
                self.change_state(compare_index, PushType.APPEND)
                return
            truncate_index = compare_index  # the follower has more after it: cut
        elif response.end_index < store.ledger_begin_index or response.begin_index > store.ledger_end_index:
            truncate_index = store.ledger_begin_index  # no entry in common
        elif compare_index < response.begin_index:
            truncate_index = store.ledger_begin_index
        elif compare_index > response.end_index:
            self.compare_index = response.end_index
        else:
            self.compare_index = compare_index - 1
        if self.compare_index < store.ledger_begin_index:
            truncate_index = store.ledger_begin_index
        if truncate_index != -1:
            self.change_state(truncate_index, PushType.TRUNCATE)
            self._do_truncate(truncate_index)
        else:
            self.pusher.wakeup()

    def _do_truncate(self, truncate_index: int) -> None:
        entry = self.store.get(truncate_index)
        log.info(
            "[Push-{peer}]Will push data to truncate truncateIndex={index} pos={pos}",
            peer=self.peer_id,
            index=truncate_index,
            pos=entry.pos,
        )
        self._waiting = True
        epoch = self._epoch
        self._push(self._build(entry, PushType.TRUNCATE)).addCallback(self._truncated, epoch, truncate_index)

    def _truncated(self, response: PushEntryResponse, epoch: int, truncate_index: int) -> None:
        if epoch != self._epoch:
            return
        self._waiting = False
        code = DLedgerResponseCode(response.code)
        if code is not DLedgerResponseCode.SUCCESS:
            self._failed(DLedgerError(code, f"truncateIndex={truncate_index}"))
            return
        self.last_push_commit_ms = self.pusher.now()
        self.change_state(truncate_index, PushType.APPEND)


class EntryHandler:
    """The follower's side: pushes kept until they can be written in order."""

    def __init__(self, pusher: DLedgerEntryPusher) -> None:
        self.pusher = pusher
        # APPEND pushes by first index: (request, answer, arrival ms).
        self.write_requests: dict[int, tuple[PushEntryRequest, defer.Deferred[PushEntryResponse], float]] = {}
        self.held_bytes = 0
        self.compare_or_truncate: deque[tuple[PushEntryRequest, defer.Deferred[PushEntryResponse]]] = deque()
        self.last_check_fast_forward_ms = pusher.now()

    @property
    def store(self) -> DLedgerFileStore:
        return self.pusher.store

    def handle_push(self, request: PushEntryRequest) -> defer.Deferred[PushEntryResponse]:
        d: defer.Deferred[PushEntryResponse] = defer.Deferred()
        if request.type is PushType.APPEND:
            if _count(request) == 0:
                raise DLedgerError(DLedgerResponseCode.UNEXPECTED_ARGUMENT, "APPEND push without an entry")
            index = _first_index(request)
            size = sum(e.size for e in request.batch_entry) if request.batch_entry else request.entry.size
            if index in self.write_requests:
                old = self.write_requests[index][0]
                log.warn(
                    "[MONITOR]The index {index} has already existed with term={old} and curr is term={term}",
                    index=index,
                    old=old.term,
                    term=request.term,
                )
                d.callback(self.build_response(request, DLedgerResponseCode.REPEATED_PUSH))
            elif len(self.write_requests) >= MAX_HELD_APPENDS or self.held_bytes + size > MAX_HELD_APPEND_BYTES:
                log.warn(
                    "[{id}] {count} append pushes of {bytes} bytes held; refused index {index}",
                    id=self.pusher.member_state.self_id,
                    count=len(self.write_requests),
                    bytes=self.held_bytes,
                    index=index,
                )
                d.callback(self.build_response(request, DLedgerResponseCode.PUSH_REQUEST_IS_FULL))
            else:
                self.write_requests[index] = (request, d, self.pusher.now())
                self.held_bytes += size
                if (
                    index == self.store.ledger_end_index + 1
                    and not self.compare_or_truncate
                    and self.pusher.member_state.role is MemberRole.FOLLOWER
                ):
                    # The next entry: written now, so its answer leaves with this read's, a reactor turn earlier.
                    self.do_work()
                    return d
        else:
            if request.type in (PushType.COMPARE, PushType.TRUNCATE):
                if request.entry is None:
                    raise DLedgerError(DLedgerResponseCode.UNEXPECTED_ARGUMENT, f"{request.type.name} without entry")
                self._clear_write_requests()
            if len(self.compare_or_truncate) >= MAX_QUEUED_PUSHES:
                log.warn(
                    "compareOrTruncateRequests blockingQueue is full when put {type} request", type=request.type.name
                )
                d.callback(self.build_response(request, DLedgerResponseCode.PUSH_REQUEST_IS_FULL))
            else:
                self.compare_or_truncate.append((request, d))
        self.pusher.wakeup()
        return d

    def _clear_write_requests(self) -> None:
        # DLedger drops them unanswered: the leader, comparing now, no longer waits for them.
        self.write_requests.clear()
        self.held_bytes = 0

    def _take(self, index: int) -> tuple[PushEntryRequest, defer.Deferred[PushEntryResponse], float] | None:
        held = self.write_requests.pop(index, None)
        if held is not None:
            request = held[0]
            self.held_bytes -= sum(e.size for e in request.batch_entry) if request.batch_entry else request.entry.size
        return held

    def build_response(self, request: PushEntryRequest, code: DLedgerResponseCode) -> PushEntryResponse:
        response = PushEntryResponse(
            group=request.group,
            code=int(code),
            term=request.term,
            begin_index=self.store.ledger_begin_index,
            end_index=self.store.ledger_end_index,
        )
        if request.type is not PushType.COMMIT:
            response.index = _first_index(request)
            response.count = _count(request)
        return response

    def _check_leader(self, request: PushEntryRequest) -> None:
        """What DLedger's store checks before it writes a pushed entry."""
        ms = self.pusher.member_state
        if ms.role is not MemberRole.FOLLOWER:
            raise DLedgerError(DLedgerResponseCode.NOT_FOLLOWER, f"role={ms.role.name}")
        if request.term != ms.term:
            raise DLedgerError(DLedgerResponseCode.INCONSISTENT_TERM, f"term {request.term} != {ms.term}")
        if request.leader_id != ms.leader_id:
            raise DLedgerError(
                DLedgerResponseCode.INCONSISTENT_LEADER, f"leaderId {request.leader_id} != {ms.leader_id}"
            )

    def _commit(self, request: PushEntryRequest) -> None:
        # DLedger takes any term not below its own here; we take the commit index only from our leader.
        ms = self.pusher.member_state
        if request.term == ms.term and request.leader_id == ms.leader_id:
            self.pusher.update_committed_index(request.term, request.commit_index)

    def do_work(self) -> None:
        if self.pusher.member_state.role is not MemberRole.FOLLOWER:
            while self.compare_or_truncate:
                request, d = self.compare_or_truncate.popleft()
                d.callback(self.build_response(request, DLedgerResponseCode.NOT_FOLLOWER))
            return
        for _ in range(WORK_PER_RUN):
            if self.compare_or_truncate:
                request, d = self.compare_or_truncate.popleft()
                if request.type is PushType.TRUNCATE:
                    self._handle_truncate(request, d)
                elif request.type is PushType.COMPARE:
                    self._handle_compare(request, d)
                else:
                    self._handle_commit(request, d)
                continue
            next_index = self.store.ledger_end_index + 1
            held = self._take(next_index)
            if held is None:
                self._check_abnormal_future(self.store.ledger_end_index)
                return
            self._handle_append(next_index, held[0], held[1])
        self.pusher.wakeup()

    def _handle_append(self, write_index: int, request: PushEntryRequest, d: defer.Deferred[Any]) -> None:
        try:
            if write_index != _first_index(request):
                raise DLedgerError(DLedgerResponseCode.INCONSISTENT_STATE, f"{write_index} != {_first_index(request)}")
            self._check_leader(request)
            for entry in request.batch_entry or [request.entry]:
                self.store.append_as_follower(entry)
        except Exception as e:
            log.error("[HandleDoAppend] writeIndex={index}: {error}", index=write_index, error=e)
            d.callback(self.build_response(request, DLedgerResponseCode.INCONSISTENT_STATE))
            return
        d.callback(self.build_response(request, DLedgerResponseCode.SUCCESS))
        self._commit(request)

    def _handle_compare(self, request: PushEntryRequest, d: defer.Deferred[Any]) -> None:
        try:
            local = self.store.get(request.entry.index)
            code = (
                DLedgerResponseCode.SUCCESS
                if same_entry(request.entry, local)
                else (DLedgerResponseCode.INCONSISTENT_STATE)
            )
        except DLedgerError as e:
            log.error("[HandleDoCompare] compareIndex={index}: {error}", index=request.entry.index, error=e)
            code = DLedgerResponseCode.INCONSISTENT_STATE
        d.callback(self.build_response(request, code))

    def _handle_commit(self, request: PushEntryRequest, d: defer.Deferred[Any]) -> None:
        try:
            self._commit(request)
            code = DLedgerResponseCode.SUCCESS
        except DLedgerError as e:
            log.error("[HandleDoCommit] committedIndex={index}: {error}", index=request.commit_index, error=e)
            code = DLedgerResponseCode.UNKNOWN
        d.callback(self.build_response(request, code))

    def _handle_truncate(self, request: PushEntryRequest, d: defer.Deferred[Any]) -> None:
        entry = request.entry
        log.info("[HandleDoTruncate] truncateIndex={index} pos={pos}", index=entry.index, pos=entry.pos)
        try:
            self._check_leader(request)
            self.store.truncate(entry)
        except Exception as e:
            log.error("[HandleDoTruncate] truncateIndex={index}: {error}", index=entry.index, error=e)
            d.callback(self.build_response(request, DLedgerResponseCode.INCONSISTENT_STATE))
            return
        d.callback(self.build_response(request, DLedgerResponseCode.SUCCESS))
        self._commit(request)

    def _check_abnormal_future(self, end_index: int) -> None:
        """Every second: answer pushes already written (their ack was lost) and, when the next one is missing,
        the oldest push held longer than PUSH_HOLD_MS with INCONSISTENT_STATE, so the leader compares again."""
        now = self.pusher.now()
        if now - self.last_check_fast_forward_ms < 1000:
            return
        self.last_check_fast_forward_ms = now
        if not self.write_requests:
            return
        fast_forward = None
        for first, (request, d, arrived) in list(self.write_requests.items()):
            last = _last_index(request)
            if last <= end_index:
                self._take(first)
                try:
                    written = all(
                        same_entry(e, self.store.get(e.index)) for e in request.batch_entry or [request.entry]
                    )
                except DLedgerError:
                    written = False
                code = DLedgerResponseCode.SUCCESS if written else DLedgerResponseCode.INCONSISTENT_STATE
                log.warn(
                    "[PushFallBehind]The leader pushed an entry last index={last} smaller than current "
                    "ledgerEndIndex={end}, maybe the last ack is missed",
                    last=last,
                    end=end_index,
                )
                d.callback(self.build_response(request, code))
                continue
            if first == end_index + 1:
                return
            if now - arrived >= PUSH_HOLD_MS and (fast_forward is None or first < fast_forward):
                fast_forward = first
        if fast_forward is None:
            return
        log.warn("[PushFastForward] ledgerEndIndex={end} entryIndex={index}", end=end_index, index=fast_forward)
        request, d, _ = self._take(fast_forward)
        d.callback(self.build_response(request, DLedgerResponseCode.INCONSISTENT_STATE))
