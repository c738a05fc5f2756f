"""Three of our DLedger members on loopback: election, replication, failures, truncation, transfer."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_twisted

from gateway.dledger.codes import DLedgerError, DLedgerResponseCode
from gateway.dledger.member_state import MemberRole

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
    # Below the first vote wait (2 s + maxVoteIntervalMs): elected in the first rounds.
    assert elapsed < 2.0, elapsed
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
    await until(lambda: all(s.member_state.committed_index == 19 for s in cluster.servers.values()), 5)
    for member, server in cluster.servers.items():
        assert commits[member][-1] == 19
        assert commits[member] == sorted(commits[member])
        assert [server.store.get(i).body for i in range(20)] == [f"body-{i}".encode() for i in range(20)]


@pytest_twisted.ensureDeferred
async def test_a_follower_down_still_commits_two_down_times_out(tmp_path: Path) -> None:
    # The wait for a quorum ends before the lonely leader steps down (3 heartbeats of 200 ms without a quorum).
    cluster = Cluster(tmp_path, heart_beat_time_interval_ms=200, max_wait_ack_time_ms=300)
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
