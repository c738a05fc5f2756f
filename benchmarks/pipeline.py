"""CPU per send of the broker's request path alone: SEND_MESSAGE_V2 frames, as a Java 4.9.8 producer writes
them, fed straight to a broker protocol in this process (no sockets, no reactor loop, no generator sharing
the machine). What it measures is the Python work a send costs from frame bytes to answer bytes, which the
socket benchmarks cannot separate from the VM's noise; small changes to the send path are judged by it.

    python -m benchmarks.pipeline                      # 100k sends, 5 runs, ASYNC_FLUSH store in a temp dir
    python -m benchmarks.pipeline --runs 9 --set messageIndexEnable=false
    python -m benchmarks.pipeline --serialize rocketmq  # headers as Apache's benchmark Producer sends them
    python -m benchmarks.pipeline --set flushDiskType=SYNC_FLUSH  # each read's sends released as one fsync would
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from twisted.internet import reactor
from twisted.internet.testing import StringTransport

from gateway.broker.config import load_broker_config
from gateway.broker.controller import BrokerController
from gateway.remoting.codec import FrameDecoder, encode
from gateway.remoting.codes import SerializeType
from gateway.remoting.headers import CreateTopicRequestHeader

from .wire import SendFrameBuilder, java_request


def _as_rocketmq(frames: bytes) -> bytes:
    """The same frames with ROCKETMQ binary headers (rocketmq.serialize.type=ROCKETMQ)."""
    out = []
    for cmd in FrameDecoder().feed(frames):
        cmd.serialize_type = SerializeType.ROCKETMQ
        out.append(encode(cmd))
    return b"".join(out)


def run_once(sends: int, settings: dict[str, str], serialize: str = "json", queues: int = 8, batch: int = 16) -> float:
    """µs of process CPU per send, over ``sends`` sends in batches of ``batch`` frames a read."""
    with tempfile.TemporaryDirectory() as root:
        cfg, store_cfg = load_broker_config(
            None,
            {"bindAddress": "127.0.0.1", "brokerIP1": "127.0.0.1", "listenPort": "0", "storePathRootDir": root,
             "namesrvAddr": "", **settings},
        )  # fmt: skip
        broker = BrokerController(cfg, store_cfg, reactor)
        broker.startService()
        try:
            protocol = broker.factory.buildProtocol(None)
            transport = StringTransport()
            protocol.makeConnection(transport)
            create = CreateTopicRequestHeader("Pipeline", "TBW102", queues, queues, 6, "SINGLE_TAG")
            protocol.dataReceived(encode(java_request(17, create.encode())))
            builder = SendFrameBuilder("Pipeline", "pipeline_pg", "TagA", b"x" * 1024, queues)
            template = builder.template(cfg.brokerName)
            chunks = [
                b"".join(builder.frames(template, [(i + j) % queues for j in range(batch)], i))
                for i in range(0, 4096, batch)
            ]
            if serialize == "rocketmq":
                chunks = [_as_rocketmq(chunk) for chunk in chunks]
            # SYNC_FLUSH: no reactor runs the group commit here, so each read's waiting sends are released as the
            # fsync of its round would release them (the fsync itself is not measured).
            flush = broker.flush_service if store_cfg.flushDiskType == "SYNC_FLUSH" else None
            done = 0
            started = time.process_time()
            while done < sends:
                for chunk in chunks:
                    protocol.dataReceived(chunk)
                    if flush is not None:
                        flush._waiters.release(broker.store.max_phy_offset)
                    done += batch
                transport.clear()
            return (time.process_time() - started) / done * 1e6
        finally:
            broker.stopService()  # no reactor runs here: what it schedules is simply dropped


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pipeline", description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--serialize", choices=("json", "rocketmq"), default="json", help="the send headers' encoding")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a broker.conf line")
    args = parser.parse_args()
    settings = dict(item.split("=", 1) for item in args.set)
    figures = [run_once(args.sends, settings, args.serialize) for _ in range(args.runs)]
    print(
        f"send pipeline ({args.serialize} headers): median {statistics.median(figures):.1f} us CPU per send, "
        f"min {min(figures):.1f}, max {max(figures):.1f} ({args.runs} runs of {args.sends} sends)"
    )


if __name__ == "__main__":
    main()
