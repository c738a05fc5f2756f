"""DLedger's RPC codes and JSON bodies. The golden bodies are what dledger 0.3.1.2's classes give to fastjson's
``JSON.toJSONBytes`` for the same values: every getter sorted by name, nulls left out, ``byte[]`` as base64,
enums by name (compat_tests/test_dledger_codec_java.py checks a few against the jar itself)."""

from __future__ import annotations

import pytest

from gateway.dledger.codes import DLedgerRequestCode, DLedgerResponseCode
from gateway.dledger.entry import DLedgerEntry
from gateway.dledger.protocol import (
    BODIES,
    ID_MAX_LENGTH,
    AppendEntryRequest,
    AppendEntryResponse,
    BatchAppendEntryRequest,
    DLedgerProtocolError,
    GetEntriesRequest,
    GetEntriesResponse,
    HeartBeatRequest,
    LeadershipTransferRequest,
    MetadataResponse,
    PullEntriesRequest,
    PushEntryRequest,
    PushEntryResponse,
    PushType,
    VoteRequest,
    VoteResponse,
    VoteResult,
)

ENTRY = DLedgerEntry(index=5, term=2, pos=480, body=b"hello")
ENTRY_JSON = '{"body":"aGVsbG8=","bodyCrc":0,"chainCrc":0,"channel":0,"index":5,"magic":1,"pos":480,"size":53,"term":2}'
IDS = {"group": "g", "local_id": "n0", "remote_id": "n1", "term": 3}

GOLDEN = [
    (HeartBeatRequest(), '{"code":200,"term":-1}'),
    (
        VoteRequest(**IDS, ledger_end_index=7, ledger_end_term=2),
        '{"code":200,"group":"g","ledgerEndIndex":7,"ledgerEndTerm":2,"localId":"n0","remoteId":"n1","term":3}',
    ),
    (
        VoteResponse(**IDS, vote_result=VoteResult.ACCEPT),
        '{"code":200,"group":"g","localId":"n0","remoteId":"n1","term":3,"voteResult":"ACCEPT"}',
    ),
    (
        # One entry in ``entry``: the getters say count 1, batch false, and totalSize stays 0 (only addEntry adds).
        PushEntryRequest(**IDS, leader_id="n0", commit_index=4, entry=ENTRY),
        '{"batch":false,"batchEntry":[],"code":200,"commitIndex":4,"count":1,"entry":' + ENTRY_JSON + ","
        '"firstEntryIndex":5,"group":"g","lastEntryIndex":5,"leaderId":"n0","localId":"n0","remoteId":"n1",'
        '"term":3,"totalSize":0,"type":"APPEND"}',
    ),
    (
        PushEntryRequest(group="g", term=3, type=PushType.COMMIT, batch_entry=[ENTRY]),
        '{"batch":true,"batchEntry":[' + ENTRY_JSON + '],"code":200,"commitIndex":-1,"count":1,'
        '"firstEntryIndex":5,"group":"g","lastEntryIndex":5,"term":3,"totalSize":53,"type":"COMMIT"}',
    ),
    (PushEntryResponse(index=5), '{"beginIndex":0,"code":200,"count":0,"endIndex":0,"index":5,"term":-1}'),
    (
        GetEntriesRequest(begin_index=3, index_list=[1, 2]),
        '{"beginIndex":3,"code":200,"indexList":[1,2],"maxSize":0,"term":-1}',
    ),
    (MetadataResponse(peers={"n0": "127.0.0.1:40911"}), '{"code":200,"peers":{"n0":"127.0.0.1:40911"},"term":-1}'),
    (
        LeadershipTransferRequest(transfer_id="n0", transferee_id="n1", take_leadership_ledger_index=9),
        '{"code":200,"takeLeadershipLedgerIndex":9,"term":-1,"transferId":"n0","transfereeId":"n1"}',
    ),
    (AppendEntryRequest(body=b"\x01\x02\x03"), '{"body":"AQID","code":200,"term":-1}'),
    (BatchAppendEntryRequest(batch_msgs=[b"\x01", b"\x02"]), '{"batchMsgs":["AQ==","Ag=="],"code":200,"term":-1}'),
    (PullEntriesRequest(node_id="n1", begin_index=0), '{"beginIndex":0,"code":200,"nodeId":"n1","term":-1}'),
    (AppendEntryResponse(), '{"code":200,"index":-1,"pos":-1,"term":-1}'),
]


@pytest.mark.parametrize(("body", "golden"), GOLDEN, ids=lambda v: type(v).__name__ if not isinstance(v, str) else "")
def test_golden_json_and_round_trip(body, golden: str) -> None:
    assert body.encode() == golden.encode()
    assert type(body).decode(golden.encode()) == body


def test_every_rpc_round_trips() -> None:
    assert set(BODIES) == set(DLedgerRequestCode) - {DLedgerRequestCode.UNKNOWN}
    for request_type, response_type in BODIES.values():
        for kind in (request_type, response_type):
            body = kind(group="RaftNode00", local_id="n0", remote_id="n1", leader_id="n2", term=9, code=404)
            assert kind.decode(body.encode()) == body


def test_entries_round_trip_in_responses() -> None:
    second = DLedgerEntry(index=6, term=2, pos=533, body=b"")
    response = GetEntriesResponse(entries=[ENTRY, second], code=DLedgerResponseCode.INDEX_OUT_OF_RANGE)
    back = GetEntriesResponse.decode(response.encode())
    assert back == response
    assert DLedgerResponseCode(back.code) is DLedgerResponseCode.INDEX_OUT_OF_RANGE


def test_unknown_keys_ignored_and_missing_keys_take_java_defaults() -> None:
    back = VoteRequest.decode(b'{"surprise":[1,{"a":2}],"group":"g"}')
    assert back == VoteRequest(group="g", term=-1, ledger_end_index=-1, ledger_end_term=-1, code=200)


def test_codes_read_unknown_values_as_unknown() -> None:
    assert DLedgerRequestCode(51004) is DLedgerRequestCode.PUSH
    assert DLedgerRequestCode(12345) is DLedgerRequestCode.UNKNOWN
    assert DLedgerResponseCode(502) is DLedgerResponseCode.WAIT_QUORUM_ACK_TIMEOUT
    assert DLedgerResponseCode(999) is DLedgerResponseCode.UNKNOWN


@pytest.mark.parametrize(
    ("kind", "body", "message"),
    [
        (VoteRequest, b"", "VoteRequest: empty body"),
        (VoteRequest, b"{", "VoteRequest: not JSON"),
        (VoteRequest, b"[1]", "VoteRequest: expected a JSON object"),
        (VoteRequest, b'{"term":"5"}', "VoteRequest field 'term': expected a 64-bit integer"),
        (VoteRequest, b'{"term":true}', "VoteRequest field 'term': expected a 64-bit integer"),
        (VoteRequest, b'{"term":9223372036854775808}', "VoteRequest field 'term': expected a 64-bit integer"),
        (VoteRequest, b'{"code":2147483648}', "VoteRequest field 'code': expected a 32-bit integer"),
        (VoteRequest, b'{"group":7}', "VoteRequest field 'group': expected a string"),
        (VoteRequest, b'{"localId":"n\\u0000"}', "VoteRequest field 'localId': expected a printable id"),
        (
            VoteRequest,
            b'{"remoteId":"' + b"n" * (ID_MAX_LENGTH + 1) + b'"}',
            "VoteRequest field 'remoteId': expected a printable id of at most 255",
        ),
        (VoteResponse, b'{"voteResult":"MAYBE"}', "VoteResponse field 'voteResult': expected one of UNKNOWN, ACCEPT"),
        (PushEntryRequest, b'{"type":0}', "PushEntryRequest field 'type': expected one of APPEND, COMMIT"),
        (PushEntryRequest, b'{"entry":{"index":1}}', "PushEntryRequest field 'entry': entry field 'body'"),
        (PushEntryRequest, b'{"batchEntry":{}}', "PushEntryRequest field 'batchEntry': expected an array"),
        (AppendEntryRequest, b'{"body":"!!"}', "AppendEntryRequest field 'body': expected a base64 string"),
        (GetEntriesRequest, b'{"indexList":[1,"2"]}', "GetEntriesRequest field 'indexList': expected a 64-bit"),
        (MetadataResponse, b'{"peers":{"n0":1}}', "MetadataResponse field 'peers': expected a string"),
        (PullEntriesRequest, b"[" * 100000 + b"]" * 100000, "PullEntriesRequest: not JSON"),
    ],
)
def test_bad_body_refused(kind, body: bytes, message: str) -> None:
    with pytest.raises(DLedgerProtocolError) as e:
        kind.decode(body)
    assert str(e.value).startswith(message)
