"""Trace records: the Java client's golden traces decode to what they say, our encoder writes them byte for
byte, and mqadmin queryMsgTraceById's table is rebuilt from them exactly."""

from __future__ import annotations

import time

import pytest

from gateway.remoting.message import MessageConst
from gateway.trace.codec import (
    MessageType,
    TraceBean,
    TraceContext,
    TraceFormatError,
    TraceRecord,
    TraceType,
    decode_body,
    encode_context,
)
from gateway.trace.view import format_trace_views, trace_views

from .conftest import GOLDEN, golden_trace_messages

KEY_2 = "C00002027B0D5FFD2B276C5A39FB0004"
TX = "C00002027B0D5FFD2B276C5A3A6F000A"


def _records() -> list[list[TraceRecord]]:
    out = []
    for m in golden_trace_messages():
        records = list(decode_body(m.body))
        assert not [r for r in records if isinstance(r, TraceFormatError)]
        out.append(records)  # type: ignore[arg-type]
    return out


def test_golden_traces_decode_to_what_the_java_client_wrote() -> None:
    pubs, tx, subs, retry = _records()
    assert [r.trace_type for r in pubs] == ["Pub"] * 5
    assert [r.keys for r in pubs] == [f"key-{i}" for i in range(5)]
    p = pubs[1]
    assert (p.timestamp, p.region_id, p.group, p.topic, p.tags, p.store_host) == (
        1795309052402, "DefaultRegion", "TracePG", "TraceTopicA", "TagA", "127.0.0.1:43089",
    )  # fmt: skip
    assert (p.body_length, p.cost_time, p.msg_type, p.success) == (13, 8, 0, True)
    assert p.offset_msg_id == "7F0000010000A85100000000000000C8"
    assert [r.trace_type for r in tx] == ["Pub", "EndTransaction"]
    assert tx[0].msg_type == MessageType.Trans_Msg_Half
    end = tx[1]
    assert (end.msg_type, end.transaction_id, end.transaction_state, end.from_transaction_check) == (
        2, TX, "COMMIT_MESSAGE", False,
    )  # fmt: skip
    assert [r.trace_type for r in subs] == ["SubBefore", "SubAfter"] * 6
    before, after = subs[10], subs[11]  # key-2's failed first consume
    assert before.region_id is None and before.retry_times == 0 and before.request_id == after.request_id
    assert (after.msg_id, after.success, after.context_code, after.group) == (KEY_2, False, 4, "TraceCG")
    assert retry[0].retry_times == 1 and retry[1].success is True


def _context(r: TraceRecord) -> TraceContext:
    """The context one golden record came from (one record per context)."""
    bean = TraceBean(
        topic=r.topic, msg_id=r.msg_id, offset_msg_id=r.offset_msg_id, tags=r.tags, keys=r.keys,
        store_host=r.store_host, body_length=r.body_length or 0, msg_type=MessageType(r.msg_type or 0),
        retry_times=r.retry_times or 0, transaction_id=r.transaction_id, transaction_state=r.transaction_state,
        from_transaction_check=bool(r.from_transaction_check),
    )  # fmt: skip
    return TraceContext(
        TraceType(r.trace_type), r.timestamp or 0, r.group or "", r.region_id, request_id=r.request_id,
        cost_time=r.cost_time or 0, success=r.success if r.success is not None else True,
        context_code=r.context_code or 0, beans=[bean],
    )  # fmt: skip


def test_our_encoder_writes_the_golden_bodies_byte_for_byte() -> None:
    for message, records in zip(golden_trace_messages(), _records(), strict=True):
        encoded = [encode_context(_context(r)) for r in records]
        assert "".join(text for text, _ in encoded).encode() == message.body
        keys = set().union(*(k for _, k in encoded))
        assert keys == set(message.properties[MessageConst.KEYS].split(" "))


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(("msg_id", "golden"), [(KEY_2, "queryMsgTraceById.txt"), (TX, "queryMsgTraceById-tx.txt")])
def test_query_msg_trace_by_id_table_is_mqadmins(utc, msg_id: str, golden: str) -> None:
    views = trace_views(golden_trace_messages(), msg_id)
    assert format_trace_views(views) == (GOLDEN / golden).read_text()


def test_a_malformed_record_is_reported_and_the_rest_still_read() -> None:
    good = golden_trace_messages()[0].body.split(b"\x02")[0] + b"\x02"
    bad = [b"Pub\x01nope\x02", b"Nonsense\x01a\x02", b"SubAfter\x01r\x01m\x011\x01maybe\x01k\x010\x02"]
    results = list(decode_body(b"".join([bad[0], good, bad[1], good, bad[2]])))
    assert [type(r).__name__ for r in results] == [
        "TraceFormatError", "TraceRecord", "TraceFormatError", "TraceRecord", "TraceFormatError",
    ]  # fmt: skip
    assert "Nonsense" in str(results[2]) and "boolean" in str(results[4])


def test_cloud_channel_sub_after_records_of_4x_and_5x_clients_decode() -> None:
    """TraceDataEncoder's CLOUD SubAfter (no timestamp and group) ends with 0x01: 4.9.8 writes no 0x02 after it,
    so the next record runs on; 5.3.3 writes the 0x02."""
    cloud = "SubAfter\x01R{0}\x01M{0}\x01{0}\x01true\x01k{0}\x010\x01"
    pub = golden_trace_messages()[0].body.split(b"\x02")[0].decode() + "\x02"
    v4 = (cloud.format(1) + cloud.format(2) + pub + cloud.format(3)).encode()
    v5 = (cloud.format(1) + "\x02" + pub + cloud.format(2) + "\x02").encode()
    for body, ids in ((v4, ["M1", "M2", None, "M3"]), (v5, ["M1", None, "M2"])):
        records = list(decode_body(body))
        assert not [r for r in records if isinstance(r, TraceFormatError)], records
        subs = [r for r in records if r.trace_type == "SubAfter"]  # type: ignore[union-attr]
        assert [r.msg_id if r.trace_type == "SubAfter" else None for r in records] == ids  # type: ignore[union-attr]
        assert all(r.timestamp is None and r.group is None and r.context_code == 0 for r in subs)
        assert subs[0].request_id == "R1" and subs[0].cost_time == 1 and subs[0].keys == "k1"


def test_recall_records_of_5x_clients_decode_and_errors_say_which_record() -> None:
    (recall,) = decode_body(b"Recall\x011795878481209\x01DefaultRegion\x01PG\x01T\x01MID\x01true\x02")
    assert isinstance(recall, TraceRecord)
    assert (recall.trace_type, recall.timestamp, recall.group, recall.topic, recall.msg_id, recall.success) == (
        "Recall", 1795878481209, "PG", "T", "MID", True,
    )  # fmt: skip
    bad = list(decode_body(b"Recall\x01x\x01R\x01G\x01T\x01M\x01true\x02Recall\x011\x01R\x01G\x02"))
    assert [str(e) for e in bad] == [
        "record 1: Recall record: invalid literal for int() with base 10: 'x'",
        "record 2: unknown record: type 'Recall' with 4 fields",
    ]
