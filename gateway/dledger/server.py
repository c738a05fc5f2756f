"""A DLedger member (``DLedgerServer`` of dledger 0.3.1.2) as a Twisted service.

It opens the store (unless given one), listens for its peers' RPCs on its own address, elects with them and
replicates: the leader takes appends (:meth:`DLedgerServer.append`, or a DLedger client's APPEND RPC) and answers
each once a majority holds it. Requests are answered as DLedger answers them: a request for another member or
group gets UNKNOWN_MEMBER / UNKNOWN_GROUP in its response body, a request the leader alone serves NOT_LEADER.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from twisted.application.service import Service
from twisted.internet import defer, task
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IReactorThreads
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from .codes import DLedgerError, DLedgerRequestCode, DLedgerResponseCode
from .config import DLedgerConfig, DLedgerConfigError
from .elector import DLedgerLeaderElector
from .member_state import MemberRole, MemberState
from .protocol import (
    AppendEntryRequest,
    AppendEntryResponse,
    DLedgerProtocolError,
    GetEntriesRequest,
    GetEntriesResponse,
    HeartBeatRequest,
    HeartBeatResponse,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    MetadataRequest,
    MetadataResponse,
    PushEntryRequest,
    PushEntryResponse,
    RequestOrResponse,
    VoteRequest,
    VoteResponse,
)
from .pusher import AppendResult, CommitListener, DLedgerEntryPusher
from .rpc import DLedgerRpcService, copy_base_info
from .store import DLedgerFileStore

__all__ = ["AppendResult", "DLedgerServer"]

log = Logger()

RoleListener = Callable[[MemberRole, int, "str | None"], None]

# DLedgerServer checks its preferred leaders once a second, the first time a second after start.
PREFERRED_LEADER_CHECK_S = 1.0
# A transferee that has not yet the leader's last entry looks again this often (DLedger sleeps 10 ms).
TRANSFEREE_POLL_S = 0.01


class DLedgerServer(Service):
    """One member of a DLedger group."""

    def __init__(self, config: DLedgerConfig, reactor: Any = None, store: DLedgerFileStore | None = None) -> None:
        if reactor is None:
            from twisted.internet import reactor as default_reactor

            reactor = default_reactor
        self.config = config
        self.reactor = reactor
        self._owns_store = store is None
        self.store = store if store is not None else DLedgerFileStore(config.store)
        self.member_state = MemberState(config, self.store)
        self.rpc = DLedgerRpcService(
            self.member_state,
            reactor,
            {
                DLedgerRequestCode.METADATA: self._guard(MetadataResponse, "HandleMetadata", self._handle_metadata),
                DLedgerRequestCode.APPEND: self._guard(AppendEntryResponse, "HandleAppend", self._handle_append),
                DLedgerRequestCode.GET: self._guard(GetEntriesResponse, "HandleGet", self._handle_get),
                DLedgerRequestCode.VOTE: self._guard(VoteResponse, "HandleVote", self._handle_vote),
                DLedgerRequestCode.HEART_BEAT: self._guard(
                    HeartBeatResponse, "HandleHeartBeat", self._handle_heart_beat
                ),
                DLedgerRequestCode.PULL: self._handle_pull,
                DLedgerRequestCode.PUSH: self._guard(PushEntryResponse, "HandlePush", self._handle_push),
                DLedgerRequestCode.LEADERSHIP_TRANSFER: self._guard(
                    LeadershipTransferResponse, "handleLeadershipTransfer", self._handle_leadership_transfer
                ),
            },
        )
        self.pusher = DLedgerEntryPusher(config, self.member_state, self.store, self.rpc, reactor)
        self.elector = DLedgerLeaderElector(config, self.member_state, self.rpc, reactor)
        self.elector.role_change_handlers.append(self._role_changed)
        self._role_listeners: list[RoleListener] = []
        self._flush = task.LoopingCall(self._flush_store)
        self._flush.clock = reactor
        self._last_checkpoint_ms = 0.0
        # DLedger's FlushDataService thread: an fdatasync on the reactor stalled every append and push behind it.
        # (A reactor without threads, a test's clock, flushes in line.)
        self._flush_pool: ThreadPool | None = None
        if IReactorThreads.providedBy(reactor):
            self._flush_pool = ThreadPool(minthreads=0, maxthreads=1, name="dledger-flush")
        self._flushing: defer.Deferred[None] | None = None
        self._preferred = task.LoopingCall(self._check_preferred_leader)
        self._preferred.clock = reactor
        self._preferred_start: Any = None
        self._leader_since = -1.0  # when this member last won an election (ms, the elector's clock)
        self.port = 0

    # -- the contract

    def append(self, body: bytes) -> AppendResult:
        """Append ``body`` as the leader; :class:`DLedgerError` at once when this member cannot take it."""
        return self.pusher.append(body)

    def majority_silence_ms(self) -> float:
        """Milliseconds since this leader last heard from a majority of its group: since its last heartbeat round
        a majority answered, or since it won its election if later; infinite when it is not the leader."""
        if self.member_state.role is not MemberRole.LEADER:
            return math.inf
        return self.elector.elapsed(max(self.elector.last_succ_heart_beat_time, self._leader_since))

    def heard_from_majority(self) -> bool:
        """Whether this member leads and heard from a majority within DLedger's heartbeat timeout
        (``maxHeartBeatLeak`` heartbeat intervals, after which its followers call an election): a leader frozen or
        cut off longer than that may have been replaced without knowing it."""
        timeout = self.config.max_heart_beat_leak * self.config.heart_beat_time_interval_ms
        return self.majority_silence_ms() <= timeout

    def add_role_listener(self, cb: RoleListener) -> None:
        """``cb(role, term, leader_id)`` on every role change."""
        self._role_listeners.append(cb)

    def add_commit_listener(self, cb: CommitListener) -> None:
        """``cb(committed_index)`` each time the committed index moves."""
        self.pusher.commit_listeners.append(cb)

    def transfer_leadership(self, to_id: str) -> defer.Deferred[LeadershipTransferResponse]:
        """Hand leadership to member ``to_id``; fires with the transferee's answer once it leads, errbacks
        :class:`DLedgerError` when it did not."""
        ms = self.member_state
        request = LeadershipTransferRequest(
            group=ms.group,
            remote_id=ms.self_id,
            local_id=ms.self_id,
            leader_id=ms.leader_id,
            term=ms.term,
            transfer_id=ms.self_id,
            transferee_id=to_id,
        )
        d = defer.maybeDeferred(self._handle_leadership_transfer, request)

        def check(response: LeadershipTransferResponse) -> LeadershipTransferResponse:
            if response.code != DLedgerResponseCode.SUCCESS:
                raise DLedgerError(DLedgerResponseCode(response.code), f"leadership transfer to {to_id} failed")
            return response

        return d.addCallback(check)

    # -- the service

    def startService(self) -> None:
        if self._owns_store:
            self.store.open()
        try:
            self.port = self.rpc.listen()
        except CannotListenError as e:
            if self._owns_store:
                self.store.close()
            raise DLedgerConfigError(
                f"dLegerPeers: member {self.config.self_id} cannot listen on {self.config.self_addr}: "
                f"{e.socketError.strerror if isinstance(e.socketError, OSError) else e.socketError}"
            ) from None
        super().startService()
        self.pusher.start()
        self.elector.start()
        if self._flush_pool is not None:
            self._flush_pool.start()
        self._flush.start(self.config.flush_file_interval / 1000, now=False)
        self._preferred_start = self.reactor.callLater(
            PREFERRED_LEADER_CHECK_S, self._preferred.start, PREFERRED_LEADER_CHECK_S, True
        )
        log.info(
            "[{id}] DLedger member of group {group} listens on {addr} (peers {peers}), term {term}",
            id=self.member_state.self_id,
            group=self.config.group,
            addr=self.config.self_addr,
            peers=";".join(f"{k}-{v}" for k, v in self.config.peers.items()),
            term=self.member_state.term,
        )

    @defer.inlineCallbacks
    def stopService(self) -> Any:
        super().stopService()
        self.elector.stop()
        self.pusher.stop()
        for loop in (self._flush, self._preferred):
            if loop.running:
                loop.stop()
        if self._preferred_start is not None and self._preferred_start.active():
            self._preferred_start.cancel()
        if self._flushing is not None:
            yield self._flushing
        if self._flush_pool is not None and self._flush_pool.started:
            self._flush_pool.stop()
        yield self.rpc.close()
        if self._owns_store:
            self.store.close()
        else:
            self.store.flush()

    def _flush_store(self) -> None:
        """DLedger's flush service: write back what was appended; the checkpoint every ``checkPointInterval``.
        One flush at a time, on the flush thread."""
        if self._flushing is not None:
            return
        store = self.store
        dirty = store.data.wrote_where > store.data.flushed_where or store.index.wrote_where > store.index.flushed_where
        now = self.reactor.seconds() * 1000
        checkpoint = now - self._last_checkpoint_ms >= self.config.check_point_interval
        if checkpoint:
            self._last_checkpoint_ms = now
        if not dirty and not checkpoint:
            return
        if self._flush_pool is None:
            self._sync(dirty, checkpoint)
            return
        d = deferToThreadPool(self.reactor, self._flush_pool, self._sync, dirty, checkpoint)
        self._flushing = d
        d.addBoth(self._synced)

    def _sync(self, dirty: bool, checkpoint: bool) -> None:
        """Blocking: fsync the data and index files (each under its queue's lock), write the checkpoint."""
        if dirty:
            self.store.data.flush()
            self.store.index.flush()
        if checkpoint:
            self.store.persist_checkpoint()

    def _synced(self, outcome: Failure | None) -> None:
        self._flushing = None
        if isinstance(outcome, Failure):
            log.failure("[{id}] DLedger flush failed", outcome, id=self.member_state.self_id)

    def _role_changed(self, term: int, role: MemberRole) -> None:
        if role is MemberRole.LEADER:
            self._leader_since = self.elector.now()
        else:
            self.pusher.fail_pending(DLedgerResponseCode.TERM_CHANGED, f"{self.member_state.self_id} is {role.name}")
        self.pusher.wakeup()
        for cb in list(self._role_listeners):
            try:
                cb(role, term, self.member_state.leader_id)
            except Exception:
                log.failure("role listener failed")

    # -- serving requests

    def _guard(
        self, response_type: type[RequestOrResponse], name: str, handler: Callable[[Any], Any]
    ) -> Callable[[Any], Any]:
        """The checks DLedgerServer makes first, and its answer to a DLedgerException."""
        ms = self.member_state

        def refused(request: RequestOrResponse, e: DLedgerError) -> RequestOrResponse:
            log.error("[{id}][{name}] failed: {error}", id=ms.self_id, name=name, error=e)
            response = copy_base_info(response_type(), request)
            response.code = int(e.code)
            response.leader_id = ms.leader_id
            return response

        def handle(request: RequestOrResponse) -> Any:
            try:
                if request.remote_id != ms.self_id:
                    raise DLedgerError(DLedgerResponseCode.UNKNOWN_MEMBER, f"{request.remote_id} != {ms.self_id}")
                if request.group != ms.group:
                    raise DLedgerError(DLedgerResponseCode.UNKNOWN_GROUP, f"{request.group} != {ms.group}")
                result = handler(request)
            except DLedgerError as e:
                return refused(request, e)
            if isinstance(result, defer.Deferred):
                result.addErrback(lambda f: refused(request, f.trap(DLedgerError) and f.value))
            return result

        return handle

    def _handle_metadata(self, request: MetadataRequest) -> MetadataResponse:
        ms = self.member_state
        return MetadataResponse(group=ms.group, peers=dict(ms.peers), leader_id=ms.leader_id)

    def _handle_heart_beat(self, request: HeartBeatRequest) -> HeartBeatResponse:
        return self.elector.handle_heart_beat(request)

    def _handle_vote(self, request: VoteRequest) -> VoteResponse:
        return self.elector.handle_vote(request)

    def _handle_pull(self, request: Any) -> Any:
        # DLedger 0.3.1.2 has no PULL: its handler returns null and remoting answers the NullPointerException.
        raise DLedgerProtocolError("PULL is not served (DLedger 0.3.1.2 has no pull)")

    def _handle_push(self, request: PushEntryRequest) -> defer.Deferred[PushEntryResponse]:
        return self.pusher.handle_push(request)

    def _handle_get(self, request: GetEntriesRequest) -> GetEntriesResponse:
        ms = self.member_state
        if ms.role is not MemberRole.LEADER:
            raise DLedgerError(DLedgerResponseCode.NOT_LEADER, f"{ms.self_id} is not the leader")
        if request.begin_index is None:
            raise DLedgerProtocolError("GetEntriesRequest without beginIndex")
        return GetEntriesResponse(group=ms.group, entries=[self.store.get(request.begin_index)])

    def _handle_append(self, request: AppendEntryRequest) -> Any:
        ms = self.member_state
        if ms.role is not MemberRole.LEADER:
            raise DLedgerError(DLedgerResponseCode.NOT_LEADER, f"{ms.self_id} is not the leader")
        if ms.transferee is not None:
            raise DLedgerError(DLedgerResponseCode.LEADER_TRANSFERRING, f"handing over to {ms.transferee}")
        if self.pusher.is_pending_full(ms.term):
            return AppendEntryResponse(
                group=ms.group, code=int(DLedgerResponseCode.LEADER_PENDING_FULL), term=ms.term, leader_id=ms.self_id
            )
        if request.body is None:
            raise DLedgerProtocolError("AppendEntryRequest without body")
        result = self.pusher.append(request.body)
        entry = result.entry

        def committed(_: Any) -> AppendEntryResponse:
            return AppendEntryResponse(
                group=ms.group, term=entry.term, index=entry.index, leader_id=ms.self_id, pos=entry.pos
            )

        def failed(failure: Any) -> AppendEntryResponse:
            e = failure.trap(DLedgerError) and failure.value
            response = AppendEntryResponse(group=ms.group, code=int(e.code), index=entry.index)
            if e.code is DLedgerResponseCode.WAIT_QUORUM_ACK_TIMEOUT:
                response.term, response.leader_id = entry.term, ms.self_id
            else:
                response.leader_id = ms.leader_id
            return response

        return result.committed.addCallbacks(committed, failed)

    def _handle_leadership_transfer(self, request: LeadershipTransferRequest) -> Any:
        ms = self.member_state
        if ms.self_id == request.transfer_id:
            # The leader, asked to hand over.
            if not ms.is_peer_member(request.transferee_id):
                raise DLedgerError(
                    DLedgerResponseCode.UNKNOWN_MEMBER, f"transferee={request.transferee_id} is not a peer member"
                )
            if ms.term != request.term:
                raise DLedgerError(
                    DLedgerResponseCode.INCONSISTENT_TERM, f"currTerm({ms.term}) != request.term({request.term})"
                )
            if ms.role is not MemberRole.LEADER:
                raise DLedgerError(DLedgerResponseCode.NOT_LEADER, f"selfId={ms.self_id} is not leader={ms.leader_id}")
            behind = self.store.ledger_end_index - self.pusher.get_peer_water_mark(request.term, request.transferee_id)
            if behind >= self.config.max_leadership_transfer_wait_index:
                raise DLedgerError(
                    DLedgerResponseCode.FALL_BEHIND_TOO_MUCH, f"transferee fall behind too much, diff={behind}"
                )
            return self.elector.handle_leadership_transfer(request)
        if ms.self_id == request.transferee_id:
            # The transferee, asked by the leader to take over once it holds the leader's last entry.
            if request.transfer_id != ms.leader_id:
                raise DLedgerError(
                    DLedgerResponseCode.INCONSISTENT_LEADER, f"transfer={request.transfer_id} is not leader"
                )
            return self._take_leadership_when_caught_up(request)
        return LeadershipTransferResponse(term=ms.term, code=int(DLedgerResponseCode.UNEXPECTED_ARGUMENT))

    @defer.inlineCallbacks
    def _take_leadership_when_caught_up(self, request: LeadershipTransferRequest) -> Any:
        ms = self.member_state
        start = self.reactor.seconds()
        while (behind := request.take_leadership_ledger_index - ms.ledger_end_index) > 0:
            if (self.reactor.seconds() - start) * 1000 > self.config.leadership_transfer_wait_timeout:
                raise DLedgerError(
                    DLedgerResponseCode.TAKE_LEADERSHIP_FAILED,
                    f"transferee fall behind, wait timeout. timeout = {self.config.leadership_transfer_wait_timeout}, "
                    f"diff = {behind}",
                )
            log.warn("transferee fall behind, diff = {diff}", diff=behind)
            yield task.deferLater(self.reactor, TRANSFEREE_POLL_S, lambda: None)
        response = yield self.elector.handle_take_leadership(request)
        return response

    # -- preferred leaders

    def _check_preferred_leader(self) -> None:
        """``checkPreferredLeader``: a leader that is not preferred hands over to the live preferred member that
        is least behind, if it is less than ``maxLeadershipTransferWaitIndex`` behind."""
        ms = self.member_state
        preferred = self.config.preferred_leader_ids
        if ms.role is not MemberRole.LEADER or not preferred or ms.transferee is not None:
            return
        if ms.self_id in preferred:
            return
        candidates = []
        for peer in preferred:
            if not ms.peers_live.get(peer, False):
                log.warn("preferredLeaderId = {peer} is not online", peer=peer)
                continue
            candidates.append(peer)
        if not candidates:
            return
        end = self.store.ledger_end_index

        def behind(peer: str) -> int:
            return end - self.pusher.get_peer_water_mark(ms.term, peer)

        target = min(candidates, key=behind)
        log.info(
            "preferredLeaderId = {peer}, which has the smallest fall behind index = {behind} and is decided to be "
            "transferee.",
            peer=target,
            behind=behind(target),
        )
        if behind(target) >= self.config.max_leadership_transfer_wait_index:
            return
        request = LeadershipTransferRequest(term=ms.term, transferee_id=target)
        start = self.reactor.seconds()

        def done(response: Any) -> None:
            log.info(
                "transfer finished. request={request},response={response},cost={cost}ms",
                request=request.encode().decode(),
                response=response.encode().decode(),
                cost=int((self.reactor.seconds() - start) * 1000),
            )

        self.elector.handle_leadership_transfer(request).addCallbacks(
            done, lambda f: log.failure("[checkPreferredLeader] error", f)
        )
