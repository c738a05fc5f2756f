"""The ``checkpoint`` file: how far the commitlog and the consume queues are known durable (StoreCheckpoint)."""

from __future__ import annotations

import os
import struct

CHECKPOINT_FILE_SIZE = 4096  # one OS page, as Java maps it
_LAYOUT = struct.Struct(">qqq")  # physicMsgTimestamp, logicsMsgTimestamp, indexMsgTimestamp


class StoreCheckpoint:
    """Store times (ms) of the last durable commitlog record and consume-queue unit.

    Only ever advanced after the matching fsync, so abnormal recovery can trust everything older.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        exists = os.path.exists(path)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        if exists:
            data = os.pread(self._fd, _LAYOUT.size, 0)
            if len(data) == _LAYOUT.size:
                self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp = _LAYOUT.unpack(data)
        if os.fstat(self._fd).st_size != CHECKPOINT_FILE_SIZE:
            os.ftruncate(self._fd, CHECKPOINT_FILE_SIZE)

    @property
    def min_timestamp(self) -> int:
        """Where abnormal recovery may start: min of both times minus 3 s, not below 0."""
        return max(min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000, 0)

    def flush(self) -> None:
        """Write the three times and fdatasync."""
        os.pwrite(
            self._fd,
            _LAYOUT.pack(self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp),
            0,
        )
        os.fdatasync(self._fd)

    def close(self) -> None:
        """Close without writing (``flush`` first for a clean shutdown)."""
        os.close(self._fd)
