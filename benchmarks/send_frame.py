"""The C send-frame parser (gateway/remoting/send_frame.h) against the path a send takes today: ns per frame.

    python -m benchmarks.send_frame [--rounds 5]

"today": the C codec's ``feed`` (frame split, RemotingCommand and its extFields dict) then
``SendMessageRequestHeader.decode_v2``; "send_frame.h": ``parse_send_frame`` alone, with no Python object made
(timed by repeating it in C: a call parsing N times less a call parsing once, over N - 1). The frame is the
benchmark's Java 4.9.8 SEND_MESSAGE_V2 (benchmarks/wire.py), in its JSON header and in the ROCKETMQ one. The
two are timed alternately, round after round, and the best of each is shown.
"""

from __future__ import annotations

import argparse
import sys
import timeit

from gateway.remoting import codec
from gateway.remoting.codes import MAX_FRAME_LENGTH, SerializeType
from gateway.remoting.headers import SendMessageRequestHeader

from .wire import SendFrameBuilder

REPEAT = 10_000


def frames() -> dict[str, bytes]:
    """The Java producer's send frame, JSON and ROCKETMQ."""
    json_frame = SendFrameBuilder("TopicTest", "bench_pg", "TagA", b"x" * 128, 8).single("broker-a", 1)
    (cmd,) = codec._split_frames_py(bytearray(json_frame), MAX_FRAME_LENGTH)
    cmd.serialize_type = SerializeType.ROCKETMQ
    return {"JSON": json_frame, "ROCKETMQ": codec.encode(cmd)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    args = parser.parse_args()
    c = codec.accelerator(loaded=True)
    if c is None:
        print("the C codec is not built (python3 setup.py build_ext --inplace)", file=sys.stderr)
        return 1
    feed, decode, parse = c.feed, SendMessageRequestHeader.decode_v2, c.parse_send_frame
    for name, data in frames().items():
        if parse(data) is None:
            print(f"{name}: parse_send_frame declines the frame", file=sys.stderr)
            return 1

        def today(data: bytes = data) -> object:
            (cmd,) = feed(bytearray(data), MAX_FRAME_LENGTH)
            return decode(cmd.ext_fields)

        best_today = best_c = float("inf")
        for _ in range(args.rounds):
            best_today = min(best_today, timeit.timeit(today, number=REPEAT) / REPEAT * 1e9)
            many = timeit.timeit(lambda data=data: parse(data, REPEAT), number=20)
            once = timeit.timeit(lambda data=data: parse(data, 1), number=20)
            best_c = min(best_c, (many - once) / 20 / (REPEAT - 1) * 1e9)
        print(f"{name:8} {len(data)} bytes: today {best_today:6.0f} ns   send_frame.h {best_c:5.0f} ns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
