"""When a stored message may be acknowledged: on disk (SYNC_FLUSH) and on a slave (SYNC_MASTER).

CommitLog.submitFlushRequest and submitReplicaRequest, combined as Apache combines them: the flush and the
replica are awaited together, and a replica failure wins over a flush failure in the status.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet import defer

from .api import PutMessageStatus
from .flush import FlushService
from .ha.service import HAService

PutWaiter = Callable[[int], defer.Deferred[PutMessageStatus]]


def put_waiter(flush: FlushService | None, replica: HAService | None) -> PutWaiter | None:
    """A function from a put's end offset to its final status, or None when every put is final at once.

    ``flush`` is given under SYNC_FLUSH, ``replica`` under SYNC_MASTER.
    """
    if flush is None and replica is None:
        return None

    def flushed(end: int) -> defer.Deferred[PutMessageStatus]:
        assert flush is not None
        return flush.wait_for_flush(end, PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT)

    def replicated(end: int) -> defer.Deferred[PutMessageStatus]:
        assert replica is not None
        if not replica.is_slave_ok(end):
            return defer.succeed(PutMessageStatus.SLAVE_NOT_AVAILABLE)
        return replica.wait_for_replica(end, PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_SLAVE_TIMEOUT)

    if replica is None:
        return flushed
    if flush is None:
        return replicated

    def both(end: int) -> defer.Deferred[PutMessageStatus]:
        d = defer.gatherResults([flushed(end), replicated(end)])
        return d.addCallback(lambda s: s[1] if s[1] is not PutMessageStatus.PUT_OK else s[0])

    return both
