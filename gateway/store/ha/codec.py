"""Sans-IO codec of the 4.x HA stream (HAConnection/HAClient in Apache 4.9.8).

Slave to master: an 8-byte big-endian report of the slave's max commitlog offset. Ours, in controller mode
only: a negative value ``-1 - brokerId`` first, so that the master knows which broker of its SyncStateSet the
link is (Apache 5 has its own handshake for that; a 4.x master never receives it).
Master to slave: frames ``[8-byte phyOffset][4-byte size][size bytes of raw commitlog]``; size 0 is a
header-only heartbeat.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

REPORT = struct.Struct(">q")
TRANSFER_HEADER = struct.Struct(">qi")
HEADER_SIZE = TRANSFER_HEADER.size  # 12, HAConnection.WriteSocketService.headerSize
# haTransferBatchSize's default: at most this much commitlog data per frame.
TRANSFER_BATCH_SIZE = 32 * 1024


class HAProtocolError(ValueError):
    """A frame that breaks the stream's rules; the link must be dropped."""


def encode_report(max_offset: int) -> bytes:
    """The slave's report of its max commitlog offset."""
    return REPORT.pack(max_offset)


def encode_identity(broker_id: int) -> bytes:
    """Controller mode: the slave's broker id, sent before its first report."""
    return REPORT.pack(-1 - broker_id)


def encode_transfer_header(phy_offset: int, size: int) -> bytes:
    """Header of a master frame carrying ``size`` bytes of commitlog from ``phy_offset``."""
    return TRANSFER_HEADER.pack(phy_offset, size)


@dataclass(frozen=True, slots=True)
class Transfer:
    """One master frame: ``data`` is the commitlog from ``phy_offset`` (empty for a heartbeat)."""

    phy_offset: int
    data: bytes


class ReportDecoder:
    """Master side: splits the slave's bytes into reports (and its identity, in controller mode).

    As Apache's ReadSocketService does, only the newest complete report of a read counts; older ones in
    the same read are superseded.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.slave_broker_id: int | None = None
        self._reported = False

    def feed(self, data: bytes) -> int | None:
        """Add received bytes; return the newest complete report, or None if none completed."""
        self._buffer += data
        complete = len(self._buffer) - len(self._buffer) % REPORT.size
        if not complete:
            return None
        (offset,) = REPORT.unpack_from(self._buffer, complete - REPORT.size)
        if offset < 0 or (not self._reported and complete > REPORT.size):
            offset = self._identities(complete)
        del self._buffer[:complete]
        if offset is not None:
            self._reported = True
        return offset

    def _identities(self, complete: int) -> int | None:
        newest = None
        for (value,) in REPORT.iter_unpack(bytes(self._buffer[:complete])):
            if value >= 0:
                newest = value
            elif self.slave_broker_id is None and newest is None and not self._reported:
                self.slave_broker_id = -1 - value
            else:
                raise HAProtocolError(f"negative slave offset {value}")
        return newest


class TransferDecoder:
    """Slave side: splits the master's bytes into :class:`Transfer` frames."""

    def __init__(self, max_size: int = 1024 * 1024 * 4) -> None:
        self._buffer = bytearray()
        self._max_size = max_size

    def feed(self, data: bytes) -> Iterator[Transfer]:
        """Add received bytes; yield every frame now complete."""
        self._buffer += data
        start = 0
        try:
            while len(self._buffer) - start >= HEADER_SIZE:
                phy_offset, size = TRANSFER_HEADER.unpack_from(self._buffer, start)
                if phy_offset < 0 or size < 0 or size > self._max_size:
                    raise HAProtocolError(f"bad transfer header phyOffset={phy_offset} size={size}")
                end = start + HEADER_SIZE + size
                if len(self._buffer) < end:
                    break
                yield Transfer(phy_offset, bytes(self._buffer[start + HEADER_SIZE : end]))
                start = end
        finally:
            del self._buffer[:start]
