"""Stored messages put again by the broker itself (retry, delay delivery, transaction commit and check-back).

Each of those reads a record back (``lookMessageByOffset``) and stores a copy elsewhere that keeps the
body (still compressed, if it was), flag, sysFlag, born and store hosts of the original.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from gateway.remoting.message import (
    MessageConst,
    MessageExt,
    RecordError,
    decode_record,
    pack_host,
    properties_to_string,
    tags_code,
)
from gateway.store.api import MessageExtBrokerInner, MessageStore, PutMessageResult, PutMessageStatus

log = Logger()

_R = TypeVar("_R")
_T = TypeVar("_T")


def when_put(result: _R | Deferred[_R], then: Callable[[_R], _T]) -> _T | Deferred[_T]:
    """``then(result)`` now, or once it is known: on a DLedger ledger a put is decided when a majority holds its
    entry (or not), and the store returns a Deferred of it (and so does what answers from it)."""
    if isinstance(result, Deferred):
        return result.addCallback(then)
    return then(result)


def decided_now(result: PutMessageResult | Deferred[PutMessageResult]) -> PutMessageResult | None:
    """The put's result if it is known already (always, but on a DLedger ledger before the commit), else None."""
    if type(result) is PutMessageResult:
        return result
    known: list[PutMessageResult] = []
    result.addCallback(lambda put: known.append(put) or put)  # type: ignore[union-attr]
    return known[0] if known else None


def put_own(
    store: MessageStore, msg: MessageExtBrokerInner, settle: Callable[[PutMessageResult], object]
) -> PutMessageResult | None:
    """Store one of the broker's own re-puts whose progress must not count it before it is stored: its result
    when known at once (always, but on a DLedger ledger once appended), else None and ``settle(result)`` once a
    majority holds the entry or it failed (leadership lost, no quorum in time). Apache's services wait for that
    commit on their threads; here the caller moves its progress past the put only in ``settle``."""
    result = store.put_message(msg)
    now = decided_now(result)
    if now is not None:
        return now
    result.addCallback(settle).addErrback(  # type: ignore[union-attr]
        lambda f: log.failure("settling the broker's own put to {topic} failed", f, topic=msg.topic)
    )
    return None


def put_now(store: MessageStore, msg: MessageExtBrokerInner) -> PutMessageResult:
    """Store one of the broker's own puts whose outcome moves no progress (a transaction's op marker, a half
    message moved to TRANS_CHECK_MAX_TIME_TOPIC: Apache only logs theirs) and say at once whether it is stored
    (:func:`stored_now`); progress that must wait for the commit uses :func:`put_own`."""
    return stored_now(store.put_message(msg), msg.topic)


def stored_now(result: PutMessageResult | Deferred[PutMessageResult], topic: str) -> PutMessageResult:
    """A put of the broker's own, as stored or not now. On a DLedger ledger an entry this leader appended counts
    as stored before a majority holds it; a failed commit is logged."""
    now = decided_now(result)
    if now is not None:
        return now
    result.addCallback(_log_uncommitted, topic)  # type: ignore[union-attr]
    return PutMessageResult(PutMessageStatus.PUT_OK)


def _log_uncommitted(result: PutMessageResult, topic: str) -> None:
    if not result.ok:
        log.warn(
            "the broker's own put to {topic} was appended but not committed: {status}",
            topic=topic,
            status=result.status.name,
        )


def look_message(store: MessageStore, phy_offset: int) -> MessageExt | None:
    """The message whose record starts at commitlog ``phy_offset``, or None."""
    record = store.look_message_by_offset(phy_offset)
    if record is None:
        return None
    try:
        return decode_record(record)
    except RecordError:
        return None


def packed_host(addr: str) -> bytes:
    """``ip:port`` as records store it."""
    host, _, port = addr.rpartition(":")
    return pack_host(host, int(port))


def inner_from_ext(
    ext: MessageExt,
    topic: str,
    queue_id: int,
    properties: dict[str, str],
    *,
    sys_flag: int | None = None,
    reconsume_times: int | None = None,
    prepared_transaction_offset: int = 0,
) -> MessageExtBrokerInner:
    """A copy of ``ext`` for ``topic``/``queue_id`` with ``properties`` (WAIT dropped: nobody waits on it)."""
    properties.pop(MessageConst.WAIT_STORE_MSG_OK, None)
    return MessageExtBrokerInner(
        topic=topic,
        queue_id=queue_id,
        flag=ext.flag,
        body=ext.body,
        properties=properties_to_string(properties),
        tags_code=tags_code(properties.get(MessageConst.TAGS)),
        sys_flag=ext.sys_flag if sys_flag is None else sys_flag,
        born_timestamp=ext.born_timestamp,
        born_host=packed_host(ext.born_host),
        store_host=packed_host(ext.store_host),
        reconsume_times=ext.reconsume_times if reconsume_times is None else reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset,
    )
