"""The commitlog: every message of every topic, appended in RocketMQ's v1 record layout (CommitLog)."""

from __future__ import annotations

import contextlib
import logging
import mmap
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gateway.remoting.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    MessageSysFlag,
    body_crc,
    create_offset_message_id,
    encode_record,
    record_size,
)

from .api import AppendMessageResult, MessageExtBrokerInner, PutMessageResult, PutMessageStatus
from .config import StoreConfig
from .mapped_file import MappedFile, MappedFilePool, MappedFileQueue
from .native import c_store as _c_store
from .paths import is_safe_component

log = logging.getLogger(__name__)

# A segment always keeps room for the 8-byte blank (TOTALSIZE + BLANK_MAGIC_CODE) that pads its end.
END_FILE_MIN_BLANK_LENGTH = 4 + 4
MAX_TOPIC_LENGTH = 127  # v1 records store the topic length in a signed byte
MAX_PROPERTIES_LENGTH = 32767  # Short.MAX_VALUE
MIN_RECORD_SIZE = record_size(0, 0, 0)

_TRAN_MASK = 0xC
_HOST_V6_FLAGS = MessageSysFlag.BORNHOST_V6_FLAG | MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
# Enum members as module globals: reading one through its class costs ~0.13 us (Python 3.11).
_PUT_OK = PutMessageStatus.PUT_OK
_NOT_DISPATCHED = (MessageSysFlag.TRANSACTION_PREPARED_TYPE, MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)

_II = struct.Struct(">ii")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_H = struct.Struct(">h")
# The writer keeps up to _WARM_AHEAD bytes past it written with zeros, topping up once _WARM_CHUNK of it is used.
_WARM_AHEAD = 1 << 20
_WARM_CHUNK = 256 << 10
_ZEROS = memoryview(bytes(_WARM_AHEAD))
# totalSize, magic, bodyCRC, queueId, flag, queueOffset, physicalOffset, sysFlag, bornTimestamp
_PREFIX = struct.Struct(">iiiiiqqiq")
_SYSFLAG_POS = 36
_MAGIC_POS = 4
_MESSAGE_MAGIC = _I.pack(MESSAGE_MAGIC_CODE)
_BORN_HOST_POS = _PREFIX.size

# (topic, queue_id, commit_log_offset, msg_size, tags_code, consume_queue_offset, store_timestamp, sys_flag,
#  properties): called for every appended record; records that are not ``is_dispatched`` have queue offset 0.
Dispatcher = Callable[[str, int, int, int, int, int, int, int, str], None]


def now_ms() -> int:
    """Wall-clock milliseconds, what Java's System.currentTimeMillis gives."""
    return time.time_ns() // 1_000_000


def is_dispatched(sys_flag: int) -> bool:
    """Prepared and rollback transaction records never enter a consume queue."""
    return sys_flag & _TRAN_MASK not in _NOT_DISPATCHED


class CorruptRecordError(ValueError):
    """The bytes at a position are not a valid record (recovery stops there)."""


@dataclass(slots=True)
class DispatchRequest:
    """What recovery learns from a valid record (``DispatchRequest``)."""

    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    store_timestamp: int
    consume_queue_offset: int
    sys_flag: int
    properties: str


def parse_record(view: memoryview, pos: int, file_from_offset: int) -> tuple[Any, ...] | str | None:
    """The record at ``pos`` of a segment: (topic, queue_id, physical offset, size, store timestamp, queue offset,
    sys flag, properties, body position, body length, body CRC); None for the end-of-segment blank; what is wrong,
    as a str, for anything else. The C store's ``parse_record`` does the same where it was built."""
    limit = len(view)
    at = file_from_offset + pos
    if pos + END_FILE_MIN_BLANK_LENGTH > limit:
        return f"no room for a record at {at}"
    total, magic = _II.unpack_from(view, pos)
    if magic == BLANK_MAGIC_CODE:
        return None
    if magic != MESSAGE_MAGIC_CODE:
        return f"bad magic code {magic & 0xFFFFFFFF:#x} at {at}"
    end = pos + total
    if total < MIN_RECORD_SIZE or end > limit:
        return f"bad record size {total} at {at}"
    _, _, crc, queue_id, _, queue_offset, phy, sys_flag, _ = _PREFIX.unpack_from(view, pos)
    if phy != at:
        return f"record at {at} says it is at {phy}"
    # MIN_RECORD_SIZE covers every fixed field with IPv4 hosts; IPv6 hosts take 12 bytes more each.
    p = pos + _BORN_HOST_POS + (20 if sys_flag & MessageSysFlag.BORNHOST_V6_FLAG else 8)
    if p + 8 > end:
        return f"bad record size {total} at {at}"
    (store_timestamp,) = _Q.unpack_from(view, p)
    p += 8 + (20 if sys_flag & MessageSysFlag.STOREHOSTADDRESS_V6_FLAG else 8) + 4 + 8
    if p + 4 > end:
        return f"bad record size {total} at {at}"
    (body_len,) = _I.unpack_from(view, p)
    p += 4
    body_at = p
    p += body_len
    if body_len < 0 or p + 3 > end:
        return f"bad body length {body_len} at {at}"
    topic_len = view[p]
    p += 1
    topic_at = p
    p += topic_len
    if p + 2 > end:
        return f"bad topic length {topic_len} at {at}"
    (props_len,) = _H.unpack_from(view, p)
    p += 2
    if props_len < 0 or p + props_len != end:
        return f"record size {total} does not match its fields at {at}"
    return (
        str(view[topic_at : topic_at + topic_len], "utf-8", "replace"),
        queue_id,
        phy,
        total,
        store_timestamp,
        queue_offset,
        sys_flag,
        str(view[p:end], "utf-8", "replace"),
        body_at,
        body_len,
        crc,
    )


_parse_record = _c_store.parse_record if _c_store is not None else parse_record
# zlib's CRC-32, folded in C where the store was built (gateway/store/crc32.h: over ten times faster on a 1 KB body).
_crc32 = _c_store.crc32 if _c_store is not None else zlib.crc32


def check_message_and_return_size(
    view: memoryview, pos: int, file_from_offset: int, check_crc: bool
) -> DispatchRequest | None:
    """Validate the record at ``pos`` of a segment; None for the end-of-segment blank.

    Raises CorruptRecordError for anything else that is not a whole, consistent record.  Besides Java's
    checks (magic, CRC, computed length) the stored physical offset must equal the record's position.
    """
    fields = _parse_record(view, pos, file_from_offset)
    if fields is None:
        return None
    if type(fields) is str:
        raise CorruptRecordError(fields)
    topic, queue_id, phy, total, store_timestamp, queue_offset, sys_flag, properties, body_at, body_len, crc = fields
    if check_crc and body_crc(view[body_at : body_at + body_len], _crc32) != crc:
        raise CorruptRecordError(f"body CRC mismatch at {phy}")
    return DispatchRequest(topic, queue_id, phy, total, store_timestamp, queue_offset, sys_flag, properties)


# What a record holds beside its body, at most: the fixed fields, a topic (1-byte length) and properties
# (2-byte length).
_MAX_RECORD_OVERHEAD = 256 + 0xFF + 0xFFFF


def record_arriving(view: memoryview, pos: int, segment_size: int, max_message_size: int) -> bool:
    """Whether the bytes at ``pos`` may be the head of a record whose rest has not arrived yet (a slave's
    transfer ends inside it): too few to hold its size and magic code, or a record's magic code with a size that
    a record can have, reaching past them but not past its segment (no record spans two)."""
    if len(view) - pos < 8:
        return True
    total = _I.unpack_from(view, pos)[0]
    if view[pos + _MAGIC_POS : pos + 8] != _MESSAGE_MAGIC or total > max_message_size + _MAX_RECORD_OVERHEAD:
        return False
    return len(view) < pos + total <= segment_size


class CommitLog:
    """Appends records, serves slices of them, and finds the valid end after a restart.

    ``topic_queue_table`` maps (topic, queueId) to the next queue offset; ``dispatcher`` is called
    after each appended record.  Segments are counted in ``pool``; the one being written stays mapped.
    """

    def __init__(
        self,
        config: StoreConfig,
        dispatcher: Dispatcher,
        pool: MappedFilePool | None = None,
        queue: MappedFileQueue | None = None,
    ) -> None:
        self.config = config
        if queue is None:
            queue = MappedFileQueue(
                config.commit_log_path, config.mappedFileSizeCommitLog, preallocate=True, pool=pool, pin_last=True
            )
        self.queue = queue  # given: records kept elsewhere, read through this (DLedger's data files)
        self.dispatcher = dispatcher
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        # (end offset, store time of the record ending there): one attribute, so a flushing thread reads a
        # consistent pair.
        self.tail: tuple[int, int] = (0, 0)
        self._topic_bytes: dict[str, bytes] = {}
        self._warm_to = 0  # the writer's segment holds written zeros up to here (_warm)
        self._warm_at = 0  # an append ending past here tops them up

    def load(self) -> list[str]:
        """List the segments on disk; returns removed empty files."""
        return self.queue.load()

    @property
    def min_offset(self) -> int:
        """First commitlog offset still on disk."""
        return self.queue.min_offset

    @property
    def max_offset(self) -> int:
        """Offset just past the last record."""
        return self.queue.wrote_where

    @property
    def max_wrote_offset(self) -> int:
        """Offset just past the last byte written: recovery cuts consume queues and the index there."""
        return self.queue.wrote_where

    @property
    def flushed_where(self) -> int:
        """Offset up to which data is durable."""
        return self.queue.flushed_where

    @property
    def empty(self) -> bool:
        """Whether no segment is on disk."""
        return not self.queue.files

    # -- append ------------------------------------------------------------------------------------------

    def _check(self, msg: MessageExtBrokerInner) -> tuple[PutMessageStatus, bytes, bytes, int, int]:
        """Validate; returns (status, topic bytes, properties bytes, normalized sysFlag, record size)."""
        topic = self._topic_bytes.get(msg.topic)
        if topic is None:
            topic = msg.topic.encode()
            if len(topic) > MAX_TOPIC_LENGTH:
                log.warning("topic too long (%d bytes): %.60s...", len(topic), msg.topic)
                return PutMessageStatus.MESSAGE_ILLEGAL, b"", b"", 0, 0
            if not is_safe_component(msg.topic):  # it names the consume queue's directory
                log.warning("topic %r refused: not a plain path component", msg.topic[:60])
                return PutMessageStatus.MESSAGE_ILLEGAL, b"", b"", 0, 0
            self._topic_bytes[msg.topic] = topic
        props = msg.properties.encode()
        if len(props) > MAX_PROPERTIES_LENGTH:
            return PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, b"", b"", 0, 0
        body_len = len(msg.body)
        born_len = len(msg.born_host)
        store_len = len(msg.store_host)
        if body_len > self.config.maxMessageSize or born_len not in (8, 20) or store_len not in (8, 20):
            return PutMessageStatus.MESSAGE_ILLEGAL, b"", b"", 0, 0
        # The host flags must describe the host bytes, or the record cannot be decoded.
        sys_flag = msg.sys_flag & ~_HOST_V6_FLAGS
        if born_len == 20:
            sys_flag |= MessageSysFlag.BORNHOST_V6_FLAG
        if store_len == 20:
            sys_flag |= MessageSysFlag.STOREHOSTADDRESS_V6_FLAG
        size = record_size(body_len, len(topic), len(props), born_len, store_len)
        return _PUT_OK, topic, props, sys_flag, size

    def _reserve(self, size: int) -> tuple[MappedFile, int]:
        """Segment and in-segment position for ``size`` bytes, padding the current segment if they do not fit."""
        q = self.queue
        wrote = q.wrote_where
        files = q.files
        if not files:
            f = q.create_file(wrote - wrote % q.mapped_file_size)
        else:
            f = files[-1]
            if wrote >= f.end_offset:
                f = q.create_file(f.end_offset)
        pos = wrote - f.file_from_offset
        remaining = f.file_size - pos
        if size + END_FILE_MIN_BLANK_LENGTH > remaining:
            _II.pack_into(f.mm, pos, remaining, BLANK_MAGIC_CODE)
            q.wrote_where = f.end_offset
            f = q.create_file(f.end_offset)
            pos = 0
        return f, pos

    def _warm(self, f: MappedFile, end: int) -> None:
        """Write zeros (``MappedFile.write_at``) over the next ``_WARM_AHEAD`` bytes of ``f`` past ``end``, where
        records go next: a record then goes through the mapping into a page already in memory, without the fault
        ``write_at`` describes (every few hundred ms under load, it made the p99 of SYNC_MASTER sends; under 3.5 ms
        this way). Bytes past the writer are zeros anyway: nothing changes in the file."""
        start = max(self._warm_to, end)
        stop = min(f.end_offset, end + _WARM_AHEAD)
        self._warm_to = stop
        # Near the segment's end there is nothing left to warm: wait for the next segment.
        self._warm_at = stop - _WARM_AHEAD + _WARM_CHUNK if stop < f.end_offset else f.end_offset
        if stop > start:
            try:
                f.write_at(start - f.file_from_offset, _ZEROS[: stop - start])
            except OSError as e:  # only a cost saved: the records still go through the mapping
                log.warning("cannot pre-write %s: %s", f.path, e)

    def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        """Append one record, assign its queue offset and dispatch it."""
        status, topic, props, sys_flag, size = self._check(msg)
        if status is not _PUT_OK:
            return PutMessageResult(status)
        if size + END_FILE_MIN_BLANK_LENGTH > self.queue.mapped_file_size:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL)
        try:
            f, pos = self._reserve(size)
        except OSError:
            log.exception("cannot create a commitlog segment")
            return PutMessageResult(PutMessageStatus.CREATE_MAPEDFILE_FAILED)
        key = (msg.topic, msg.queue_id)
        dispatched = sys_flag & _TRAN_MASK not in _NOT_DISPATCHED
        queue_offset = self.topic_queue_table.get(key, 0) if dispatched else 0
        phy = f.file_from_offset + pos
        store_timestamp = now_ms()
        write_record(f.mm, pos, size, msg, topic, props, sys_flag, queue_offset, phy, store_timestamp)
        self.queue.wrote_where = phy + size
        self.tail = (phy + size, store_timestamp)
        if phy + size > self._warm_at:
            self._warm(f, phy + size)
        if dispatched:
            self.topic_queue_table[key] = queue_offset + 1
        self.dispatcher(
            msg.topic, msg.queue_id, phy, size, msg.tags_code, queue_offset, store_timestamp, sys_flag, msg.properties
        )
        return PutMessageResult(
            _PUT_OK,
            AppendMessageResult(
                phy, size, create_offset_message_id(msg.store_host, phy), store_timestamp, queue_offset
            ),
        )

    def _check_batch(
        self, msgs: list[MessageExtBrokerInner]
    ) -> tuple[PutMessageStatus, bytes, list[tuple[MessageExtBrokerInner, bytes, int, int]], int]:
        """Validate a batch (one topic and queue, no transaction flags); returns (status, topic bytes,
        [(message, properties bytes, sysFlag, record size)], total size)."""
        checked: list[tuple[MessageExtBrokerInner, bytes, int, int]] = []
        if not msgs:
            return PutMessageStatus.MESSAGE_ILLEGAL, b"", checked, 0
        first = msgs[0]
        topic = b""
        total = 0
        body_total = 0
        for msg in msgs:
            if msg.topic != first.topic or msg.queue_id != first.queue_id or msg.sys_flag & _TRAN_MASK:
                return PutMessageStatus.MESSAGE_ILLEGAL, b"", checked, 0
            status, topic, props, sys_flag, size = self._check(msg)
            if status is not _PUT_OK:
                return status, b"", checked, 0
            checked.append((msg, props, sys_flag, size))
            total += size
            body_total += len(msg.body)
        if body_total > self.config.maxMessageSize or total + END_FILE_MIN_BLANK_LENGTH > self.queue.mapped_file_size:
            return PutMessageStatus.MESSAGE_ILLEGAL, b"", checked, 0
        return _PUT_OK, topic, checked, total

    def put_messages(self, msgs: list[MessageExtBrokerInner]) -> PutMessageResult:
        """Append a batch (one topic and queue, no transaction flags) contiguously in one segment."""
        status, topic, checked, total = self._check_batch(msgs)
        if status is not _PUT_OK:
            return PutMessageResult(status)
        first = msgs[0]
        try:
            f, pos = self._reserve(total)
        except OSError:
            log.exception("cannot create a commitlog segment")
            return PutMessageResult(PutMessageStatus.CREATE_MAPEDFILE_FAILED)
        key = (first.topic, first.queue_id)
        first_queue_offset = queue_offset = self.topic_queue_table.get(key, 0)
        wrote_offset = phy = f.file_from_offset + pos
        store_timestamp = now_ms()  # one store time for the whole batch, as Java
        mm = f.mm
        for msg, props, sys_flag, size in checked:
            write_record(mm, pos, size, msg, topic, props, sys_flag, queue_offset, phy, store_timestamp)
            pos += size
            phy += size
            queue_offset += 1
        self.queue.wrote_where = phy
        self.tail = (phy, store_timestamp)
        if phy > self._warm_at:
            self._warm(f, phy)
        self.topic_queue_table[key] = queue_offset
        phy = wrote_offset
        msg_ids = []
        for i, (msg, _, sys_flag, size) in enumerate(checked):
            self.dispatcher(
                msg.topic,
                msg.queue_id,
                phy,
                size,
                msg.tags_code,
                first_queue_offset + i,
                store_timestamp,
                sys_flag,
                msg.properties,
            )
            msg_ids.append(create_offset_message_id(msg.store_host, phy))
            phy += size
        return PutMessageResult(
            _PUT_OK,
            AppendMessageResult(wrote_offset, total, ",".join(msg_ids), store_timestamp, first_queue_offset, len(msgs)),
        )

    # -- read --------------------------------------------------------------------------------------------

    def append_data(self, phy_offset: int, data: bytes | memoryview) -> bool:
        """Slave side: write raw commitlog bytes replicated from the master at ``phy_offset``.

        The bytes land at exactly the master's offsets (records, blanks and padding alike); only an empty
        commitlog may start elsewhere than its max offset.  Returns False when ``phy_offset`` does not fit.
        """
        q = self.queue
        if phy_offset != q.wrote_where and (q.files or phy_offset < 0):
            return False
        view = memoryview(data)
        done = 0
        while done < len(view):
            offset = phy_offset + done
            files = q.files
            f = (
                files[-1]
                if files and offset < files[-1].end_offset
                else q.create_file(offset - offset % q.mapped_file_size)
            )
            pos = offset - f.file_from_offset
            n = min(len(view) - done, f.file_size - pos)
            f.write_at(pos, view[done : done + n])  # not through the mapping: its faults stall a SYNC_MASTER send
            done += n
            q.wrote_where = offset + n
        return True

    def get_message(self, offset: int, size: int) -> memoryview | None:
        """A zero-copy slice of ``size`` bytes at ``offset``; None if not (or no longer) on disk."""
        if offset < 0 or size <= 0 or offset + size > self.queue.wrote_where:
            return None
        f = self.queue.find_mapped_file_by_offset(offset)
        if f is None:
            return None
        pos = offset - f.file_from_offset
        if pos + size > f.file_size:
            return None
        return f.view[pos : pos + size]

    def readable_segment(self, offset: int) -> tuple[int, memoryview] | None:
        """(start, a fresh slice of what is written) of the segment holding ``offset``, or None: the window in which
        ``get_message`` finds records, for a reader that takes several from one segment."""
        f = self.queue.find_mapped_file_by_offset(offset) if offset >= 0 else None
        if f is None:
            return None
        base = f.file_from_offset
        return base, f.view[: max(min(f.file_size, self.queue.wrote_where - base), 0)]

    def get_record(self, offset: int) -> memoryview | None:
        """A zero-copy slice of the record starting at ``offset`` if a whole, consistent one does (its fields, its
        own offset and its body CRC checked); None otherwise."""
        end = self.queue.wrote_where
        f = self.queue.find_mapped_file_by_offset(offset) if 0 <= offset < end else None
        if f is None:
            return None
        view = f.view[: min(f.file_size, end - f.file_from_offset)]
        pos = offset - f.file_from_offset
        try:
            req = check_message_and_return_size(view, pos, f.file_from_offset, True)
        except CorruptRecordError:
            return None
        return None if req is None else view[pos : pos + req.msg_size]

    def pickup_store_timestamp(self, offset: int, size: int) -> int:
        """Store time of the record at ``offset``, or -1."""
        view = self.get_message(offset, size)
        if view is None or size < MIN_RECORD_SIZE:
            return -1
        (sys_flag,) = _I.unpack_from(view, _SYSFLAG_POS)
        born_len = 20 if sys_flag & MessageSysFlag.BORNHOST_V6_FLAG else 8
        return _Q.unpack_from(view, _BORN_HOST_POS + born_len)[0]

    def roll_next_file(self, offset: int) -> int:
        """Start of the segment after the one holding ``offset``."""
        size = self.queue.mapped_file_size
        return offset + size - offset % size

    def read_records(self, offset: int, end: int) -> Iterator[tuple[DispatchRequest | None, int]]:
        """The whole records from ``offset`` up to ``end`` (what a reput dispatches), each with the offset after it;
        ``(None, offset)`` where reading jumps (a segment's end blank, a damaged stretch skipped).  Stops before a
        record whose rest has not arrived yet (a slave's transfer ends inside it)."""
        while offset < end:
            f = self.queue.find_mapped_file_by_offset(offset)
            if f is None:
                return
            base = f.file_from_offset
            view = f.view[: end - base]  # a record beyond ``end`` is not whole yet
            pos = offset - base
            while pos < len(view):
                try:
                    req = check_message_and_return_size(view, pos, base, False)
                except CorruptRecordError as e:
                    # Usually the rest of this record comes with the next transfer; but with a whole record after
                    # it, it is a damaged one the master's recovery skipped: skip it too.
                    if record_arriving(view, pos, f.file_size, self.config.maxMessageSize):
                        return
                    found = self.next_valid_record(base + pos + 1, end)
                    if found is None:
                        return
                    log.warning(
                        "commitlog: skipped damaged bytes [%d, %d) (%d bytes: %s) replicated into %s",
                        *(base + pos, found, found - base - pos, e, f.path),
                    )
                    offset = found
                    yield None, offset
                    break
                if req is None:  # end-of-segment blank
                    offset = f.end_offset
                    yield None, offset
                    break
                pos += req.msg_size
                offset = base + pos
                yield req, offset

    def delete_expired_files(
        self, expired_ms: int, now_ms: int, clean_immediately: bool, batch_max: int
    ) -> tuple[list[MappedFile], Callable[[list[MappedFile]], None]]:
        """Detach the oldest segments last modified ``expired_ms`` ago or earlier (``deleteExpiredFile``); returns
        them and what deletes them (blocking, after any flush still syncing them)."""
        queue = self.queue
        return queue.delete_expired_file_by_time(expired_ms, now_ms, clean_immediately, batch_max), queue.destroy_files

    # -- flush -------------------------------------------------------------------------------------------

    def flush(self) -> tuple[int, int]:
        """fsync everything appended so far; returns (flushed offset, store time of the last flushed record)."""
        end, store_timestamp = self.tail
        return self.queue.flush(end), store_timestamp

    # -- recovery ----------------------------------------------------------------------------------------

    def normal_recover_start(self) -> int:
        """Java's normal recovery checks the last three segments."""
        files = self.queue.files
        return files[max(len(files) - 3, 0)].file_from_offset

    def abnormal_recover_start(self, min_timestamp: int) -> int:
        """Start of the newest segment whose first record was stored at or before the checkpoint's time."""
        files = self.queue.files
        for f in reversed(files):
            _, magic = _II.unpack_from(f.mm, 0)
            if magic != MESSAGE_MAGIC_CODE:
                continue
            (sys_flag,) = _I.unpack_from(f.mm, _SYSFLAG_POS)
            born_len = 20 if sys_flag & MessageSysFlag.BORNHOST_V6_FLAG else 8
            (store_timestamp,) = _Q.unpack_from(f.mm, _BORN_HOST_POS + born_len)
            if 0 < store_timestamp <= min_timestamp:
                return f.file_from_offset
        return files[0].file_from_offset

    def segment_start(self, offset: int) -> int:
        """Start of the segment holding ``offset`` (clamped to the segments on disk)."""
        files = self.queue.files
        if offset >= files[-1].end_offset:
            return files[-1].file_from_offset
        f = self.queue.find_mapped_file_by_offset(offset)
        return files[0].file_from_offset if f is None else f.file_from_offset

    def recover(
        self, start: int, on_record: Callable[[DispatchRequest], None], abnormal: bool
    ) -> tuple[int, int, list[str], list[tuple[int, int]]]:
        """Validate records from segment start ``start``, calling ``on_record`` for each, and cut the tail
        after the last valid one.  A damaged stretch followed by a valid record is skipped, not cut.

        Returns (valid records, non-zero bytes cut, deleted files, skipped [start, end) offset ranges).
        """
        check_crc = self.config.checkCRCOnRecover
        files = self.queue.files
        index = next(i for i, f in enumerate(files) if f.file_from_offset == start)
        f = files[index]
        pos = 0
        records = 0
        last_timestamp = 0
        skipped: list[tuple[int, int]] = []
        while True:
            try:
                req = check_message_and_return_size(f.view, pos, f.file_from_offset, check_crc)
            except CorruptRecordError as e:
                damaged = f.file_from_offset + pos
                found = self.next_valid_record(damaged + 1)
                if found is None:
                    log.info("commitlog recovery stops at %d: %s", damaged, e)
                    break
                log.warning(
                    "commitlog: skipped damaged bytes [%d, %d) (%d bytes: %s) from %s; the records after them are kept",
                    *(damaged, found, found - damaged, e, f.path),
                )
                skipped.append((damaged, found))
                f = self.queue.find_mapped_file_by_offset(found)
                assert f is not None
                index, pos = files.index(f), found - f.file_from_offset
                continue
            if req is None:  # end-of-segment blank
                if index + 1 == len(files):
                    pos = f.file_size  # keep the blank; the next append opens a new segment
                    break
                index += 1
                f = files[index]
                pos = 0
                continue
            records += 1
            last_timestamp = req.store_timestamp
            on_record(req)
            pos += req.msg_size
        end = f.file_from_offset + pos
        cut, dropped = self.queue.truncate_dirty_files(end, always_zero=abnormal)
        self.tail = (end, last_timestamp)
        return records, cut, dropped, skipped

    def next_valid_record(self, offset: int, end: int | None = None) -> int | None:
        """Offset of the first valid record, its body CRC checked, at or after ``offset`` (in its segment or a
        later contiguous one) and ending by ``end``; None when there is none: a torn tail, or a record still arriving.

        Candidates are where the magic code appears before ``end``, or without ``end`` anywhere in a full segment
        and in the last one before its first 1 MiB of zeros (``last_nonzero``: the end of the data costs one short
        read); each must also hold its own offset.
        """
        q = self.queue
        first = q.find_mapped_file_by_offset(offset)
        if first is None:
            return None
        files = q.files
        index = files.index(first)
        pos = offset - first.file_from_offset
        for i in range(index, len(files)):
            f = files[i]
            if i > index:
                if f.file_from_offset != files[i - 1].end_offset:
                    return None  # a missing segment: what follows cannot be placed
                pos = 0
            if end is not None:
                limit = min(end - f.file_from_offset, f.file_size)
            elif f is files[-1]:
                limit = f.last_nonzero(pos)  # the end of the data: the writer's segment is mostly unwritten
            else:
                limit = f.file_size  # a full segment: a long run of zeros (a body's) is no end of data

            mm = f.mm
            at = pos + _MAGIC_POS
            while (at := mm.find(_MESSAGE_MAGIC, at, max(limit, at))) >= 0:
                with contextlib.suppress(CorruptRecordError):
                    req = check_message_and_return_size(f.view, at - _MAGIC_POS, f.file_from_offset, True)
                    if req is not None and (end is None or req.commit_log_offset + req.msg_size <= end):
                        return req.commit_log_offset
                at += 1
            if end is not None and f.end_offset >= end:
                return None
        return None

    def close(self) -> None:
        """Unmap every segment."""
        self.queue.close()

    def destroy(self) -> None:
        """Delete every segment."""
        self.queue.destroy()
        self.topic_queue_table.clear()


def write_record(
    mm: mmap.mmap | bytearray,
    pos: int,
    size: int,
    msg: MessageExtBrokerInner,
    topic: bytes,
    props: bytes,
    sys_flag: int,
    queue_offset: int,
    phy: int,
    store_timestamp: int,
) -> None:
    """Write the commitlog record of ``msg`` (``size`` bytes, at ``phy``, with its assigned queue offset and store
    time) into ``mm`` (a mapping, or a buffer) at ``pos``: by the C store straight into it, else built and copied
    in."""
    c = _c_store
    if c is None:
        mm[pos : pos + size] = encode_record(
            topic=topic,
            queue_id=msg.queue_id,
            flag=msg.flag,
            queue_offset=queue_offset,
            physical_offset=phy,
            sys_flag=sys_flag,
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host,
            store_timestamp=store_timestamp,
            store_host=msg.store_host,
            reconsume_times=msg.reconsume_times,
            prepared_transaction_offset=msg.prepared_transaction_offset,
            body=msg.body,
            properties=props,
        )
        return
    body = msg.body
    c.write_record(
        mm, pos, size, MESSAGE_MAGIC_CODE, body_crc(body, _crc32), topic, msg.queue_id, msg.flag, queue_offset, phy,
        sys_flag, msg.born_timestamp, msg.born_host, store_timestamp, msg.store_host, msg.reconsume_times,
        msg.prepared_transaction_offset, body, props,
    )  # fmt: skip
