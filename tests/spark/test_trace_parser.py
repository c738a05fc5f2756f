"""The trace parser (no Spark): the Java client's golden traces and ours become typed rows; a malformed
record becomes an error row naming its trace message, and the rest of that message is still read."""

from __future__ import annotations

from collections import Counter

from spark.trace_parser import TRACE_COLUMNS, rows
from tests.trace.conftest import golden_trace_messages, java5_trace_bodies

NAMES = [name for name, _ in TRACE_COLUMNS]


def test_golden_java_traces_become_typed_rows() -> None:
    messages = golden_trace_messages()
    out = [dict(zip(NAMES, r, strict=True)) for r in rows((m.client_msg_id, m.body) for m in messages)]
    assert [r["traceType"] for r in out].count("Pub") == 6 and not [r for r in out if r["error"]]
    end = next(r for r in out if r["traceType"] == "EndTransaction")
    assert (end["transactionState"], end["fromTransactionCheck"], end["msgType"]) == ("COMMIT_MESSAGE", False, 2)
    failed = [r for r in out if r["traceType"] == "SubAfter" and r["success"] is False]
    assert len(failed) == 1 and failed[0]["contextCode"] == 4 and failed[0]["groupName"] == "TraceCG"
    pub = out[0]
    assert (
        isinstance(pub["timestampMs"], int)
        and pub["bodyLength"] == 13
        and pub["traceMsgId"] == messages[0].client_msg_id
    )


def test_a_malformed_record_is_an_error_row_with_its_trace_message_id() -> None:
    good = golden_trace_messages()[1].body
    out = [dict(zip(NAMES, r, strict=True)) for r in rows([("T1", b"Pub\x01x\x02" + good), ("T2", b"\xff\xfe\x02")])]
    errors = [(r["traceMsgId"], r["error"]) for r in out if r["error"]]
    assert [e[0] for e in errors] == ["T1", "T2"]
    assert [r["traceType"] for r in out if not r["error"]] == ["Pub", "EndTransaction"]


def test_java_5_client_traces_become_typed_rows() -> None:
    """The Java 5.3.3 client's real trace messages (tests/trace/golden): Pub, Recall, EndTransaction, SubBefore and
    SubAfter, with no error row."""
    out = [dict(zip(NAMES, r, strict=True)) for r in rows(java5_trace_bodies())]
    assert not [r for r in out if r["error"]]
    assert Counter(r["traceType"] for r in out) == {
        "Pub": 7, "Recall": 1, "EndTransaction": 1, "SubBefore": 2, "SubAfter": 2,
    }  # fmt: skip
    recall = next(r for r in out if r["traceType"] == "Recall")
    recalled_pub = next(r for r in out if r["traceType"] == "Pub" and r["keys"] == "j5-recalled")
    assert (recall["msgId"], recall["success"], recall["groupName"]) == (
        recalled_pub["msgId"],
        True,
        "java5_trace_cg_pg",
    )
    before, after = (r for r in out if r["traceType"] in ("SubBefore", "SubAfter") and r["keys"] == "region-0")
    assert before["requestId"] == after["requestId"] and before["regionId"] == "DefaultRegion"
    assert (after["groupName"], after["contextCode"], after["success"]) == ("java5_trace_cg", 0, True)
