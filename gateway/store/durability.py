"""When a stored message may be acknowledged: on disk (SYNC_FLUSH) and on a slave (SYNC_MASTER).

CommitLog.submitFlushRequest and submitReplicaRequest, combined as Apache combines them: the flush and the
replica are awaited together, and a replica failure wins over a flush failure in the status.
"""

from __future__ import annotations

from collections.abc import Callable

from .api import PutMessageStatus
from .flush import FlushService
from .ha.service import HAService

OnStatus = Callable[[PutMessageStatus], object]
# (a put's end offset, a callback) → its final status now, or None and the callback gets it later.
PutWaiter = Callable[[int, OnStatus], "PutMessageStatus | None"]

_PUT_OK = PutMessageStatus.PUT_OK
_FLUSH_DISK_TIMEOUT = PutMessageStatus.FLUSH_DISK_TIMEOUT
_FLUSH_SLAVE_TIMEOUT = PutMessageStatus.FLUSH_SLAVE_TIMEOUT
_SLAVE_NOT_AVAILABLE = PutMessageStatus.SLAVE_NOT_AVAILABLE


def put_waiter(flush: FlushService | None, replica: HAService | None) -> PutWaiter | None:
    """A function of a put's end offset and a callback that says the put's final status: at once if it is known,
    else None and the callback gets it later (no Deferred: SYNC_FLUSH waits once a send). None when every put is
    final at once.

    ``flush`` is given under SYNC_FLUSH, ``replica`` under SYNC_MASTER.
    """
    if flush is None and replica is None:
        return None

    def flushed(end: int, on_status: OnStatus) -> PutMessageStatus | None:
        assert flush is not None
        return flush.notify_flush(end, on_status, _PUT_OK, _FLUSH_DISK_TIMEOUT)

    def replicated(end: int, on_status: OnStatus) -> PutMessageStatus | None:
        assert replica is not None
        if not replica.is_slave_ok(end):
            return _SLAVE_NOT_AVAILABLE
        return replica.notify_replica(end, on_status, _PUT_OK, _FLUSH_SLAVE_TIMEOUT)

    if replica is None:
        return flushed
    if flush is None:
        return replicated

    def both(end: int, on_status: OnStatus) -> PutMessageStatus | None:
        statuses: list[PutMessageStatus | None] = [None, None]  # the flush's, the replica's

        def final() -> PutMessageStatus:
            flush_status, replica_status = statuses
            assert flush_status is not None and replica_status is not None
            return replica_status if replica_status is not _PUT_OK else flush_status

        def one_later(i: int) -> OnStatus:
            def settle(status: PutMessageStatus) -> None:
                statuses[i] = status
                if None not in statuses:
                    on_status(final())

            return settle

        # Neither calls back before both have returned: answers come from later reactor events.
        statuses[0] = flushed(end, one_later(0))
        statuses[1] = replicated(end, one_later(1))
        return None if None in statuses else final()

    return both
