"""Receipt handles: Apache's format both ways, and hostile handles refused field by field."""

from __future__ import annotations

import pytest

from gateway.proxy.receipt_handle import InvalidReceiptHandle, ReceiptHandle, create_handle

# A handle as Apache 5.3.3's proxy hands it out: ExtraInfoUtil.buildExtraInfo(...) + " " + commitLogOffset.
APACHE_HANDLE = "12 1700000000000 30000 3 1 broker-a 2 15 4096"


def test_decodes_apache_handle():
    h = ReceiptHandle.decode(APACHE_HANDLE)
    assert (h.start_offset, h.retrieve_time, h.invisible_time, h.revive_queue_id) == (12, 1700000000000, 30000, 3)
    assert (h.topic_type, h.broker_name, h.queue_id, h.offset, h.commit_log_offset) == ("1", "broker-a", 2, 15, 4096)
    assert h.handle == APACHE_HANDLE
    assert h.next_visible_time == 1700000030000
    assert h.is_expired(1700000030000) and not h.is_expired(1700000029999)
    assert h.real_topic("T", "G") == "%RETRY%G_T"
    assert h.is_retry_topic


def test_eight_fields_mean_no_commitlog_offset_and_topic_types():
    h = ReceiptHandle.decode("0 1 2 0 0 b 0 0")
    assert h.commit_log_offset == -1 and h.real_topic("T", "G") == "T" and not h.is_retry_topic
    assert ReceiptHandle.decode("0 1 2 0 2 b 0 0").real_topic("T", "G") == "%RETRY%G+T"


def test_create_handle_appends_commitlog_offset():
    assert create_handle("12 1700000000000 30000 3 1 broker-a 2 15", 4096) == APACHE_HANDLE
    assert ReceiptHandle.decode(create_handle("0 1 2 0 0 b 0 0", 7)).commit_log_offset == 7


@pytest.mark.parametrize(
    ("handle", "reason"),
    [
        ("", "empty"),
        ("1 2 3", "3 fields"),
        ("1 2 3 4 0 b 0 0 1 extra", "10 fields"),
        ("1 2 3 4 0 b 0  0", "bad queue offset"),  # a doubled separator is an empty field, not a number
        ("x 2 3 4 0 b 0 0", "bad start offset"),
        ("+1 2 3 4 0 b 0 0", "bad start offset"),
        ("-1 2 3 4 0 b 0 0", "start offset out of range"),
        ("1 99999999999999999999 3 4 0 b 0 0", "bad pop time"),
        ("1 9223372036854775808 3 4 0 b 0 0", "pop time out of range"),
        ("1 2 3 2147483648 0 b 0 0", "revive queue id out of range"),
        ("1 2 3 4 7 b 0 0", "unknown topic type"),
        ("1 2 3 4 0 b\x00 0 0", "bad broker name"),
        ("1 2 3 4 0 " + "b" * 256 + " 0 0", "bad broker name"),
        ("1 2 3 4 0 b -1 0", "queue id out of range"),
        ("1 2 3 4 0 b 0 0 -2", "commitlog offset out of range"),
        ("1 2 3 4 0 b 0 0 " + "1" * 600, "too long"),
    ],
)
def test_hostile_handles_are_refused_saying_why(handle, reason):
    with pytest.raises(InvalidReceiptHandle, match=reason):
        ReceiptHandle.decode(handle)
