"""DLedger's RPCs as a peer or a DLedger client sees them: answers in the body, hostile bodies refused."""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_twisted
from twisted.internet import reactor, threads

from gateway.dledger.codes import DLedgerRequestCode, DLedgerResponseCode
from gateway.dledger.entry import DLedgerEntry
from gateway.dledger.protocol import (
    AppendEntryRequest,
    AppendEntryResponse,
    HeartBeatRequest,
    HeartBeatResponse,
    MetadataRequest,
    MetadataResponse,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import ResponseCode
from gateway.remoting.command import RemotingCommand

from .cluster import GROUP, Cluster


@pytest_twisted.async_yield_fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    group = Cluster(tmp_path)
    group.start()
    await group.leader()
    yield group
    await group.stop()


@pytest_twisted.async_yield_fixture
async def client() -> AsyncIterator[RemotingClient]:
    c = RemotingClient(reactor)
    yield c
    await c.close()


async def call(client: RemotingClient, addr: str, code: int, body: bytes) -> RemotingCommand:
    return await client.invoke(addr, RemotingCommand.request(code, body=body, language="JAVA"))


@pytest_twisted.ensureDeferred
async def test_a_dledger_clients_append_and_metadata(cluster: Cluster, client: RemotingClient) -> None:
    leader = await cluster.leader()
    lead = leader.member_state.self_id
    follower = next(m for m in cluster.servers if m != lead)
    request = AppendEntryRequest(group=GROUP, remote_id=lead, body=b"from a client")
    answer = await call(client, cluster.peers[lead], DLedgerRequestCode.APPEND, request.encode())
    assert answer.code == 200  # the remoting code; DLedger's own is in the body
    response = AppendEntryResponse.decode(answer.body)
    assert (response.code, response.index, response.leader_id) == (200, 0, lead)
    assert response.pos == leader.store.get(0).pos == 0
    assert leader.store.committed_index == 0
    # A follower says who leads.
    request = AppendEntryRequest(group=GROUP, remote_id=follower, body=b"misdirected")
    answer = await call(client, cluster.peers[follower], DLedgerRequestCode.APPEND, request.encode())
    response = AppendEntryResponse.decode(answer.body)
    assert (response.code, response.leader_id) == (DLedgerResponseCode.NOT_LEADER, lead)
    meta = MetadataResponse.decode(
        (
            await call(
                client,
                cluster.peers[follower],
                DLedgerRequestCode.METADATA,
                MetadataRequest(group=GROUP, remote_id=follower).encode(),
            )
        ).body
    )
    assert (meta.code, meta.group, meta.leader_id, meta.peers) == (200, GROUP, lead, cluster.peers)


@pytest_twisted.ensureDeferred
async def test_hostile_bodies_are_refused_with_dledgers_codes(cluster: Cluster, client: RemotingClient) -> None:
    leader = await cluster.leader()
    lead = leader.member_state.self_id
    term = leader.member_state.term
    target = next(m for m in cluster.servers if m != lead)
    addr = cluster.peers[target]

    async def push(body: bytes) -> PushEntryResponse:
        answer = await call(client, addr, DLedgerRequestCode.PUSH, body)
        assert answer.code == 200
        return PushEntryResponse.decode(answer.body)

    wrong_group = PushEntryRequest(group="other", remote_id=target, leader_id=lead, term=term, type=PushType.COMMIT)
    assert (await push(wrong_group.encode())).code == DLedgerResponseCode.UNKNOWN_GROUP
    wrong_member = PushEntryRequest(group=GROUP, remote_id="n9", leader_id=lead, term=term, type=PushType.COMMIT)
    assert (await push(wrong_member.encode())).code == DLedgerResponseCode.UNKNOWN_MEMBER
    # A huge count with no entry: the count is a getter's, never read; an APPEND without an entry is refused.
    empty = {"group": GROUP, "remoteId": target, "leaderId": lead, "term": term, "type": "APPEND", "count": 1 << 40}
    assert (await push(json.dumps(empty).encode())).code == DLedgerResponseCode.UNEXPECTED_ARGUMENT
    vote = VoteRequest(group=GROUP, remote_id=target, leader_id="n9", term=term + 5)
    answer = await call(client, addr, DLedgerRequestCode.VOTE, vote.encode())
    assert VoteResponse.decode(answer.body).vote_result is VoteResult.REJECT_UNKNOWN_LEADER
    beat = HeartBeatRequest(group=GROUP, remote_id=target, leader_id="n9", term=term + 5)
    answer = await call(client, addr, DLedgerRequestCode.HEART_BEAT, beat.encode())
    assert HeartBeatResponse.decode(answer.body).code == DLedgerResponseCode.UNKNOWN_MEMBER
    assert cluster.servers[target].member_state.term == term  # none of it moved the term
    # Not JSON, a mistyped field, PULL: remoting's SYSTEM_ERROR, and the connection stays.
    for code, body in [
        (DLedgerRequestCode.PUSH, b"{not json"),
        (DLedgerRequestCode.VOTE, b'{"term": "high", "group": "g0"}'),
        (DLedgerRequestCode.PULL, b'{"group": "g0"}'),
    ]:
        answer = await call(client, addr, code, body)
        assert answer.code == ResponseCode.SYSTEM_ERROR, answer
    answer = await call(client, addr, 12345, b"{}")
    assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert len(cluster.servers[target].rpc.factory.channels) >= 2  # the leader's and ours


@pytest_twisted.ensureDeferred
async def test_far_ahead_pushes_are_held_up_to_a_bound(cluster: Cluster) -> None:
    leader = await cluster.leader()
    lead, term = leader.member_state.self_id, leader.member_state.term
    target = next(m for m in cluster.servers if m != lead)
    handler = cluster.servers[target].pusher.entry_handler

    def far(i: int) -> PushEntryRequest:
        entry = DLedgerEntry(index=1_000_000 + i, term=term, body=b"x", pos=0)
        return PushEntryRequest(group=GROUP, remote_id=target, leader_id=lead, term=term, entry=entry)

    # In one reactor turn: a push held past PUSH_HOLD_MS is answered INCONSISTENT_STATE by the follower's
    # once-a-second check, which on a loaded machine ran while 2,000 pushes still came over a socket.
    held = [handler.handle_push(far(i)) for i in range(2000)]
    assert not any(d.called for d in held)  # never answered while held (DLedger waits for the gap to fill)
    codes = [(await handler.handle_push(far(i))).code for i in (0, 5000)]
    assert codes == [DLedgerResponseCode.REPEATED_PUSH, DLedgerResponseCode.PUSH_REQUEST_IS_FULL]
    assert len(handler.write_requests) == 2000


@pytest_twisted.ensureDeferred
async def test_a_malformed_frame_closes_the_connection(cluster: Cluster) -> None:
    host, port = cluster.peers["n0"].split(":")

    def probe() -> bytes:
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(struct.pack(">i", -5) + b"garbage")
            try:
                return s.recv(16)  # b"" once the member has closed it
            except ConnectionResetError:
                return b""  # aborted: closed too

    assert await threads.deferToThread(probe) == b""
