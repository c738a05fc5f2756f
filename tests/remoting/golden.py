"""The golden wire samples recorded from Apache RocketMQ 4.9.8 peers (``samples/README.md`` says where from).

The frames are data captured from Java and C++ peers, kept as ``xxd`` dumps; tests decode them and compare
our encoder's output with them. Nothing here is produced by our own code.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

GOLDEN = Path(__file__).parent / "samples"
SESSION = GOLDEN / "java-4.9.8-session.decoded.txt"

FRAME_NAMES = sorted(p.stem for p in GOLDEN.glob("*.hex"))


def frame(name: str) -> bytes:
    """Raw frame bytes, 4-byte length prefix included, from an ``xxd`` dump."""
    out = bytearray()
    for line in (GOLDEN / f"{name}.hex").read_text(encoding="ascii").splitlines():
        # "00000010: 3130 352c ...  105,..." -- offset, 8 groups of hex (39 columns), then the text column.
        offset, _, rest = line.partition(": ")
        assert int(offset, 16) == len(out), f"{name}: dump offset {offset} out of sequence"
        out += bytes.fromhex(rest[:39])
    return bytes(out)


def split_frame(data: bytes) -> tuple[int, bytes, bytes]:
    """(serialize type, header bytes, body bytes) of one raw frame, parsed by hand from the layout."""
    length, info = struct.unpack_from(">ii", data)
    assert length == len(data) - 4
    hlen = info & 0xFFFFFF
    return info >> 24, data[8 : 8 + hlen], data[8 + hlen :]


_LINE = re.compile(r"(\S+) (REQ|RESP) code=(-?\d+) opaque=(-?\d+) len=(\d+) stype=(\d) hdr=(.*)$")
_BODY = re.compile(r"    body\[(\d+)\]=")


def session_headers() -> list[tuple[str, int, int, int, bytes, int]]:
    """(direction, code, opaque, frame length, header JSON bytes, body length) of every frame in the session."""
    lines = SESSION.read_text(encoding="utf-8").splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.startswith("    body"):
            continue
        m = _LINE.match(line)
        assert m is not None, line
        body_len = 0
        if i + 1 < len(lines):
            b = _BODY.match(lines[i + 1])
            if b is not None:
                body_len = int(b.group(1))
        out.append((m.group(2), int(m.group(3)), int(m.group(4)), int(m.group(5)), m.group(7).encode(), body_len))
    return out
