"""The store as the broker sees it: message, results and statuses (RocketMQ's names), ``MessageStore``."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

# (tags_code) -> matched?  None means "match everything".
MessageFilter = Callable[[int], bool]
# (topic, queue_id, logic_offset, tags_code); logic_offset is the new message's queue offset.
ArrivingListener = Callable[[str, int, int, int], None]


@dataclass(slots=True)
class MessageExtBrokerInner:
    """A message as the broker hands it to the store; the store assigns offsets and the store time."""

    topic: str
    queue_id: int
    flag: int
    body: bytes
    properties: str  # already encoded (name 0x01 value 0x02 ...)
    tags_code: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes  # pack_host form: 4- or 16-byte IP + int32 port
    store_host: bytes
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


class PutMessageStatus(enum.Enum):
    """Outcome of a put (``PutMessageStatus``)."""

    # Members are singletons compared by identity: hash them by identity in C too (Enum's own __hash__ is
    # Python code, and every send looks its status up in a dict).
    __hash__ = object.__hash__

    PUT_OK = enum.auto()
    FLUSH_DISK_TIMEOUT = enum.auto()
    FLUSH_SLAVE_TIMEOUT = enum.auto()
    SLAVE_NOT_AVAILABLE = enum.auto()
    SERVICE_NOT_AVAILABLE = enum.auto()
    CREATE_MAPEDFILE_FAILED = enum.auto()
    MESSAGE_ILLEGAL = enum.auto()
    PROPERTIES_SIZE_EXCEEDED = enum.auto()
    OS_PAGECACHE_BUSY = enum.auto()
    UNKNOWN_ERROR = enum.auto()


@dataclass(slots=True)
class AppendMessageResult:
    """Where a put landed (``AppendMessageResult``)."""

    wrote_offset: int  # commitlog offset of the first record
    wrote_bytes: int  # bytes of the record(s), without any end-of-segment blank
    msg_id: str  # offsetMsgId; comma-joined for a batch
    store_timestamp: int
    logics_offset: int  # queue offset of the first message
    msg_num: int = 1


@dataclass(slots=True)
class PutMessageResult:
    """``PutMessageResult``: a status plus, when something was written, the append details."""

    status: PutMessageStatus
    append: AppendMessageResult | None = None

    @property
    def ok(self) -> bool:
        """True when the message is stored (also for the flush/slave timeouts, as in Java)."""
        return self.status in _STORED


_STORED = frozenset(
    {
        PutMessageStatus.PUT_OK,
        PutMessageStatus.FLUSH_DISK_TIMEOUT,
        PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
        PutMessageStatus.SLAVE_NOT_AVAILABLE,
    }
)


class GetMessageStatus(enum.Enum):
    """Outcome of a pull lookup (``GetMessageStatus``)."""

    FOUND = enum.auto()
    NO_MATCHED_MESSAGE = enum.auto()
    MESSAGE_WAS_REMOVING = enum.auto()
    OFFSET_FOUND_NULL = enum.auto()
    OFFSET_OVERFLOW_BADLY = enum.auto()
    OFFSET_OVERFLOW_ONE = enum.auto()
    OFFSET_TOO_SMALL = enum.auto()
    NO_MESSAGE_IN_QUEUE = enum.auto()


@dataclass(slots=True)
class GetMessageResult:
    """``GetMessageResult``: raw commitlog records ready to be sent as a PULL body."""

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffers: list[bytes] = field(default_factory=list)
    buffer_total_size: int = 0
    suggest_pull_from_slave: bool = False

    @property
    def message_count(self) -> int:
        """Number of records in ``buffers``."""
        return len(self.buffers)


@dataclass(slots=True)
class QueryMessageResult:
    """``QueryMessageResult``: whole records found through the index, and where the index stood."""

    buffers: list[bytes] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0

    @property
    def buffer_total_size(self) -> int:
        """Bytes in ``buffers``."""
        return sum(map(len, self.buffers))


@dataclass
class RecoveryReport:
    """What ``start`` found and repaired."""

    abnormal: bool  # the abort file was present: the last run did not shut down cleanly
    scan_from: int = 0  # commitlog offset the validating scan started at
    max_phy_offset: int = 0  # end of the last valid record
    records_kept: int = 0  # valid records seen by the scan
    records_redispatched: int = 0  # consume-queue units rebuilt from the commitlog
    bytes_truncated: int = 0  # non-zero bytes cut after the last valid record (torn tail, garbage)
    cq_units_truncated: int = 0  # consume-queue units that pointed past the commitlog's end
    index_records_rebuilt: int = 0  # records (re-)dispatched to the index files
    index_entries_truncated: int = 0  # index entries that pointed past the commitlog's end
    skipped: list[tuple[int, int]] = field(default_factory=list)  # damaged commitlog [start, end) ranges passed over
    cq_units_blanked: int = 0  # consume-queue units that pointed into a skipped range, now blank
    queues_rebuilt: list[str] = field(default_factory=list)  # damaged consume queues rebuilt: "topic-queueId"
    files_dropped: list[str] = field(default_factory=list)


class MessageStore(Protocol):
    """The store as the broker uses it (the subset of RocketMQ's ``MessageStore`` we implement)."""

    arriving_listener: ArrivingListener | None

    def start(self) -> RecoveryReport: ...
    def shutdown(self) -> None: ...
    def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult: ...
    def put_messages(self, msgs: list[MessageExtBrokerInner]) -> PutMessageResult: ...
    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None = None,
    ) -> GetMessageResult | None: ...
    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...
    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int: ...
    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int: ...
    def get_earliest_message_time(self, topic: str, queue_id: int) -> int: ...
    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int: ...
    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, offset: int) -> bool: ...
    def look_message_by_offset(self, phy_offset: int) -> bytes | None: ...
    def select_one_message_by_offset(self, phy_offset: int, size: int) -> memoryview | None: ...
    def get_max_phy_offset(self) -> int: ...
    def get_min_phy_offset(self) -> int: ...
    def delete_topics(self, topics: Iterable[str]) -> int: ...
    def destroy_consume_queue(self, topic: str) -> int: ...
    def flush(self) -> int: ...

    @property
    def flushed_where(self) -> int: ...

    @property
    def max_phy_offset(self) -> int: ...
