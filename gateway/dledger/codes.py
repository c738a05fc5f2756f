"""DLedger's request and response codes (``DLedgerRequestCode``, ``DLedgerResponseCode`` of dledger 0.3.1.2).

Request codes travel as the remoting command's code; response codes travel inside the JSON body (``code``),
the remoting response itself always says SUCCESS (200).
"""

from __future__ import annotations

from enum import IntEnum


class DLedgerRequestCode(IntEnum):
    """Remoting request codes of the DLedger RPCs; an unlisted code reads as UNKNOWN, as Java's ``valueOf``."""

    UNKNOWN = -1
    METADATA = 50000
    APPEND = 50001
    GET = 50002
    VOTE = 51001
    HEART_BEAT = 51002
    PULL = 51003
    PUSH = 51004
    LEADERSHIP_TRANSFER = 51005

    @classmethod
    def _missing_(cls, value: object) -> DLedgerRequestCode:
        return cls.UNKNOWN


class DLedgerResponseCode(IntEnum):
    """The ``code`` of a DLedger response body; an unlisted code reads as UNKNOWN, as Java's ``valueOf``."""

    UNKNOWN = -1
    SUCCESS = 200
    TIMEOUT = 300
    METADATA_ERROR = 301
    NETWORK_ERROR = 302
    UNSUPPORTED = 303
    UNKNOWN_GROUP = 400
    UNKNOWN_MEMBER = 401
    UNEXPECTED_MEMBER = 402
    EXPIRED_TERM = 403
    NOT_LEADER = 404
    NOT_FOLLOWER = 405
    INCONSISTENT_STATE = 406
    INCONSISTENT_TERM = 407
    INCONSISTENT_INDEX = 408
    INCONSISTENT_LEADER = 409
    INDEX_OUT_OF_RANGE = 410
    UNEXPECTED_ARGUMENT = 411
    REPEATED_REQUEST = 412
    REPEATED_PUSH = 413
    DISK_ERROR = 414
    DISK_FULL = 415
    TERM_NOT_READY = 416
    FALL_BEHIND_TOO_MUCH = 417
    TAKE_LEADERSHIP_FAILED = 418
    INDEX_LESS_THAN_LOCAL_BEGIN = 419
    REQUEST_WITH_EMPTY_BODYS = 420
    PUSH_REQUEST_IS_FULL = 421
    INTERNAL_ERROR = 500
    TERM_CHANGED = 501
    WAIT_QUORUM_ACK_TIMEOUT = 502
    LEADER_PENDING_FULL = 503
    ILLEGAL_MEMBER_STATE = 504
    LEADER_NOT_READY = 505
    LEADER_TRANSFERRING = 506

    @classmethod
    def _missing_(cls, value: object) -> DLedgerResponseCode:
        return cls.UNKNOWN


class DLedgerError(RuntimeError):
    """A DLedger operation refused or failed; ``code`` is what DLedger answers (in a response body, or to the
    broker's append)."""

    def __init__(self, code: DLedgerResponseCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
