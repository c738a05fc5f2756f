"""Store settings, named exactly as RocketMQ's ``MessageStoreConfig`` so ``broker.conf`` keys map 1:1."""

from __future__ import annotations

import os
from dataclasses import dataclass

CQ_STORE_UNIT_SIZE = 20

ASYNC_FLUSH = "ASYNC_FLUSH"
SYNC_FLUSH = "SYNC_FLUSH"

ASYNC_MASTER = "ASYNC_MASTER"
SLAVE = "SLAVE"

_DELAY_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass
class StoreConfig:
    """``MessageStoreConfig`` keys this store honours (camelCase on purpose: they are RocketMQ's names).

    Sizes are bytes, intervals and timeouts milliseconds, exactly as in Java.
    """

    storePathRootDir: str = "./store"
    storePathCommitLog: str | None = None  # None => <storePathRootDir>/commitlog
    # DLedger mode: the ledger's data files (DLedgerConfig.dataStorePath); None => <storePathRootDir>/dledger-<id>/data
    storePathDLedgerCommitLog: str | None = None
    mappedFileSizeCommitLog: int = 1024 * 1024 * 1024
    mappedFileSizeConsumeQueue: int = 300000 * CQ_STORE_UNIT_SIZE
    flushDiskType: str = ASYNC_FLUSH
    flushIntervalCommitLog: int = 500
    flushCommitLogLeastPages: int = 4
    flushCommitLogThoroughInterval: int = 10000
    syncFlushTimeout: int = 5000
    flushIntervalConsumeQueue: int = 1000
    flushConsumeQueueLeastPages: int = 2
    flushConsumeQueueThoroughInterval: int = 60000
    maxMessageSize: int = 1024 * 1024 * 4
    checkCRCOnRecover: bool = True
    maxTransferBytesOnMessageInMemory: int = 1024 * 256
    maxTransferCountOnMessageInMemory: int = 32
    maxTransferBytesOnMessageInDisk: int = 1024 * 64
    maxTransferCountOnMessageInDisk: int = 8
    accessMessageInMemoryMaxRatio: int = 40
    brokerRole: str = ASYNC_MASTER
    offsetCheckInSlave: bool = False
    messageDelayLevel: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    # index
    messageIndexEnable: bool = True
    maxHashSlotNum: int = 5000000
    maxIndexNum: int = 5000000 * 4
    maxMsgsNumBatch: int = 64
    defaultQueryMaxNum: int = 32
    # retention and disk guard
    fileReservedTime: int = 72  # hours
    deleteWhen: str = "04"  # hours of day, ';'-separated
    diskMaxUsedSpaceRatio: int = 75  # percent
    cleanResourceInterval: int = 10000
    cleanFileForciblyEnable: bool = True
    # Java reads these two from the system properties rocketmq.broker.diskSpace*; here they are settings.
    diskSpaceWarningLevelRatio: float = 0.90
    diskSpaceCleanForciblyRatio: float = 0.85
    # Not a RocketMQ key (Java maps every file for good): at most this many consume-queue, index and old
    # commitlog files stay mapped, one file descriptor each; the least recently used idle ones are unmapped and
    # mapped again when next used.  The commitlog's active segment is never unmapped.  0: no bound.  At start,
    # a soft RLIMIT_NOFILE below this + 256 is raised to the hard limit (as the JVM does); if still short, fewer
    # files stay mapped.
    maxOpenMappedFiles: int = 1024

    # broker.conf loading sets attributes after construction, so derived values are computed on use.

    @property
    def commit_log_path(self) -> str:
        """``storePathCommitLog``, defaulting to ``<storePathRootDir>/commitlog``."""
        return self.storePathCommitLog or os.path.join(self.storePathRootDir, "commitlog")

    @property
    def consume_queue_file_size(self) -> int:
        """``mappedFileSizeConsumeQueue`` rounded up to whole 20-byte units, as Java's getter does."""
        units = -(-self.mappedFileSizeConsumeQueue // CQ_STORE_UNIT_SIZE)
        return units * CQ_STORE_UNIT_SIZE

    @property
    def consume_queue_root(self) -> str:
        """``<storePathRootDir>/consumequeue``."""
        return os.path.join(self.storePathRootDir, "consumequeue")

    def delay_level_table(self) -> list[int]:
        """Delay in ms of each level (index 0 is level 1), parsed from ``messageDelayLevel``."""
        table = []
        for item in self.messageDelayLevel.split():
            table.append(int(item[:-1]) * _DELAY_UNITS_MS[item[-1]])
        return table
