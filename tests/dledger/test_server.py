"""Three of our DLedger members on loopback: election, replication, failures, truncation, transfer."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer
from twisted.logger import globalLogPublisher

from gateway.dledger.codes import DLedgerError, DLedgerResponseCode
from gateway.dledger.elector import VOTE_WAIT_MS
from gateway.dledger.member_state import MemberRole
from gateway.dledger.rpc import network_error
from gateway.dledger.store import DLedgerFileStore

from .cluster import Cluster, until


@pytest_twisted.async_yield_fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    group = Cluster(tmp_path)
    yield group
    await group.stop()


@pytest_twisted.ensureDeferred
async def test_three_members_elect_one_leader(cluster: Cluster) -> None:
    start = time.monotonic()
    cluster.start()
    leader = await cluster.leader(timeout=5)
    elapsed = time.monotonic() - start
    ms = leader.member_state
    assert ms.term >= 1
    followers = [s for s in cluster.servers.values() if s is not leader]
    assert all(s.member_state.role is MemberRole.FOLLOWER for s in followers)
    # Within the vote timeout (2 s + maxVoteIntervalMs): elected in the first rounds.
    assert elapsed < (VOTE_WAIT_MS + cluster.timings["max_vote_interval_ms"]) / 1000, elapsed
    # The term and vote are on disk in DLedger's file.
    text = (Path(ms.term_path)).read_text()
    assert f"currTerm={ms.term}\n" in text and f"voteLeader={ms.self_id}\n" in text


@pytest_twisted.ensureDeferred
async def test_appends_commit_on_a_majority_and_reach_followers(cluster: Cluster) -> None:
    cluster.start()
    leader = await cluster.leader()
    commits: dict[str, list[int]] = {m: [] for m in cluster.servers}
    for member, server in cluster.servers.items():
        server.add_commit_listener(commits[member].append)
    results = [leader.append(f"body-{i}".encode()) for i in range(20)]
    assert [r.entry.index for r in results] == list(range(20))
    entries = [await r.committed for r in results]
    assert [e.body for e in entries] == [f"body-{i}".encode() for i in range(20)]
    assert leader.member_state.committed_index == 19
    await all_committed(cluster, 19)
    for member, server in cluster.servers.items():
        assert commits[member][-1] == 19
        assert commits[member] == sorted(commits[member])
        assert [server.store.get(i).body for i in range(20)] == [f"body-{i}".encode() for i in range(20)]


@pytest_twisted.ensureDeferred
async def test_members_flush_their_files_off_the_reactor(cluster: Cluster) -> None:
    cluster.start()
    leader = await cluster.leader()
    flushed_on: set[int] = set()
    for server in cluster.servers.values():
        for queue in (server.store.data, server.store.index):
            flush = queue.flush

            def spy(*args: Any, flush: Callable[..., int] = flush) -> int:
                flushed_on.add(threading.get_ident())
                return flush(*args)

            queue.flush = spy  # type: ignore[method-assign]
    results = [leader.append(f"body-{i}".encode()) for i in range(20)]
    await defer.gatherResults([r.committed for r in results])

    def all_flushed() -> bool:
        queues = [q for s in cluster.servers.values() for q in (s.store.data, s.store.index)]
        return all(q.flushed_where == q.wrote_where > 0 for q in queues)

    await until(all_flushed, what=lambda: "every member's data and index flushed")
    # The reactor (this thread) went on serving while the flush thread synced.
    assert flushed_on and threading.get_ident() not in flushed_on


@pytest_twisted.ensureDeferred
async def test_a_follower_down_still_commits_two_down_times_out(tmp_path: Path) -> None:
    # The wait for a quorum ends before the lonely leader steps down (3 heartbeats of 500 ms without a quorum).
    cluster = Cluster(tmp_path, max_wait_ack_time_ms=300)
    try:
        await _follower_down_then_two(cluster)
    finally:
        await cluster.stop()


async def _follower_down_then_two(cluster: Cluster) -> None:
    cluster.start()
    leader = await cluster.leader()
    lead = leader.member_state.self_id
    down = [m for m in cluster.servers if m != lead]
    await cluster.stop(down[0])
    entry = await leader.append(b"with one follower").committed
    assert entry.index == 0 and leader.member_state.committed_index == 0
    await cluster.stop(down[1])
    result = leader.append(b"alone")
    with pytest.raises(DLedgerError) as e:
        await result.committed
    assert e.value.code is DLedgerResponseCode.WAIT_QUORUM_ACK_TIMEOUT
    assert leader.member_state.committed_index == 0


def committed_prefix(cluster: Cluster, member: str) -> bytes:
    server = cluster.servers[member]
    server.store.flush()
    return cluster.data_bytes(member, server.store.committed_pos)


async def all_committed(cluster: Cluster, index: int) -> None:
    await until(
        lambda: all(s.member_state.committed_index == index for s in cluster.servers.values()),
        10,
        lambda: f"every member committing {index}: {cluster.views()}",
    )


@pytest_twisted.ensureDeferred
async def test_a_stopped_leader_is_replaced_and_restarted_follows_and_catches_up(cluster: Cluster) -> None:
    cluster.start()
    old = await cluster.leader()
    old_id, old_term = old.member_state.self_id, old.member_state.term
    for i in range(5):
        await old.append(f"first-{i}".encode()).committed
    await cluster.stop(old_id)
    new = await cluster.leader(timeout=5)
    assert new.member_state.self_id != old_id
    assert new.member_state.term > old_term
    for i in range(5):
        await new.append(f"second-{i}".encode()).committed
    cluster.start(old_id)
    await cluster.leader()
    assert cluster.servers[old_id].member_state.role is MemberRole.FOLLOWER
    assert cluster.servers[old_id].member_state.leader_id == new.member_state.self_id
    await all_committed(cluster, 9)
    prefixes = {m: committed_prefix(cluster, m) for m in cluster.servers}
    assert len(set(prefixes.values())) == 1 and len(prefixes[old_id]) > 0


@pytest_twisted.ensureDeferred
async def test_a_divergent_uncommitted_tail_is_truncated_to_the_leaders_log(cluster: Cluster) -> None:
    cluster.start()
    leader = await cluster.leader()
    for i in range(3):
        await leader.append(f"agreed-{i}".encode()).committed
    await all_committed(cluster, 2)
    await cluster.stop()
    # n2 gets a tail nobody else has, in the old term.
    lonely = DLedgerFileStore(cluster.config("n2").store)
    lonely.open()
    old_term = lonely.ledger_end_term
    for i in range(4):
        lonely.append_as_leader(f"divergent-{i}".encode() * 10, term=old_term)
    assert lonely.ledger_end_index == 6
    lonely.close()
    cluster.start("n0", "n1")
    leader = await cluster.leader()
    if leader.member_state.term == old_term:  # the same leader re-elected in the term it led: move on one term
        other = "n1" if leader.member_state.self_id == "n0" else "n0"
        await leader.transfer_leadership(other)
        leader = await cluster.leader()
    assert leader.member_state.term > old_term
    for i in range(2):
        await leader.append(f"new-{i}".encode()).committed
    cluster.start("n2")
    await cluster.leader()
    await all_committed(cluster, 4)
    n2 = cluster.servers["n2"]
    assert n2.store.ledger_end_index == 4
    assert [n2.store.get(i).body for i in range(5)] == [b"agreed-0", b"agreed-1", b"agreed-2", b"new-0", b"new-1"]
    assert committed_prefix(cluster, "n2") == committed_prefix(cluster, leader.member_state.self_id)


@pytest_twisted.ensureDeferred
async def test_leadership_transfer_to_a_chosen_member(cluster: Cluster) -> None:
    cluster.start()
    leader = await cluster.leader()
    term = leader.member_state.term
    await leader.append(b"before").committed
    target = next(m for m in cluster.servers if m != leader.member_state.self_id)
    roles: list[tuple[MemberRole, int, str | None]] = []
    cluster.servers[target].add_role_listener(lambda *change: roles.append(change))
    response = await leader.transfer_leadership(target)
    assert response.code == DLedgerResponseCode.SUCCESS
    new = await cluster.leader()
    assert new.member_state.self_id == target and new.member_state.term == term + 1
    assert roles[-1] == (MemberRole.LEADER, term + 1, target)
    assert leader.member_state.role is MemberRole.FOLLOWER
    await new.append(b"after").committed
    await all_committed(cluster, 1)
    with pytest.raises(DLedgerError) as e:
        leader.append(b"to the old leader")
    assert e.value.code is DLedgerResponseCode.NOT_LEADER


@pytest_twisted.ensureDeferred
async def test_batch_pushes_replicate_as_single_ones(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, enable_batch_push=True, max_batch_push_size=1024)
    try:
        cluster.start()
        leader = await cluster.leader()
        results = [leader.append(f"batched-{i}".encode() * 20) for i in range(50)]
        for r in results:
            await r.committed
        await all_committed(cluster, 49)
        assert len({committed_prefix(cluster, m) for m in cluster.servers}) == 1
    finally:
        await cluster.stop()


@pytest_twisted.ensureDeferred
async def test_the_preferred_leader_takes_over(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, preferred_leader_ids=["n2"])
    try:
        cluster.start("n0", "n1")
        first = await cluster.leader()
        await first.append(b"before n2").committed
        cluster.start("n2")
        # Within a second or two the leader sees n2 live and caught up, and hands over to it.
        await until(lambda: cluster.servers["n2"].member_state.role is MemberRole.LEADER, 6, "n2 leading")
        new = await cluster.leader()
        assert new.member_state.self_id == "n2"
        await new.append(b"after").committed
    finally:
        await cluster.stop()


@pytest_twisted.ensureDeferred
async def test_a_far_behind_follower_is_fed_at_the_push_quota(tmp_path: Path) -> None:
    # More than 1000 entries and peerPushThrottlePoint bytes behind: at most peerPushQuota bytes a second.
    cluster = Cluster(tmp_path, peer_push_throttle_point=1024, peer_push_quota=64 * 1024)
    warnings: list[str] = []

    def observe(event: dict) -> None:
        if "Quota exhaust" in (event.get("log_format") or ""):
            warnings.append(event["peer"])

    try:
        cluster.start()
        leader = await cluster.leader()
        lag = next(m for m in cluster.servers if m != leader.member_state.self_id)
        await cluster.stop(lag)
        for _ in range(13):  # a hundred at a time: the follower left never falls 1000 behind
            results = [leader.append(b"q" * 500) for _ in range(100)]
            for r in results:
                await r.committed
        globalLogPublisher.addObserver(observe)
        start = time.monotonic()
        cluster.start(lag)
        await until(lambda: cluster.servers[lag].member_state.committed_index == 1299, 10, "the follower catching up")
        # Entries 1..298 are the ones over 1000 behind: 2.5 quotas, so at least one whole second of waiting.
        assert time.monotonic() - start >= 0.9
        assert warnings and set(warnings) == {lag}
    finally:
        globalLogPublisher.removeObserver(observe)
        await cluster.stop()


def partition(cluster: Cluster, alone: str) -> Callable[[], None]:
    """Cut ``alone`` off from the others both ways (their calls to each other get no answer); returns the heal."""
    patched = []
    for member, server in cluster.servers.items():
        cut = {m for m in cluster.servers if m != member} if member == alone else {alone}
        call = server.rpc.call

        def cut_call(code: Any, request: Any, call: Any = call, cut: set[str] = cut) -> Any:
            if request.remote_id in cut:
                return defer.succeed(network_error(code, request))
            return call(code, request)

        server.rpc.call = cut_call
        patched.append(server.rpc)

    def heal() -> None:
        for rpc in patched:
            del rpc.call

    return heal


@pytest_twisted.ensureDeferred
async def test_a_cut_off_leader_acknowledges_nothing_and_its_tail_is_cut_when_it_returns(cluster: Cluster) -> None:
    cluster.start()
    old = await cluster.leader()
    old_id, old_term = old.member_state.self_id, old.member_state.term
    for i in range(3):
        await old.append(f"agreed-{i}".encode()).committed
    await all_committed(cluster, 2)
    heal = partition(cluster, old_id)
    lost = old.append(b"never acknowledged")
    with pytest.raises(DLedgerError) as e:
        await lost.committed
    # Its wait for a quorum ends, or its leadership first (three heartbeats without a quorum).
    assert e.value.code in (DLedgerResponseCode.WAIT_QUORUM_ACK_TIMEOUT, DLedgerResponseCode.TERM_CHANGED)
    majority = {m: s for m, s in cluster.servers.items() if m != old_id}
    new = await until(
        lambda: next((s for s in majority.values() if s.member_state.role is MemberRole.LEADER), None),
        10,
        lambda: f"a leader among the others: {cluster.views()}",
    )
    assert new.member_state.term > old_term
    for i in range(3, 5):
        await new.append(f"after-{i}".encode()).committed
    assert old.member_state.role is not MemberRole.LEADER and old.member_state.committed_index == 2
    heal()
    await cluster.leader()
    await all_committed(cluster, 4)
    assert [old.store.get(i).body for i in range(5)] == [
        b"agreed-0",
        b"agreed-1",
        b"agreed-2",
        b"after-3",
        b"after-4",
    ]
    assert len({committed_prefix(cluster, m) for m in cluster.servers}) == 1


@pytest_twisted.ensureDeferred
async def test_a_leader_says_whether_it_heard_from_a_majority_within_the_heartbeat_timeout(cluster: Cluster) -> None:
    cluster.start()
    leader = await cluster.leader()
    timeout = cluster.timings["max_heart_beat_leak"] * cluster.timings["heart_beat_time_interval_ms"]
    assert leader.heard_from_majority() and leader.majority_silence_ms() <= timeout
    follower = next(s for s in cluster.servers.values() if s is not leader)
    assert not follower.heard_from_majority() and follower.majority_silence_ms() == math.inf
    # Cut off, it hears from nobody: past the timeout it no longer claims a majority (and steps down).
    heal = partition(cluster, leader.member_state.self_id)
    cut_at = time.monotonic()
    await until(lambda: not leader.heard_from_majority(), timeout / 1000 + 5, "the cut-off leader to lose its majority")
    assert time.monotonic() - cut_at >= (timeout - cluster.timings["heart_beat_time_interval_ms"]) / 1000
    heal()
    new = await cluster.leader()
    await until(new.heard_from_majority, 5, "the new leader to hear from a majority")
