"""Sans-IO HA codec and the timing of both ends of the link, on a task.Clock."""

from __future__ import annotations

from pathlib import Path

import pytest
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock, StringTransport

from gateway.store.api import PutMessageStatus
from gateway.store.config import StoreConfig
from gateway.store.ha.client import HAClient, HAClientProtocol
from gateway.store.ha.codec import (
    HAProtocolError,
    ReportDecoder,
    Transfer,
    TransferDecoder,
    encode_report,
    encode_transfer_header,
)
from gateway.store.ha.service import HAConfig, HAService
from gateway.store.message_store import DefaultMessageStore
from tests.store.conftest import make_msg

FRAMES = Path(__file__).with_name("ha_stream_frames.txt")


def apache_frames() -> list[tuple[str, bytes]]:
    lines = [line.split() for line in FRAMES.read_text().splitlines() if line and not line.startswith("#")]
    return [(direction, bytes.fromhex(hex_)) for direction, hex_ in lines]


def test_decodes_apache_frames() -> None:
    reports = ReportDecoder()
    transfers = TransferDecoder()
    seen_reports: list[int | None] = []
    seen: list[tuple[int, int]] = []
    for direction, raw in apache_frames():
        if direction == "S->M":
            assert encode_report(int.from_bytes(raw, "big")) == raw
            seen_reports.append(reports.feed(raw))
        else:
            phy, size = int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big")
            assert encode_transfer_header(phy, size) == raw
            # The capture keeps headers only: feed the data in two pieces to check reassembly.
            data = bytes(range(256)) * (size // 256) + bytes(size % 256)
            out = list(transfers.feed(raw + data[:7])) + list(transfers.feed(data[7:]))
            assert out == [Transfer(phy, data)]
            seen.append((phy, size))
    assert seen_reports[:2] == [0, 11074]
    assert seen[:3] == [(0, 0), (0, 11074), (11074, 0)]


def test_report_decoder_keeps_newest_and_partial() -> None:
    d = ReportDecoder()
    assert d.feed(encode_report(5)[:3]) is None
    assert d.feed(encode_report(5)[3:] + encode_report(9) + encode_report(12)[:2]) == 9
    assert d.feed(encode_report(12)[2:]) == 12
    with pytest.raises(HAProtocolError):
        d.feed(encode_report(-1))


def test_transfer_decoder_rejects_bad_header() -> None:
    with pytest.raises(HAProtocolError):
        list(TransferDecoder(max_size=10).feed(encode_transfer_header(0, 11)))
    frames = encode_transfer_header(0, 0) + encode_transfer_header(0, 3) + b"abc" + encode_transfer_header(3, 1)
    assert list(TransferDecoder().feed(frames)) == [Transfer(0, b""), Transfer(0, b"abc")]


@pytest.fixture
def store(tmp_path: Path):
    s = DefaultMessageStore(StoreConfig(storePathRootDir=str(tmp_path / "store"), mappedFileSizeCommitLog=1 << 20))
    s.start()
    yield s
    s.shutdown()


def test_master_waits_for_report_then_heartbeats_and_drops_silent_slave(store) -> None:
    clock = MemoryReactorClock()
    service = HAService(store, HAConfig(), clock)
    conn = service.buildProtocol(None)
    transport = StringTransport()
    conn.makeConnection(transport)
    service.start(0, "127.0.0.1")
    clock.advance(6)
    assert transport.value() == b""  # nothing before the first report
    conn.dataReceived(encode_report(0))
    assert transport.value() == encode_transfer_header(0, 0)
    transport.clear()
    clock.pump([0.1] * 49)
    assert transport.value() == b""
    clock.pump([0.1] * 2)  # 5 s without a write: header-only frame
    assert transport.value() == encode_transfer_header(0, 0)
    assert not transport.disconnecting
    clock.pump([0.1] * 150)  # 20 s without a report
    assert transport.disconnecting
    service.stop()


def test_slave_reports_at_once_periodically_and_drops_silent_master(store) -> None:
    clock = Clock()
    client = HAClient(store, HAConfig(), clock, lambda: "")
    proto = HAClientProtocol(client)
    transport = StringTransport()
    proto.makeConnection(transport)
    assert transport.value() == encode_report(0)
    transport.clear()
    clock.advance(4.9)
    proto.tick(clock.seconds())
    assert transport.value() == b""
    clock.advance(0.1)
    proto.tick(clock.seconds())
    assert transport.value() == encode_report(0)
    proto.dataReceived(encode_transfer_header(0, 0))
    clock.advance(19)
    proto.tick(clock.seconds())
    assert not transport.disconnecting
    clock.advance(1.1)
    proto.tick(clock.seconds())
    assert transport.disconnecting


def test_master_batches_and_pauses_when_transport_is_full(store) -> None:
    for _ in range(10):
        assert store.put_message(make_msg(body=b"x" * 10_000)).status is PutMessageStatus.PUT_OK
    end = store.commit_log.max_offset
    clock = MemoryReactorClock()
    service = HAService(store, HAConfig(haTransferBatchSize=32 * 1024), clock)
    conn = service.buildProtocol(None)
    transport = StringTransport()
    conn.makeConnection(transport)
    conn.pauseProducing()
    conn.dataReceived(encode_report(0))
    assert transport.value() == encode_transfer_header(0, 0)  # paused: no data yet
    conn.resumeProducing()
    frames = list(TransferDecoder().feed(transport.value()))
    assert [(t.phy_offset, len(t.data)) for t in frames[1:]] == [
        (offset, min(32 * 1024, end - offset)) for offset in range(0, end, 32 * 1024)
    ]
    assert b"".join(t.data for t in frames) == bytes(store.commit_log.get_message(0, end))
