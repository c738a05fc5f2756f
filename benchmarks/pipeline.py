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
import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator

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


@contextlib.contextmanager
def _broker(root: str, settings: dict[str, str]) -> Iterator[BrokerController]:
    """A started broker on a store under ``root``, no NameServer; stopped afterwards (no reactor runs here: what
    it schedules is simply dropped)."""
    cfg, store_cfg = load_broker_config(
        None,
        {"bindAddress": "127.0.0.1", "brokerIP1": "127.0.0.1", "listenPort": "0", "storePathRootDir": root,
         "namesrvAddr": "", **settings},
    )  # fmt: skip
    broker = BrokerController(cfg, store_cfg, reactor)
    broker.startService()
    try:
        yield broker
    finally:
        broker.stopService()


def _send(broker: BrokerController, sends: int, serialize: str, queues: int, batch: int) -> float:
    """Feed at least ``sends`` sends in batches of ``batch`` frames a read; µs of process CPU per send."""
    protocol = broker.factory.buildProtocol(None)
    transport = StringTransport()
    protocol.makeConnection(transport)
    create = CreateTopicRequestHeader("Pipeline", "TBW102", queues, queues, 6, "SINGLE_TAG")
    protocol.dataReceived(encode(java_request(17, create.encode())))
    builder = SendFrameBuilder("Pipeline", "pipeline_pg", "TagA", b"x" * 1024, queues)
    template = builder.template(broker.config.brokerName)
    chunks = [
        b"".join(builder.frames(template, [(i + j) % queues for j in range(batch)], i)) for i in range(0, 4096, batch)
    ]
    if serialize == "rocketmq":
        chunks = [_as_rocketmq(chunk) for chunk in chunks]
    # SYNC_FLUSH: no reactor runs the group commit here, so each read's waiting sends are released as the
    # fsync of its round would release them (the fsync itself is not measured).
    flush = broker.flush_service if broker.store.config.flushDiskType == "SYNC_FLUSH" else None
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


def run_once(sends: int, settings: dict[str, str], serialize: str = "json", queues: int = 8, batch: int = 16) -> float:
    """µs of process CPU per send, over ``sends`` sends in batches of ``batch`` frames a read."""
    with tempfile.TemporaryDirectory() as root, _broker(root, settings) as broker:
        return _send(broker, sends, serialize, queues, batch)


def run_replica(sends: int, settings: dict[str, str], transfer: int = 32 * 1024) -> float:
    """µs of process CPU per message a slave spends on the master's commitlog: appended in ``transfer``-byte
    pieces (as the master's HA frames carry it, never across a segment) and dispatched to consume queues and
    the index (append_to_commit_log and dispatch_appended: what the slave's HA link calls for each frame)."""
    with tempfile.TemporaryDirectory() as master_root, tempfile.TemporaryDirectory() as slave_root:
        with _broker(master_root, settings) as master:
            _send(master, sends, "rocketmq", 8, 16)
            cl = master.store.commit_log
            end = cl.max_offset
            pieces = []
            at = 0
            while at < end:
                f = cl.queue.find_mapped_file_by_offset(at)
                size = min(transfer, end - at, f.end_offset - at)
                pieces.append((at, bytes(f.view[at - f.file_from_offset : at - f.file_from_offset + size])))
                at += size
            messages = sum(cq.max_offset_in_queue for cq in master.store.consume_queue_table.values())
        with _broker(slave_root, {**settings, "brokerRole": "SLAVE", "brokerId": "1"}) as slave:
            store = slave.store
            started = time.process_time()
            for offset, data in pieces:
                if not store.append_to_commit_log(offset, data):
                    raise RuntimeError(f"the slave refused the transfer at {offset}")
                store.dispatch_appended()
            seconds = time.process_time() - started
            if store.replicated_whole_records_end != end:
                raise RuntimeError(f"the slave dispatched up to {store.replicated_whole_records_end}, not {end}")
        return seconds / messages * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pipeline", description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--serialize", choices=("json", "rocketmq"), default="json", help="the send headers' encoding")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a broker.conf line")
    parser.add_argument(
        "--replica", action="store_true", help="a slave's CPU per message instead: append and dispatch the transfers"
    )
    args = parser.parse_args()
    settings = dict(item.split("=", 1) for item in args.set)
    if args.replica:
        figures = [run_replica(args.sends, settings) for _ in range(args.runs)]
        print(
            f"replica pipeline: median {statistics.median(figures):.1f} us CPU per message, "
            f"min {min(figures):.1f}, max {max(figures):.1f} ({args.runs} runs of {args.sends} messages)"
        )
        return
    figures = [run_once(args.sends, settings, args.serialize) for _ in range(args.runs)]
    print(
        f"send pipeline ({args.serialize} headers): median {statistics.median(figures):.1f} us CPU per send, "
        f"min {min(figures):.1f}, max {max(figures):.1f} ({args.runs} runs of {args.sends} sends)"
    )


if __name__ == "__main__":
    main()
