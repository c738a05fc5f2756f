"""The bodies of DLedger's peer RPCs (``io.openmessaging.storage.dledger.protocol``), as fastjson writes them.

Each RPC is a remoting command whose code is a :class:`~.codes.DLedgerRequestCode` and whose body is
``JSON.toJSONBytes(request)``; the answer is a SUCCESS remoting response whose body is the response object, its
own ``code`` saying how it went. fastjson writes every getter, sorted by name, leaves nulls out, writes ``byte[]``
as base64 and enums by name. Each dataclass field names its JSON key and reader once (:func:`wire`); one pair
of routines converts both ways. Decoding is stricter than fastjson: a value of the wrong JSON type is refused, not
coerced, and unknown keys are ignored as fastjson does.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from enum import Enum, IntEnum
from typing import Any, ClassVar, Self

import orjson

from ..remoting import fastjson
from .codes import DLedgerRequestCode, DLedgerResponseCode
from .entry import DLedgerEntry, EntryError

# Peer and group ids are short names ("n0", "RaftNode00"); bound what a peer may make us hold and log.
ID_MAX_LENGTH = 255
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)


class DLedgerProtocolError(ValueError):
    """A body that is not the JSON of the expected DLedger request or response."""


def _int(bounds: tuple[int, int]) -> Callable[[Any], int]:
    def read(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not bounds[0] <= value <= bounds[1]:
            bits = 32 if bounds is _INT32 else 64
            raise ValueError(f"expected a {bits}-bit integer")
        return value

    return read


def _id(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("expected a string")
    if len(value) > ID_MAX_LENGTH or not value.isprintable():
        raise ValueError(f"expected a printable id of at most {ID_MAX_LENGTH} characters")
    return value


def _bytes(value: Any) -> bytes:
    if not isinstance(value, str):
        raise ValueError("expected a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error:
        raise ValueError("expected a base64 string") from None


def _entry(value: Any) -> DLedgerEntry:
    try:
        return DLedgerEntry.from_json(value)
    except EntryError as e:
        raise ValueError(str(e)) from None


def _list(item: Callable[[Any], Any]) -> Callable[[Any], list]:
    def read(value: Any) -> list:
        if not isinstance(value, list):
            raise ValueError("expected an array")
        return [item(v) for v in value]

    return read


def _peers(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError("expected an object")
    return {_id(k): _id(v) for k, v in value.items()}


def _enum(cls: type[Enum]) -> Callable[[Any], Enum]:
    def read(value: Any) -> Enum:
        if not isinstance(value, str) or value not in cls.__members__:
            raise ValueError(f"expected one of {', '.join(cls.__members__)}")
        return cls[value]

    return read


def _write(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, IntEnum):  # a DLedgerResponseCode given as ``code``
        return int(value)
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, list):
        return [_write(v) for v in value]
    return value


def _to_json(value: Any) -> Any:
    """orjson's fallback: a DLedger entry as fastjson writes it."""
    if isinstance(value, DLedgerEntry):
        return value.to_json()
    raise TypeError(f"not a DLedger body value: {type(value).__name__}")


# The readers, named as constants so the field declarations below stay plain.
INT32, INT64, ID, BYTES, PEERS, ENTRY = _int(_INT32), _int(_INT64), _id, _bytes, _peers, _entry
INT64_LIST, BYTES_LIST, ENTRIES = _list(INT64), _list(_bytes), _list(_entry)


def wire(name: str, read: Callable[[Any], Any]) -> dict[str, Any]:
    """A body field's metadata: its JSON key and the reader that checks and converts the JSON value."""
    return {"json": name, "read": read}


@dataclass(slots=True, kw_only=True)
class RequestOrResponse:
    """Fields every DLedger request and response carries."""

    group: str | None = field(default=None, metadata=wire("group", ID))
    remote_id: str | None = field(default=None, metadata=wire("remoteId", ID))
    local_id: str | None = field(default=None, metadata=wire("localId", ID))
    code: int = field(default=int(DLedgerResponseCode.SUCCESS), metadata=wire("code", INT32))
    leader_id: str | None = field(default=None, metadata=wire("leaderId", ID))
    term: int = field(default=-1, metadata=wire("term", INT64))

    # The JSON keys of this class's fields in fastjson's (sorted) order, built on first use.
    _KEYS: ClassVar[dict[type, list[tuple[str, str, Callable[[Any], Any]]]]] = {}

    @classmethod
    def _keys(cls) -> list[tuple[str, str, Callable[[Any], Any]]]:
        keys = RequestOrResponse._KEYS.get(cls)
        if keys is None:
            keys = sorted((f.metadata["json"], f.name, f.metadata["read"]) for f in fields(cls))
            RequestOrResponse._KEYS[cls] = keys
        return keys

    def _derived(self) -> dict[str, Any]:
        """Getter-only values fastjson also writes (none unless a subclass says so)."""
        return {}

    def to_json(self) -> dict[str, Any]:
        """The object fastjson writes for this body, keys sorted, nulls left out."""
        out = {key: _write(getattr(self, name)) for key, name, _ in self._keys()}
        out.update(self._derived())
        return {k: out[k] for k in sorted(out) if out[k] is not None}

    def encode(self) -> bytes:
        """The remoting body: ``JSON.toJSONBytes(this)``."""
        # Every key is a string and no value None: orjson writes what fastjson.dumps does, several times faster.
        return orjson.dumps(self.to_json(), default=_to_json, option=orjson.OPT_PASSTHROUGH_DATACLASS)

    @classmethod
    def from_json(cls, obj: Any) -> Self:
        """Read and check a parsed body; :class:`DLedgerProtocolError` names the first bad field."""
        if not isinstance(obj, dict):
            raise DLedgerProtocolError(f"{cls.__name__}: expected a JSON object")
        values = {}
        for key, name, read in cls._keys():
            value = obj.get(key)
            if value is None:
                continue
            try:
                values[name] = read(value)
            except ValueError as e:
                raise DLedgerProtocolError(f"{cls.__name__} field '{key}': {e}") from None
        return cls(**values)

    @classmethod
    def decode(cls, body: bytes | None) -> Self:
        """Read a remoting body; :class:`DLedgerProtocolError` when it is missing, not JSON or mistyped."""
        if not body:
            raise DLedgerProtocolError(f"{cls.__name__}: empty body")
        try:
            obj = fastjson.loads(body)
        except ValueError as e:
            raise DLedgerProtocolError(f"{cls.__name__}: not JSON ({e})") from None
        return cls.from_json(obj)


@dataclass(slots=True, kw_only=True)
class MetadataRequest(RequestOrResponse):
    """METADATA: ask a member for the group's peers."""


@dataclass(slots=True, kw_only=True)
class MetadataResponse(RequestOrResponse):
    """METADATA answer: peer id -> address."""

    peers: dict[str, str] | None = field(default=None, metadata=wire("peers", PEERS))


@dataclass(slots=True, kw_only=True)
class AppendEntryRequest(RequestOrResponse):
    """APPEND: a client's entry for the leader to replicate."""

    body: bytes | None = field(default=None, metadata=wire("body", BYTES))


@dataclass(slots=True, kw_only=True)
class BatchAppendEntryRequest(AppendEntryRequest):
    """APPEND of several entries at once (``batchMsgs``)."""

    batch_msgs: list[bytes] | None = field(default=None, metadata=wire("batchMsgs", BYTES_LIST))


@dataclass(slots=True, kw_only=True)
class AppendEntryResponse(RequestOrResponse):
    """APPEND answer: the entry's index and data-file position."""

    index: int = field(default=-1, metadata=wire("index", INT64))
    pos: int = field(default=-1, metadata=wire("pos", INT64))


@dataclass(slots=True, kw_only=True)
class GetEntriesRequest(RequestOrResponse):
    """GET: read entries from ``beginIndex``."""

    begin_index: int | None = field(default=None, metadata=wire("beginIndex", INT64))
    max_size: int = field(default=0, metadata=wire("maxSize", INT32))
    index_list: list[int] | None = field(default=None, metadata=wire("indexList", INT64_LIST))


@dataclass(slots=True, kw_only=True)
class GetEntriesResponse(RequestOrResponse):
    """GET answer."""

    entries: list[DLedgerEntry] = field(default_factory=list, metadata=wire("entries", ENTRIES))


class VoteResult(Enum):
    """``VoteResponse.RESULT``, written by name."""

    UNKNOWN = 0
    ACCEPT = 1
    REJECT_UNKNOWN_LEADER = 2
    REJECT_UNEXPECTED_LEADER = 3
    REJECT_EXPIRED_VOTE_TERM = 4
    REJECT_ALREADY_VOTED = 5
    REJECT_ALREADY_HAS_LEADER = 6
    REJECT_TERM_NOT_READY = 7
    REJECT_TERM_SMALL_THAN_LEDGER = 8
    REJECT_EXPIRED_LEDGER_TERM = 9
    REJECT_SMALL_LEDGER_END_INDEX = 10
    REJECT_TAKING_LEADERSHIP = 11


VOTE_RESULT = _enum(VoteResult)


@dataclass(slots=True, kw_only=True)
class VoteRequest(RequestOrResponse):
    """VOTE: a candidate asks for a vote in ``term``, showing the end of its ledger."""

    ledger_end_index: int = field(default=-1, metadata=wire("ledgerEndIndex", INT64))
    ledger_end_term: int = field(default=-1, metadata=wire("ledgerEndTerm", INT64))


@dataclass(slots=True, kw_only=True)
class VoteResponse(RequestOrResponse):
    """VOTE answer."""

    vote_result: VoteResult = field(default=VoteResult.UNKNOWN, metadata=wire("voteResult", VOTE_RESULT))


@dataclass(slots=True, kw_only=True)
class HeartBeatRequest(RequestOrResponse):
    """HEART_BEAT: the leader asserts its term."""


@dataclass(slots=True, kw_only=True)
class HeartBeatResponse(RequestOrResponse):
    """HEART_BEAT answer."""


@dataclass(slots=True, kw_only=True)
class PullEntriesRequest(RequestOrResponse):
    """PULL: a member asks for entries from ``beginIndex``."""

    node_id: str | None = field(default=None, metadata=wire("nodeId", ID))
    begin_index: int | None = field(default=None, metadata=wire("beginIndex", INT64))


@dataclass(slots=True, kw_only=True)
class PullEntriesResponse(RequestOrResponse):
    """PULL answer."""

    entries: list[DLedgerEntry] = field(default_factory=list, metadata=wire("entries", ENTRIES))


class PushType(Enum):
    """``PushEntryRequest.Type``, written by name."""

    APPEND = 0
    COMMIT = 1
    COMPARE = 2
    TRUNCATE = 3


PUSH_TYPE = _enum(PushType)


@dataclass(slots=True, kw_only=True)
class PushEntryRequest(RequestOrResponse):
    """PUSH: the leader's append/commit/compare/truncate to a follower, with its commit index."""

    commit_index: int = field(default=-1, metadata=wire("commitIndex", INT64))
    type: PushType = field(default=PushType.APPEND, metadata=wire("type", PUSH_TYPE))
    entry: DLedgerEntry | None = field(default=None, metadata=wire("entry", ENTRY))
    batch_entry: list[DLedgerEntry] = field(default_factory=list, metadata=wire("batchEntry", ENTRIES))

    def _derived(self) -> dict[str, Any]:
        # Java's getters without setters: written, never read back (a follower sees totalSize 0 too).
        first = self.batch_entry[0] if self.batch_entry else self.entry
        last = self.batch_entry[-1] if self.batch_entry else self.entry
        return {
            "batch": bool(self.batch_entry),
            "count": len(self.batch_entry) if self.batch_entry else int(self.entry is not None),
            "firstEntryIndex": first.index if first is not None else -1,
            "lastEntryIndex": last.index if last is not None else -1,
            "totalSize": sum(e.size for e in self.batch_entry),
        }


@dataclass(slots=True, kw_only=True)
class PushEntryResponse(RequestOrResponse):
    """PUSH answer: the follower's view of the index range."""

    index: int | None = field(default=None, metadata=wire("index", INT64))
    begin_index: int = field(default=0, metadata=wire("beginIndex", INT64))
    end_index: int = field(default=0, metadata=wire("endIndex", INT64))
    count: int = field(default=0, metadata=wire("count", INT32))


@dataclass(slots=True, kw_only=True)
class LeadershipTransferRequest(RequestOrResponse):
    """LEADERSHIP_TRANSFER: hand leadership from ``transferId`` to ``transfereeId``."""

    transfer_id: str | None = field(default=None, metadata=wire("transferId", ID))
    transferee_id: str | None = field(default=None, metadata=wire("transfereeId", ID))
    take_leadership_ledger_index: int = field(default=0, metadata=wire("takeLeadershipLedgerIndex", INT64))


@dataclass(slots=True, kw_only=True)
class LeadershipTransferResponse(RequestOrResponse):
    """LEADERSHIP_TRANSFER answer."""


# What each request code carries and is answered with (DLedgerRpcNettyService.processRequest).
BODIES: dict[DLedgerRequestCode, tuple[type[RequestOrResponse], type[RequestOrResponse]]] = {
    DLedgerRequestCode.METADATA: (MetadataRequest, MetadataResponse),
    DLedgerRequestCode.APPEND: (AppendEntryRequest, AppendEntryResponse),
    DLedgerRequestCode.GET: (GetEntriesRequest, GetEntriesResponse),
    DLedgerRequestCode.VOTE: (VoteRequest, VoteResponse),
    DLedgerRequestCode.HEART_BEAT: (HeartBeatRequest, HeartBeatResponse),
    DLedgerRequestCode.PULL: (PullEntriesRequest, PullEntriesResponse),
    DLedgerRequestCode.PUSH: (PushEntryRequest, PushEntryResponse),
    DLedgerRequestCode.LEADERSHIP_TRANSFER: (LeadershipTransferRequest, LeadershipTransferResponse),
}
