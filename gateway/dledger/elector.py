"""Leader election (``DLedgerLeaderElector`` of dledger 0.3.1.2) on the reactor.

DLedger's state maintainer thread runs every 10 ms: a candidate asks every member for its vote, a leader sends
heartbeats every ``heartBeatTimeIntervalMs``, a follower that hears none for ``maxHeartBeatLeak`` intervals becomes a
candidate. Here a LoopingCall does the same, and a vote or heartbeat round that DLedger waits for on a latch is a
round of Deferreds the loop does not start again until it is over. The rules, the results and the log lines are
DLedger's.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from enum import Enum
from typing import Any

from twisted.internet import defer, task
from twisted.logger import Logger

from .codes import DLedgerRequestCode, DLedgerResponseCode
from .config import DLedgerConfig
from .member_state import MemberRole, MemberState
from .protocol import (
    HeartBeatRequest,
    HeartBeatResponse,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from .rpc import DLedgerRpcService, copy_base_info

log = Logger()

MAINTAIN_INTERVAL_S = 0.01
# A candidate waits this long (plus up to maxVoteIntervalMs) for the votes (DLedger's constant).
VOTE_WAIT_MS = 2000

RoleChangeHandler = Callable[[int, MemberRole], None]


class ParseResult(Enum):
    """``VoteResponse.ParseResult``: what a candidate does after a vote round."""

    WAIT_TO_REVOTE = 0
    REVOTE_IMMEDIATELY = 1
    PASSED = 2
    WAIT_TO_VOTE_NEXT = 3


class _Round:
    """One vote or heartbeat round: counts answers until ``done`` says enough, or its time is up."""

    def __init__(self, reactor: Any, wait_s: float, finish: Callable[[], None]) -> None:
        self.finished = False
        self.all_num = 0
        self._finish = finish
        self._timer = reactor.callLater(wait_s, self.end)

    def end(self) -> None:
        if not self.finished:
            self.finished = True
            if self._timer.active():
                self._timer.cancel()
            self._finish()

    def cancel(self) -> None:
        self.finished = True
        if self._timer.active():
            self._timer.cancel()


class DLedgerLeaderElector:
    """Votes, heartbeats and leadership transfer for one member."""

    def __init__(self, config: DLedgerConfig, member_state: MemberState, rpc: DLedgerRpcService, reactor: Any) -> None:
        self.config = config
        self.member_state = member_state
        self.rpc = rpc
        self.reactor = reactor
        self.random = random.Random()
        self.last_leader_heart_beat_time = -1.0
        self.last_send_heart_beat_time = -1.0
        self.last_succ_heart_beat_time = -1.0
        self.next_time_to_request_vote = -1.0
        self.need_increase_term_immediately = False
        self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        self.last_vote_cost = 0.0
        self.role_change_handlers: list[RoleChangeHandler] = []
        self._round: _Round | None = None
        self.running = False
        # The transferee's pending answer to the leader that asked it to take over.
        self._take_leadership: tuple[LeadershipTransferRequest, defer.Deferred[Any]] | None = None
        self._loop = task.LoopingCall(self.maintain_state)
        self._loop.clock = reactor

    def now(self) -> float:
        """Milliseconds on the reactor's clock."""
        return self.reactor.seconds() * 1000

    def elapsed(self, since: float) -> float:
        return self.now() - since

    def start(self) -> None:
        self.running = True
        self._loop.start(MAINTAIN_INTERVAL_S, now=True)

    def stop(self) -> None:
        self.running = False
        if self._loop.running:
            self._loop.stop()
        if self._round is not None:
            self._round.cancel()
            self._round = None

    @property
    def _id(self) -> str:
        return self.member_state.self_id

    # -- role changes

    def change_role_to_leader(self, term: int) -> None:
        ms = self.member_state
        if ms.term == term:
            ms.change_to_leader(term)
            self.last_send_heart_beat_time = -1
            self._handle_role_change(term, MemberRole.LEADER)
            log.info(
                "[{id}] [ChangeRoleToLeader] from term: {term} and currTerm: {curr}",
                id=self._id,
                term=term,
                curr=ms.term,
            )
        else:
            log.warn(
                "[{id}] skip to be the leader in term: {term}, but currTerm is: {curr}",
                id=self._id,
                term=term,
                curr=ms.term,
            )

    def change_role_to_candidate(self, term: int) -> None:
        ms = self.member_state
        if term >= ms.term:
            ms.change_to_candidate(term)
            self._handle_role_change(term, MemberRole.CANDIDATE)
            log.info(
                "[{id}] [ChangeRoleToCandidate] from term: {term} and currTerm: {curr}",
                id=self._id,
                term=term,
                curr=ms.term,
            )
        else:
            log.info(
                "[{id}] skip to be candidate in term: {term}, but currTerm: {curr}",
                id=self._id,
                term=term,
                curr=ms.term,
            )

    def change_role_to_follower(self, term: int, leader_id: str) -> None:
        log.info(
            "[{id}][ChangeRoleToFollower] from term: {term} leaderId: {leader} and currTerm: {curr}",
            id=self._id,
            term=term,
            leader=leader_id,
            curr=self.member_state.term,
        )
        self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        self.member_state.change_to_follower(term, leader_id)
        self.last_leader_heart_beat_time = self.now()
        self._handle_role_change(term, MemberRole.FOLLOWER)

    def _handle_role_change(self, term: int, role: MemberRole) -> None:
        try:
            self._check_take_leadership(term, role)
        except Exception:
            log.failure("takeLeadershipTask.check failed. term={term}, role={role}", term=term, role=role.name)
        for handler in list(self.role_change_handlers):
            try:
                handler(term, role)
            except Exception:
                log.failure("Handle role change failed term={term} role={role}", term=term, role=role.name)

    # -- serving peers

    def handle_heart_beat(self, request: HeartBeatRequest) -> HeartBeatResponse:
        ms = self.member_state
        if not ms.is_peer_member(request.leader_id):
            log.warn("[BUG] [HandleHeartBeat] remoteId={leader} is an unknown member", leader=request.leader_id)
            return HeartBeatResponse(term=ms.term, code=int(DLedgerResponseCode.UNKNOWN_MEMBER))
        if ms.self_id == request.leader_id:
            log.warn(
                "[BUG] [HandleHeartBeat] selfId={id} but remoteId={leader}", id=ms.self_id, leader=request.leader_id
            )
            return HeartBeatResponse(term=ms.term, code=int(DLedgerResponseCode.UNEXPECTED_MEMBER))
        if request.term < ms.term:
            return HeartBeatResponse(term=ms.term, code=int(DLedgerResponseCode.EXPIRED_TERM))
        if request.term == ms.term:
            if ms.leader_id is None:
                self.change_role_to_follower(request.term, request.leader_id)
                return HeartBeatResponse()
            if request.leader_id == ms.leader_id:
                self.last_leader_heart_beat_time = self.now()
                return HeartBeatResponse()
            log.error(
                "[{id}][BUG] currTerm {term} has leader {leader}, but received leader {other}",
                id=self._id,
                term=ms.term,
                leader=ms.leader_id,
                other=request.leader_id,
            )
            return HeartBeatResponse(code=int(DLedgerResponseCode.INCONSISTENT_LEADER))
        # A larger term: become a candidate first, and take the term at the next vote.
        self.change_role_to_candidate(request.term)
        self.need_increase_term_immediately = True
        return HeartBeatResponse(code=int(DLedgerResponseCode.TERM_NOT_READY))

    def handle_vote(self, request: VoteRequest, self_vote: bool = False) -> VoteResponse:
        ms = self.member_state

        def answer(result: VoteResult, term: int | None = None) -> VoteResponse:
            response = copy_base_info(VoteResponse(), request)
            response.term = ms.term if term is None else term
            response.vote_result = result
            return response

        if not ms.is_peer_member(request.leader_id):
            log.warn("[BUG] [HandleVote] remoteId={leader} is an unknown member", leader=request.leader_id)
            return answer(VoteResult.REJECT_UNKNOWN_LEADER)
        if not self_vote and ms.self_id == request.leader_id:
            log.warn("[BUG] [HandleVote] selfId={id} but remoteId={leader}", id=ms.self_id, leader=request.leader_id)
            return answer(VoteResult.REJECT_UNEXPECTED_LEADER)
        if request.ledger_end_term < ms.ledger_end_term:
            return answer(VoteResult.REJECT_EXPIRED_LEDGER_TERM)
        if request.ledger_end_term == ms.ledger_end_term and request.ledger_end_index < ms.ledger_end_index:
            return answer(VoteResult.REJECT_SMALL_LEDGER_END_INDEX)
        if request.term < ms.term:
            return answer(VoteResult.REJECT_EXPIRED_VOTE_TERM)
        if request.term == ms.term:
            if ms.vote_for is not None and ms.vote_for != request.leader_id:
                if ms.leader_id is not None:
                    return answer(VoteResult.REJECT_ALREADY_HAS_LEADER)
                return answer(VoteResult.REJECT_ALREADY_VOTED)
        else:
            # Stepped down by a larger term; vote only once the term is ours too.
            self.change_role_to_candidate(request.term)
            self.need_increase_term_immediately = True
            return answer(VoteResult.REJECT_TERM_NOT_READY)
        if request.term < ms.ledger_end_term:
            return answer(VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, ms.ledger_end_term)
        if (
            not self_vote
            and self._is_taking_leadership()
            and request.ledger_end_term == ms.ledger_end_term
            and ms.ledger_end_index >= request.ledger_end_index
        ):
            return answer(VoteResult.REJECT_TAKING_LEADERSHIP)
        ms.set_vote_for(request.leader_id)
        return answer(VoteResult.ACCEPT)

    # -- the state maintainer

    def maintain_state(self) -> None:
        if self._round is not None or not self.running:
            return  # a vote or heartbeat round is still out, or the member stopped
        try:
            role = self.member_state.role
            if role is MemberRole.LEADER:
                self._maintain_as_leader()
            elif role is MemberRole.FOLLOWER:
                self._maintain_as_follower()
            else:
                self._maintain_as_candidate()
        except Exception:
            log.failure("Error in heartbeat")

    def _maintain_as_leader(self) -> None:
        if self.elapsed(self.last_send_heart_beat_time) > self.config.heart_beat_time_interval_ms:
            ms = self.member_state
            self.last_send_heart_beat_time = self.now()
            self._send_heartbeats(ms.term, ms.leader_id or ms.self_id)

    def _maintain_as_follower(self) -> None:
        interval = self.config.heart_beat_time_interval_ms
        if self.elapsed(self.last_leader_heart_beat_time) > self.config.max_heart_beat_leak * interval:
            ms = self.member_state
            log.info(
                "[{id}][HeartBeatTimeOut] lastLeaderHeartBeatTime: {last} heartBeatTimeIntervalMs: {interval} "
                "lastLeader={leader}",
                id=self._id,
                last=int(self.last_leader_heart_beat_time),
                interval=interval,
                leader=ms.leader_id,
            )
            self.change_role_to_candidate(ms.term)

    def _send_heartbeats(self, term: int, leader_id: str) -> None:
        ms = self.member_state
        counts = {"succ": 1, "not_ready": 0, "max_term": -1, "inconsistent_leader": False}
        start = self.now()
        heartbeat_round: _Round

        def finish() -> None:
            self._round = None
            self._parse_heartbeats(term, counts, heartbeat_round.all_num, start)

        heartbeat_round = self._round = _Round(self.reactor, self.config.heart_beat_time_interval_ms / 1000, finish)
        heartbeat_round.all_num = 1
        for peer in ms.peers:
            if peer == ms.self_id:
                continue
            request = HeartBeatRequest(
                group=ms.group, local_id=ms.self_id, remote_id=peer, leader_id=leader_id, term=term
            )

            def answered(x: HeartBeatResponse, peer: str = peer) -> None:
                code = DLedgerResponseCode(x.code)
                if code is DLedgerResponseCode.SUCCESS:
                    counts["succ"] += 1
                elif code is DLedgerResponseCode.EXPIRED_TERM:
                    counts["max_term"] = x.term
                elif code is DLedgerResponseCode.INCONSISTENT_LEADER:
                    counts["inconsistent_leader"] = True
                elif code is DLedgerResponseCode.TERM_NOT_READY:
                    counts["not_ready"] += 1
                ms.peers_live[peer] = code is not DLedgerResponseCode.NETWORK_ERROR
                heartbeat_round.all_num += 1
                if (
                    ms.is_quorum(counts["succ"])
                    or ms.is_quorum(counts["succ"] + counts["not_ready"])
                    or heartbeat_round.all_num == ms.peer_size
                ):
                    heartbeat_round.end()

            self.rpc.call(DLedgerRequestCode.HEART_BEAT, request).addCallback(answered)

    def _parse_heartbeats(self, term: int, counts: dict[str, Any], all_num: int, start: float) -> None:
        ms = self.member_state
        if ms.is_quorum(counts["succ"]):
            self.last_succ_heart_beat_time = self.now()
            return
        log.info(
            "[{id}] Parse heartbeat responses in cost={cost} term={term} allNum={all} succNum={succ} "
            "notReadyNum={not_ready} inconsistLeader={inconsistent} maxTerm={max_term} peerSize={peers} "
            "lastSuccHeartBeatTime={last}",
            id=self._id,
            cost=int(self.elapsed(start)),
            term=term,
            all=all_num,
            succ=counts["succ"],
            not_ready=counts["not_ready"],
            inconsistent=counts["inconsistent_leader"],
            max_term=counts["max_term"],
            peers=ms.peer_size,
            last=int(self.last_succ_heart_beat_time),
        )
        if ms.role is not MemberRole.LEADER or ms.term != term:
            return  # stepped down meanwhile
        if ms.is_quorum(counts["succ"] + counts["not_ready"]):
            self.last_send_heart_beat_time = -1
        elif counts["max_term"] > term:
            self.change_role_to_candidate(counts["max_term"])
        elif counts["inconsistent_leader"] or self.elapsed(self.last_succ_heart_beat_time) > (
            self.config.max_heart_beat_leak * self.config.heart_beat_time_interval_ms
        ):
            self.change_role_to_candidate(term)

    def _is_taking_leadership(self) -> bool:
        ms = self.member_state
        return (
            bool(self.config.preferred_leader_ids)
            and ms.term_to_take_leadership == ms.term
            and ms.self_id in self.config.preferred_leader_ids
        )

    def _next_time_to_request_vote(self) -> float:
        c = self.config
        if self._is_taking_leadership():
            low, high = c.min_take_leadership_vote_interval_ms, c.max_take_leadership_vote_interval_ms
        else:
            low, high = c.min_vote_interval_ms, c.max_vote_interval_ms
        return self.now() + low + self.random.randrange(max(high - low, 1))

    def _maintain_as_candidate(self) -> None:
        ms = self.member_state
        if self.now() < self.next_time_to_request_vote and not self.need_increase_term_immediately:
            return
        if ms.role is not MemberRole.CANDIDATE:
            return
        if self.last_parse_result is ParseResult.WAIT_TO_VOTE_NEXT or self.need_increase_term_immediately:
            prev_term = ms.term
            term = ms.next_term()
            log.info("{id}_[INCREASE_TERM] from {prev} to {term}", id=self._id, prev=prev_term, term=term)
            self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        else:
            term = ms.term
        ledger_end_index, ledger_end_term = ms.ledger_end_index, ms.ledger_end_term
        if self.need_increase_term_immediately:
            self.next_time_to_request_vote = self._next_time_to_request_vote()
            self.need_increase_term_immediately = False
            return
        self._vote(term, ledger_end_term, ledger_end_index)

    def _vote(self, term: int, ledger_end_term: int, ledger_end_index: int) -> None:
        ms = self.member_state
        start = self.now()
        counts = {
            "known_max_term": term,
            "valid": 0,
            "accepted": 0,
            "not_ready": 0,
            "bigger_ledger": 0,
            "already_has_leader": False,
        }
        vote_round: _Round

        def finish() -> None:
            self._round = None
            self._parse_votes(term, counts, vote_round.all_num, start)

        wait_s = (VOTE_WAIT_MS + self.random.randrange(self.config.max_vote_interval_ms)) / 1000
        vote_round = self._round = _Round(self.reactor, wait_s, finish)

        def answered(x: VoteResponse) -> None:
            if vote_round.finished:
                return
            log.info("[{id}][GetVoteResponse] {response}", id=self._id, response=x.encode().decode())
            result = x.vote_result
            if result is not VoteResult.UNKNOWN:
                counts["valid"] += 1
            if result is VoteResult.ACCEPT:
                counts["accepted"] += 1
            elif result is VoteResult.REJECT_ALREADY_HAS_LEADER:
                counts["already_has_leader"] = True
            elif result in (VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, VoteResult.REJECT_EXPIRED_VOTE_TERM):
                counts["known_max_term"] = max(counts["known_max_term"], x.term)
            elif result in (VoteResult.REJECT_EXPIRED_LEDGER_TERM, VoteResult.REJECT_SMALL_LEDGER_END_INDEX):
                counts["bigger_ledger"] += 1
            elif result is VoteResult.REJECT_TERM_NOT_READY:
                counts["not_ready"] += 1
            vote_round.all_num += 1
            if (
                counts["already_has_leader"]
                or ms.is_quorum(counts["accepted"])
                or ms.is_quorum(counts["accepted"] + counts["not_ready"])
                or vote_round.all_num == ms.peer_size
            ):
                vote_round.end()

        for peer in list(ms.peers):
            request = VoteRequest(
                group=ms.group,
                ledger_end_index=ledger_end_index,
                ledger_end_term=ledger_end_term,
                leader_id=ms.self_id,
                term=term,
                remote_id=peer,
                local_id=ms.self_id,
            )
            if peer == ms.self_id:
                answered(self.handle_vote(request, self_vote=True))
            else:
                self.rpc.call(DLedgerRequestCode.VOTE, request).addCallback(answered)

    def _parse_votes(self, term: int, counts: dict[str, Any], all_num: int, start: float) -> None:
        ms = self.member_state
        c = self.config
        self.last_vote_cost = self.elapsed(start)
        if counts["known_max_term"] > term:
            result = ParseResult.WAIT_TO_VOTE_NEXT
            self.next_time_to_request_vote = self._next_time_to_request_vote()
            self.change_role_to_candidate(counts["known_max_term"])
        elif counts["already_has_leader"]:
            result = ParseResult.WAIT_TO_REVOTE
            self.next_time_to_request_vote = (
                self._next_time_to_request_vote() + c.heart_beat_time_interval_ms * c.max_heart_beat_leak
            )
        elif not ms.is_quorum(counts["valid"]):
            result = ParseResult.WAIT_TO_REVOTE
            self.next_time_to_request_vote = self._next_time_to_request_vote()
        elif not ms.is_quorum(counts["valid"] - counts["bigger_ledger"]):
            result = ParseResult.WAIT_TO_REVOTE
            self.next_time_to_request_vote = self._next_time_to_request_vote() + c.max_vote_interval_ms
        elif ms.is_quorum(counts["accepted"]):
            result = ParseResult.PASSED
        elif ms.is_quorum(counts["accepted"] + counts["not_ready"]):
            result = ParseResult.REVOTE_IMMEDIATELY
        else:
            result = ParseResult.WAIT_TO_VOTE_NEXT
            self.next_time_to_request_vote = self._next_time_to_request_vote()
        self.last_parse_result = result
        log.info(
            "[{id}] [PARSE_VOTE_RESULT] cost={cost} term={term} memberNum={members} allNum={all} "
            "acceptedNum={accepted} notReadyTermNum={not_ready} biggerLedgerNum={bigger} "
            "alreadyHasLeader={has_leader} maxTerm={max_term} result={result}",
            id=self._id,
            cost=int(self.last_vote_cost),
            term=term,
            members=ms.peer_size,
            all=all_num,
            accepted=counts["accepted"],
            not_ready=counts["not_ready"],
            bigger=counts["bigger_ledger"],
            has_leader=counts["already_has_leader"],
            max_term=counts["known_max_term"],
            result=result.name,
        )
        if result is ParseResult.PASSED and ms.role is MemberRole.CANDIDATE:
            log.info("[{id}] [VOTE_RESULT] has been elected to be the leader in term {term}", id=self._id, term=term)
            self.change_role_to_leader(term)

    # -- leadership transfer

    def handle_leadership_transfer(self, request: LeadershipTransferRequest) -> defer.Deferred[Any]:
        """The leader hands over to ``request.transferee_id``: it takes no appends meanwhile and asks the
        transferee to take leadership; fires with the transferee's answer."""
        ms = self.member_state
        log.info("handleLeadershipTransfer: {request}", request=request.encode().decode())

        def refuse(code: DLedgerResponseCode) -> defer.Deferred[Any]:
            return defer.succeed(LeadershipTransferResponse(term=ms.term, code=int(code)))

        if ms.term != request.term:
            log.warn(
                "[BUG] [HandleLeaderTransfer] currTerm={curr} != request.term={term}", curr=ms.term, term=request.term
            )
            return refuse(DLedgerResponseCode.INCONSISTENT_TERM)
        if ms.role is not MemberRole.LEADER:
            log.warn("[BUG] [HandleLeaderTransfer] selfId={leader} is not leader", leader=request.leader_id)
            return refuse(DLedgerResponseCode.NOT_LEADER)
        if ms.transferee is not None:
            log.warn("[BUG] [HandleLeaderTransfer] transferee={transferee} is already set", transferee=ms.transferee)
            return refuse(DLedgerResponseCode.LEADER_TRANSFERRING)
        ms.transferee = request.transferee_id
        take = LeadershipTransferRequest(
            group=ms.group,
            leader_id=ms.leader_id,
            local_id=ms.self_id,
            remote_id=request.transferee_id,
            term=request.term,
            take_leadership_ledger_index=ms.ledger_end_index,
            transfer_id=ms.self_id,
            transferee_id=request.transferee_id,
        )

        def answered(response: LeadershipTransferResponse) -> LeadershipTransferResponse:
            if response.code != DLedgerResponseCode.SUCCESS or (ms.term == request.term and ms.transferee is not None):
                log.warn("leadershipTransfer failed, set transferee to null")
                if ms.role is MemberRole.LEADER:
                    ms.transferee = None
            return response

        return self.rpc.call(DLedgerRequestCode.LEADERSHIP_TRANSFER, take).addCallback(answered)

    def handle_take_leadership(self, request: LeadershipTransferRequest) -> defer.Deferred[Any]:
        """The transferee: stand in the next term at once; fires when that vote made it leader, or did not."""
        ms = self.member_state
        log.debug("handleTakeLeadership.request={request}", request=request.encode().decode())
        if ms.term != request.term:
            log.warn(
                "[BUG] [handleTakeLeadership] currTerm={curr} != request.term={term}", curr=ms.term, term=request.term
            )
            return defer.succeed(
                LeadershipTransferResponse(term=ms.term, code=int(DLedgerResponseCode.INCONSISTENT_TERM))
            )
        ms.term_to_take_leadership = request.term + 1
        d: defer.Deferred[Any] = defer.Deferred()
        self._take_leadership = (request, d)
        self.change_role_to_candidate(request.term + 1)
        self.need_increase_term_immediately = True
        # Move to the new term now: a heartbeat of the old leader handled first would make us follow it again.
        self.reactor.callLater(0, self.maintain_state)
        return d

    def _check_take_leadership(self, term: int, role: MemberRole) -> None:
        """``TakeLeadershipTask.check``: answer the leader once the term aimed at is won or lost."""
        ms = self.member_state
        if ms.term_to_take_leadership == -1 or self._take_leadership is None:
            return
        target = ms.term_to_take_leadership
        if term > target:
            code = DLedgerResponseCode.EXPIRED_TERM
        elif term == target:
            if role is MemberRole.LEADER:
                code = DLedgerResponseCode.SUCCESS
            elif role is MemberRole.FOLLOWER:
                code = DLedgerResponseCode.TAKE_LEADERSHIP_FAILED
            else:
                return
        elif role is MemberRole.FOLLOWER:
            # A heartbeat came before the term moved up: following, not leading.
            code = DLedgerResponseCode.TAKE_LEADERSHIP_FAILED
        else:
            code = DLedgerResponseCode.INTERNAL_ERROR
        request, d = self._take_leadership
        response = LeadershipTransferResponse(term=term, code=int(code))
        log.info(
            "TakeLeadershipTask finished. request={request}, response={response}, term={term}, role={role}",
            request=request.encode().decode(),
            response=response.encode().decode(),
            term=term,
            role=role.name,
        )
        ms.term_to_take_leadership = -1
        self._take_leadership = None
        d.callback(response)
