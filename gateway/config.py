"""Configuration files with RocketMQ's own keys (broker.conf, namesrv.properties).

Config dataclasses name their attributes exactly as RocketMQ's keys (``brokerName``,
``listenPort``...), so one generic routine spreads a properties file over them. A bad value
raises :class:`ConfigError` naming the key and the file; unknown keys are reported, not fatal,
as Java ignores them too.

Properties text is read as ``java.util.Properties.load`` reads it and written as
``Properties.store`` escapes it, so a value holding a newline, ``=`` or ``\\`` can never become a
second key in a file we write (the CVE-2023-37582 class).
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

from twisted.logger import Logger

from gateway.remoting.codes import ResponseCode

log = Logger()


class ConfigError(Exception):
    """A configuration value that cannot be used; the message names the key and the file."""


# -- reading (Properties.load)

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
# Properties' blanks are only these three (str.strip() would take more); lines end at \r, \n, \r\n.
_BLANKS = re.compile(r"[ \t\f]*")
_BLANK_LINES = re.compile(r"[ \t\f\r\n]*")
_EOL = re.compile(r"[\r\n]")
# A key runs to the first unescaped '=', ':' or blank; escapes come in pairs.
_KEY = re.compile(r"(?:[^\\=: \t\f]|\\.)*", re.DOTALL)
_SEPARATOR = re.compile(r"[ \t\f]*(?:[=:][ \t\f]*)?")
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|(u)|(.))", re.DOTALL)
_SURROGATE = re.compile("[\ud800-\udfff]")


def parse_properties(text: str) -> dict[str, str]:
    """Parse ``.properties`` text exactly as Java's ``Properties.load`` does.

    Lines end at ``\\n``, ``\\r`` or ``\\r\\n`` only; ``#``/``!`` start a comment line; an odd number
    of trailing backslashes continues the line; the key ends at the first unescaped ``=``, ``:`` or
    blank; the value keeps its trailing blanks. Raises :class:`ConfigError` for a malformed
    ``\\uXXXX`` escape or an unpaired UTF-16 surrogate.
    """
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        key_end = _match_end(_KEY, line, 0)
        value_start = _match_end(_SEPARATOR, line, key_end)
        props[_load_convert(line[:key_end])] = _load_convert(line[value_start:])
    return props


def _logical_lines(text: str) -> Iterator[str]:
    """Java's LineReader (9 and later): logical lines, without comments, blank lines and continuations."""
    pos, end = 0, len(text)
    parts: list[str] = []
    size = 0
    continued = False
    while True:
        # Blanks are skipped; empty lines too, except right after a continuation.
        pos = _match_end(_BLANKS if continued else _BLANK_LINES, text, pos)
        if pos == end:
            if size:
                yield "".join(parts)
            return
        continued = False
        if size == 0 and text[pos] in "#!":
            pos = min(_line_end(text, pos) + 1, end)
            continue
        stop = _line_end(text, pos)
        segment = text[pos:stop]
        parts.append(segment)
        size += len(segment)
        odd = (len(segment) - len(segment.rstrip("\\"))) % 2 == 1
        if stop >= end - 1:
            # The text ends in (or right after) this line: a trailing odd backslash is dropped.
            if size:
                line = "".join(parts)
                yield line[:-1] if odd else line
            return
        pos = stop + 1
        if size == 0:
            continue
        if not odd:
            yield "".join(parts)
            parts, size = [], 0
            continue
        # Continued: the backslash goes, and so does the \n of a \r\n.
        parts[-1] = segment[:-1]
        size -= 1
        if text[stop] == "\r" and text[pos] == "\n":
            pos += 1
        continued = True


def _match_end(pattern: re.Pattern[str], text: str, pos: int) -> int:
    """End of ``pattern`` (which also matches nothing) at ``pos``."""
    m = pattern.match(text, pos)
    assert m is not None
    return m.end()


def _line_end(text: str, pos: int) -> int:
    """Index of the first \\r or \\n at or after ``pos`` (the text's length if none)."""
    m = _EOL.search(text, pos)
    return m.start() if m else len(text)


def _load_convert(s: str) -> str:
    """Unescape one key or value (loadConvert); astral characters arrive as surrogate pairs."""
    if "\\" in s:
        s = _ESCAPE.sub(_unescape_one, s)
    if _SURROGATE.search(s):
        try:
            s = s.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
        except UnicodeDecodeError:
            raise ConfigError("Malformed \\uxxxx encoding: unpaired surrogate.") from None
    return s


def _unescape_one(m: re.Match[str]) -> str:
    if m.group(1) is not None:
        return chr(int(m.group(1), 16))
    if m.group(2) is not None:
        raise ConfigError("Malformed \\uxxxx encoding.")
    c = m.group(3)
    return _ESCAPES.get(c, c)


def load_properties(path: str | Path) -> dict[str, str]:
    """Read a properties file (UTF-8, or ISO-8859-1 as Java reads it); a missing file is a ConfigError naming it."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read config file {p}: {e.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("iso-8859-1")
    try:
        return parse_properties(text)
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None


# -- writing (Properties.store)

# saveConvert: '\', the separators, the comment starts and everything outside printable ASCII.
_SAVE_VALUE = re.compile(r"[^\x20-\x7e]|[\\=:#!]")
_SAVE_KEY = re.compile(r"[^\x21-\x7e]|[\\=:#!]")
_SAVE_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f", " ": "\\ "}


def _save_one(m: re.Match[str]) -> str:
    c = m.group()
    if c in _SAVE_NAMED:
        return _SAVE_NAMED[c]
    if c < " " or c > "~":
        # \uXXXX per UTF-16 unit: an astral character becomes its surrogate pair, as in Java.
        units = c.encode("utf-16-be", "surrogatepass")
        return "".join(f"\\u{units[i]:02X}{units[i + 1]:02X}" for i in range(0, len(units), 2))
    return "\\" + c


def format_properties(props: Mapping[str, str]) -> str:
    """``key=value`` lines escaped as ``Properties.store(OutputStream)`` escapes them, in the order given.

    Keys escape every space, values only a leading one; the output is pure ASCII, one line per key,
    and :func:`parse_properties` reads back exactly ``props``.
    """
    lines = []
    for key, value in props.items():
        v = _SAVE_VALUE.sub(_save_one, value)
        if v.startswith(" "):
            v = "\\" + v
        lines.append(f"{_SAVE_KEY.sub(_save_one, key)}={v}\n")
    return "".join(lines)


def properties_to_string(props: Mapping[str, str]) -> str:
    """Plain ``key=value`` lines, sorted (MixAll.properties2String): the GET_*_CONFIG answer, never a file."""
    return "".join(f"{k}={v}\n" for k, v in sorted(props.items()))


# -- applying to config dataclasses


def _field_type(tp: Any) -> type:
    if isinstance(tp, str):
        tp = {"int": int, "bool": bool, "str": str, "float": float}.get(tp.split("|")[0].strip(), str)
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = args[0] if args else str
    return tp if tp in (int, bool, str, float) else str


# Java's String.trim(): every character up to U+0020.
_JAVA_TRIM = "".join(map(chr, range(0x21)))


def convert(value: str, tp: type, key: str, source: str) -> Any:
    """Convert one property value to ``tp`` as Java's setters would, naming key and file on error.

    Strings are trimmed as MixAll.properties2Object trims them.
    """
    v = value.strip()
    try:
        if tp is bool:
            if v.lower() not in ("true", "false"):
                raise ValueError(v)
            return v.lower() == "true"
        if tp is int:
            return int(v)
        if tp is float:
            return float(v)
    except ValueError:
        raise ConfigError(f"{source}: key {key}: {value!r} is not a valid {tp.__name__}") from None
    return value.strip(_JAVA_TRIM)


# -- allowed values

# A rule gives what is wrong with a converted value, or None when it may be used.
Rule = Callable[[Any], "str | None"]


def one_of(*allowed: str, ignore_case: bool = False, note: str = "") -> Rule:
    """An enumerated key: one of ``allowed`` (as Java's ``Enum.valueOf``: case matters unless ``ignore_case``)."""

    def problem(value: str) -> str | None:
        if (value.upper() if ignore_case else value) in allowed:
            return None
        return f"{value!r} is not one of {', '.join(allowed)}{note}"

    return problem


def at_least(low: float, unit: str = "") -> Rule:
    """A ranged key with no upper bound."""
    return between(low, None, unit)


def between(low: float, high: float | None, unit: str = "") -> Rule:
    """A ranged key: ``low`` <= value <= ``high`` (no bound when None); ``unit`` names what it counts."""
    allowed = f"from {low} to {high}" if high is not None else f"at least {low}"
    suffix = f" {unit}" if unit else ""

    def problem(value: float) -> str | None:
        if value < low or (high is not None and value > high):
            return f"{value!r} is not {allowed}{suffix}"
        return None

    return problem


def _hours_of_day(value: str) -> str | None:
    # UtilAll.isItTimeToDo: Integer.parseInt of each ';'-separated item, compared with the hour of day.
    items = value.split(";")
    if all(item.isascii() and item.isdigit() and int(item) <= 23 for item in items):
        return None
    return f"{value!r} is not hours of the day from 0 to 23, ';'-separated (e.g. 04 or 04;16)"


_DELAY_LEVEL = re.compile(r"[0-9]+[smhd]")


def _delay_levels(value: str) -> str | None:
    # ScheduleMessageService.parseDelayLevel: blank-separated numbers, each with a unit s, m, h or d.
    if value.split() and all(_DELAY_LEVEL.fullmatch(item) for item in value.split()):
        return None
    return f"{value!r} is not blank-separated delays with a unit s, m, h or d (e.g. 1s 5s 10m 2h)"


_PORT = between(0, 65535, "(0: any free port)")
_POSITIVE_MS = at_least(1, "ms")
_PERCENT = between(0, 100, "percent")
_FRACTION = between(0.0, 1.0)

# Every enumerated or ranged key of broker.conf, namesrv.properties, controller.properties and proxy.properties,
# whichever config declares it: a value from a file, the command line or a remote update outside these stops with
# the key, the source and what is allowed. Java ignores such values silently (the setter throws, properties2Object
# drops it).
KEY_RULES: dict[str, Rule] = {
    # enumerated
    "brokerRole": one_of("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"),
    "flushDiskType": one_of("ASYNC_FLUSH", "SYNC_FLUSH"),
    "defaultMessageRequestMode": one_of("PULL", "POP"),
    "metricsExporterType": one_of("DISABLE", "PROM", "OTLP_GRPC", "LOG", ignore_case=True),
    "metricGrpcExporterTimeOutInMills": _POSITIVE_MS,
    "metricGrpcExporterIntervalInMills": _POSITIVE_MS,
    "metricLoggingExporterIntervalInMills": _POSITIVE_MS,
    "deleteWhen": _hours_of_day,
    "messageDelayLevel": _delay_levels,
    # listeners
    "listenPort": _PORT,
    "grpcServerPort": _PORT,
    "grpcMaxConnections": at_least(1),
    # ProxyConfig (gateway.proxy.config)
    "defaultInvisibleTimeMills": _POSITIVE_MS,
    "renewSchedulePeriodMillis": _POSITIVE_MS,
    "renewAheadTimeMillis": at_least(0, "ms"),
    "maxRenewRetryTimes": at_least(1),
    "renewMaxTimeMillis": at_least(0, "ms"),
    "invisibleTimeMillisWhenClear": at_least(0, "ms"),
    "maxReceiptHandlesPerClient": at_least(0),
    "haListenPort": _PORT,
    "metricsPromExporterPort": _PORT,
    # BrokerConfig
    "brokerId": at_least(0),
    "brokerPermission": between(0, 7, "(PERM_READ 4 | PERM_WRITE 2 | PERM_INHERIT 1)"),
    "defaultTopicQueueNums": at_least(1),
    "maxTopicQueueNums": at_least(1),
    "registerNameServerPeriod": _POSITIVE_MS,
    "registerNameServerPeriodMin": between(1000, 60000, "ms"),
    "registerBrokerTimeoutMills": _POSITIVE_MS,
    "shortPollingTimeMills": _POSITIVE_MS,
    "flushConsumerOffsetInterval": _POSITIVE_MS,
    "channelNotActiveInterval": _POSITIVE_MS,
    "transactionTimeOut": at_least(0, "ms"),
    "transactionCheckMax": at_least(0),
    "transactionCheckInterval": _POSITIVE_MS,
    "loadBalancePollNameServerInterval": _POSITIVE_MS,
    "flushDelayOffsetInterval": _POSITIVE_MS,
    "timerMaxDelaySec": at_least(1, "s"),
    # POP (gateway.broker.pop); revive queue 999 stands for orderly pops.
    "reviveQueueNum": between(1, 998),
    "reviveInterval": _POSITIVE_MS,
    "reviveMaxSlow": at_least(1),
    "popFromRetryProbability": between(0, 100),
    "popPollingSize": at_least(1),
    "popPollingMapSize": at_least(1),
    "maxPopPollingSize": at_least(1),
    "rebalanceLockMaxLiveTime": _POSITIVE_MS,
    "remotingMaxBufferedBytes": at_least(1, "bytes"),
    "haSendHeartbeatInterval": _POSITIVE_MS,
    "haHousekeepingInterval": _POSITIVE_MS,
    "haTransferBatchSize": at_least(1, "bytes"),
    "brokerHeartbeatInterval": _POSITIVE_MS,
    "controllerHeartBeatTimeoutMills": _POSITIVE_MS,
    "checkSyncStateSetPeriod": _POSITIVE_MS,
    "syncControllerMetadataPeriod": _POSITIVE_MS,
    "haMaxTimeSlaveNotCatchup": _POSITIVE_MS,
    "inSyncReplicas": at_least(1),
    "minInSyncReplicas": at_least(1),
    "slaveTimeout": _POSITIVE_MS,
    "haMaxGapNotInSync": at_least(0, "bytes"),
    "haSlaveFallbehindMax": at_least(0, "bytes"),
    # DLedgerConfig (the broker's DLedger mode)
    "heartBeatTimeIntervalMs": _POSITIVE_MS,
    "maxHeartBeatLeak": at_least(1),
    "minVoteIntervalMs": _POSITIVE_MS,
    "maxVoteIntervalMs": _POSITIVE_MS,
    "maxPendingRequestsNum": at_least(1),
    "maxWaitAckTimeMs": _POSITIVE_MS,
    "maxPushTimeOutMs": _POSITIVE_MS,
    "peerPushThrottlePoint": at_least(1, "bytes"),
    "peerPushQuota": at_least(1, "bytes"),
    "flushFileInterval": _POSITIVE_MS,
    "checkPointInterval": _POSITIVE_MS,
    "maxLeadershipTransferWaitIndex": at_least(0),
    "minTakeLeadershipVoteIntervalMs": _POSITIVE_MS,
    "maxTakeLeadershipVoteIntervalMs": _POSITIVE_MS,
    "leadershipTransferWaitTimeout": _POSITIVE_MS,
    "maxBatchPushSize": at_least(1, "bytes"),
    # MessageStoreConfig
    "mappedFileSizeCommitLog": at_least(1, "bytes"),
    "mappedFileSizeConsumeQueue": at_least(20, "bytes"),
    "flushIntervalCommitLog": _POSITIVE_MS,
    "flushCommitLogLeastPages": at_least(0, "pages"),
    "flushCommitLogThoroughInterval": at_least(0, "ms"),
    "syncFlushTimeout": _POSITIVE_MS,
    "flushIntervalConsumeQueue": _POSITIVE_MS,
    "flushConsumeQueueLeastPages": at_least(0, "pages"),
    "flushConsumeQueueThoroughInterval": at_least(0, "ms"),
    "maxMessageSize": at_least(1, "bytes"),
    "maxTransferBytesOnMessageInMemory": at_least(1, "bytes"),
    "maxTransferCountOnMessageInMemory": at_least(1),
    "maxTransferBytesOnMessageInDisk": at_least(1, "bytes"),
    "maxTransferCountOnMessageInDisk": at_least(1),
    "accessMessageInMemoryMaxRatio": _PERCENT,
    "maxHashSlotNum": at_least(1),
    "maxIndexNum": at_least(1),
    "maxMsgsNumBatch": at_least(1),
    "defaultQueryMaxNum": at_least(1),
    "fileReservedTime": at_least(0, "hours"),
    "diskMaxUsedSpaceRatio": _PERCENT,
    "cleanResourceInterval": _POSITIVE_MS,
    "diskSpaceWarningLevelRatio": _FRACTION,
    "diskSpaceCleanForciblyRatio": _FRACTION,
    "maxOpenMappedFiles": at_least(0, "(0: no bound)"),
    # NamesrvConfig, ControllerConfig
    "scanNotActiveBrokerInterval": _POSITIVE_MS,
    "brokerChannelExpiredTime": _POSITIVE_MS,
}


def checked(key: str, value: Any, source: str) -> Any:
    """``value`` if :data:`KEY_RULES` allows it for ``key``, else a ConfigError naming the key and the source."""
    rule = KEY_RULES.get(key)
    problem = rule(value) if rule is not None else None
    if problem is not None:
        raise ConfigError(f"{source}: key {key}: {problem}")
    return value


def apply_properties(targets: list[Any], props: dict[str, str], source: str, ignore: tuple[str, ...] = ()) -> list[str]:
    """Set every known key on the config objects that declare it; return the unknown keys.

    A value that does not convert, or that :data:`KEY_RULES` does not allow, raises :class:`ConfigError`.
    ``ignore`` lists key prefixes that other parts of the program read (e.g. ``tls.``).
    """
    hints = [(t, typing.get_type_hints(type(t))) for t in targets]
    known = {f.name for target in targets for f in fields(target)}
    unknown = []
    for key, value in props.items():
        hit = False
        for target, th in hints:
            if key in {f.name for f in fields(target)}:
                setattr(target, key, checked(key, convert(value, _field_type(th.get(key, str)), key, source), source))
                hit = True
        if not hit and not key.startswith(ignore):
            unknown.append(key)
    for key in unknown:
        near = difflib.get_close_matches(key, known, n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        log.warn("{source}: unknown key {key} ignored{hint}", source=source, key=key, hint=hint)
    return unknown


def config_properties(*configs: Any) -> dict[str, str]:
    """Every setting of the config dataclasses as Java's MixAll.object2Properties gives it: strings, nulls left out."""
    out = {}
    for config in configs:
        for key, value in asdict(config).items():
            if value is not None:
                out[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


# Keys Java takes as -D system properties (TLS, ACL file locations); our config files may carry them.
SYSTEM_PROPERTY_PREFIXES = ("tls.", "rocketmq.")


def system_properties(path: str | Path | None) -> dict[str, str]:
    """The ``tls.*`` and ``rocketmq.*`` keys of a config file (none without a file)."""
    if path is None:
        return {}
    # Trimmed as the settings they stand for would be.
    return {k: v.strip(_JAVA_TRIM) for k, v in load_properties(path).items() if k.startswith(SYSTEM_PROPERTY_PREFIXES)}


# -- UPDATE_BROKER_CONFIG / UPDATE_NAMESRV_CONFIG

BLACK_LIST_REMARK = "Can not update config in black list."
# Every setting of a broker fits in a few KiB; parsing costs Python work per line, so bound what a client can ask.
MAX_UPDATE_BODY = 16 * 1024


class UpdateRefused(ConfigError):
    """A remote config update refused as a whole: ``code`` and ``remark`` are the response's."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def black_listed(key: str, fixed: Collection[str], config_black_list: str) -> bool:
    """Whether a remote update may not change ``key``: it is one of ``fixed``, is listed in the ';'-separated
    ``configBlackList`` setting, or names a file, a directory or a program, or is a -D system property
    (``tls.*`` would downgrade TLS at the next start, ``rocketmq.*`` moves the ACL file)."""
    lower = key.lower()
    return (
        key in fixed
        or key in {k.strip() for k in config_black_list.split(";")}
        or key.startswith(SYSTEM_PROPERTY_PREFIXES)
        or "path" in lower
        or lower.endswith(("dir", "file", "home"))
    )


def remote_update(body: bytes, configs: list[Any], refused: Callable[[str], bool], source: str) -> dict[str, str]:
    """Apply an UPDATE_*_CONFIG properties body to ``configs`` all at once; return the keys set, as set.

    Refusals (:class:`UpdateRefused`) change nothing: an unreadable body or one over
    :data:`MAX_UPDATE_BODY` is SYSTEM_ERROR (Java's "string2Properties error"), any key ``refused``
    (the black list) NO_PERMISSION with Apache's remark, a key no config declares INVALID_PARAMETER
    naming it (Java ignores those silently; we never store one, so it cannot be read later as
    something else), a bad value SYSTEM_ERROR naming the key.
    """
    if len(body) > MAX_UPDATE_BODY:
        raise UpdateRefused(ResponseCode.SYSTEM_ERROR, f"config body over {MAX_UPDATE_BODY} bytes")
    try:
        props = parse_properties(body.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UpdateRefused(ResponseCode.SYSTEM_ERROR, f"UnsupportedEncodingException {e}") from None
    except ConfigError:
        raise UpdateRefused(ResponseCode.SYSTEM_ERROR, "string2Properties error") from None
    if any(refused(key) for key in props):
        raise UpdateRefused(ResponseCode.NO_PERMISSION, BLACK_LIST_REMARK)
    known = {f.name for config in configs for f in fields(config)}
    unknown = sorted(props.keys() - known)
    if unknown:
        raise UpdateRefused(
            ResponseCode.INVALID_PARAMETER, f"Can not update unknown config: {', '.join(map(repr, unknown))}."
        )
    _update_in_place(configs, props, source)
    set_now = config_properties(*configs)
    return {key: set_now[key] for key in props if key in set_now}


def _update_in_place(configs: list[Any], props: dict[str, str], source: str) -> None:
    """Apply ``props`` to ``configs``; a bad value raises :class:`UpdateRefused` and changes nothing."""
    # Convert on copies so one bad value leaves the running configs untouched.
    candidates = [replace(c) for c in configs]
    try:
        apply_properties(candidates, props, source)
    except ConfigError as e:
        raise UpdateRefused(ResponseCode.SYSTEM_ERROR, str(e)) from None
    for config, candidate in zip(configs, candidates, strict=True):
        for f in fields(config):
            setattr(config, f.name, getattr(candidate, f.name))
