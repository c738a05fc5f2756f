"""Client-side message ids (MessageClientIDSetter) and the local address clients announce."""

from __future__ import annotations

import itertools
import os
import random
import socket
import struct
import time
from datetime import datetime

from gateway.remoting.message import Message, MessageConst


def local_ip() -> str:
    """This host's outbound IPv4 address, else loopback (RemotingUtil.getLocalAddress)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            # connect() on UDP sends nothing; it only picks the interface a packet would leave by.
            s.connect(("10.255.255.255", 1))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


# IP, pid (short), then Java's class-loader hash code, which is random per JVM: random per process here.
_FIX = socket.inet_aton(local_ip()) + struct.pack(">Hi", os.getpid() & 0xFFFF, random.getrandbits(31))
_COUNTER = itertools.count()
_TAIL = struct.Struct(">iH")
_month_start_ms = 0
_next_month_start_ms = 0


def _set_month_window(now_ms: int) -> None:
    global _month_start_ms, _next_month_start_ms
    start = datetime.fromtimestamp(now_ms / 1000).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    following = start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
    _month_start_ms = int(start.timestamp() * 1000)
    _next_month_start_ms = int(following.timestamp() * 1000)


def create_uniq_id() -> str:
    """A new UNIQ_KEY: fixed prefix, ms since the start of the month (int32), a 16-bit counter; uppercase hex."""
    now = int(time.time() * 1000)
    if now >= _next_month_start_ms:
        _set_month_window(now)
    diff = (now - _month_start_ms) & 0xFFFFFFFF
    tail = _TAIL.pack(diff - (1 << 32) if diff & 0x80000000 else diff, next(_COUNTER) & 0xFFFF)
    return (_FIX + tail).hex().upper()


def set_uniq_id(msg: Message) -> str:
    """Give ``msg`` a UNIQ_KEY unless it has one (retries keep theirs); returns it."""
    key = MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX
    uniq = msg.properties.get(key)
    if uniq is None:
        uniq = msg.properties[key] = create_uniq_id()
    return uniq
