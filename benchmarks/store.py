"""Store benchmarks: append throughput per flush mode against the disk's own rate, and recovery time.

    python -m benchmarks.store                       # appends (both modes, index on/off) + disk rate
    python -m benchmarks.store --recovery-gib 2      # also write 2 GiB, then time its recovery cases
    python -m benchmarks.store --recovery-gib 1 --recovery-only   # recovery only (RECOVERY_CASES)

Everything runs in this process on a store in ``--dir`` (a temporary directory on the same disk by default),
so the figures are the store's, without the network.  The disk's rate is measured in the same run and
directory, dd-style: 1 MiB writes then one fdatasync (``dd bs=1M conv=fdatasync``), plus 4 KiB appends each
followed by fdatasync (the ceiling for one-fsync-per-message).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import tempfile
import time
from collections.abc import Generator
from typing import Any

from twisted.internet import defer, task
from twisted.internet.task import deferLater

from gateway.remoting.message import pack_host, properties_to_string, tags_code
from gateway.store import DefaultMessageStore, MessageExtBrokerInner, StoreConfig
from gateway.store.config import ASYNC_FLUSH, SYNC_FLUSH
from gateway.store.flush import FlushService

MiB = 1 << 20
GiB = 1 << 30
_HOST = pack_host("127.0.0.1", 10911)


def disk_sequential_write(directory: str, total: int = 512 * MiB) -> float:
    """MB/s writing ``total`` bytes in 1 MiB blocks followed by one fdatasync (``dd conv=fdatasync``)."""
    path = os.path.join(directory, "dd.bin")
    block = os.urandom(MiB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(total // MiB):
            os.write(fd, block)
        os.fdatasync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return total / MiB / elapsed


def disk_sync_appends(directory: str, seconds: float = 2.0) -> float:
    """fdatasync'ed 4 KiB appends per second: one fsync per message, no group commit."""
    path = os.path.join(directory, "sync.bin")
    block = os.urandom(4096)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        n = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            os.write(fd, block)
            os.fdatasync(fd)
            n += 1
        return n / (time.perf_counter() - start)
    finally:
        os.close(fd)
        os.unlink(path)


def make_messages(count: int, size: int) -> list[MessageExtBrokerInner]:
    """Messages as a Java producer sends them: UNIQ_KEY, one KEYS entry, a tag."""
    body = os.urandom(size)
    return [
        MessageExtBrokerInner(
            topic="BenchmarkStore",
            queue_id=i % 8,
            flag=0,
            body=body,
            properties=properties_to_string(
                {"KEYS": f"order-{i}", "TAGS": "TagA", "UNIQ_KEY": f"7F0000010F2A18B4AAC2{i:012X}", "WAIT": "true"}
            ),
            tags_code=tags_code("TagA"),
            sys_flag=0,
            born_timestamp=1_700_000_000_000,
            born_host=_HOST,
            store_host=_HOST,
        )
        for i in range(count)
    ]


@dataclasses.dataclass
class AppendResult:
    mode: str
    index: bool
    messages: int
    seconds: float  # until the last message was acknowledged (SYNC_FLUSH: durable)
    durable_seconds: float  # until everything was fsynced
    bytes: int

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.bytes / MiB / self.seconds

    @property
    def durable_mb_per_s(self) -> float:
        return self.bytes / MiB / self.durable_seconds


def sync_sends(
    store: DefaultMessageStore, flush: FlushService, msgs: list[MessageExtBrokerInner], window: int
) -> defer.Deferred[None]:
    """SYNC_FLUSH as clients drive it: ``window`` sends in flight, a new one as soon as one is acknowledged."""
    done: defer.Deferred[None] = defer.Deferred()
    pending = iter(msgs)
    in_flight = 0

    def send_next() -> None:
        nonlocal in_flight
        msg = next(pending, None)
        if msg is None:
            if in_flight == 0 and not done.called:
                done.callback(None)
            return
        r = store.put_message(msg)
        assert r.append is not None, r.status
        in_flight += 1
        flush.wait_for_flush(r.append.wrote_offset + r.append.wrote_bytes).addCallback(acked)

    def acked(ok: bool) -> None:
        nonlocal in_flight
        assert ok, "FLUSH_DISK_TIMEOUT"
        in_flight -= 1
        send_next()

    for _ in range(window):
        send_next()
    return done


@defer.inlineCallbacks
def append_run(
    reactor: Any, config: StoreConfig, msgs: list[MessageExtBrokerInner], window: int
) -> Generator[defer.Deferred[Any], Any, AppendResult]:
    """Append ``msgs`` with the flush service running; SYNC_FLUSH keeps ``window`` sends waiting for their fsync."""
    shutil.rmtree(config.storePathRootDir, ignore_errors=True)
    store = DefaultMessageStore(config)
    store.start()
    flush = FlushService(store, config, reactor)
    flush.start()
    start = time.perf_counter()
    if config.flushDiskType == SYNC_FLUSH:
        yield sync_sends(store, flush, msgs, window)
    else:
        for i in range(0, len(msgs), window):
            for msg in msgs[i : i + window]:
                r = store.put_message(msg)
                assert r.append is not None, r.status
            yield deferLater(reactor, 0, lambda: None)  # what a reactor serving sockets does between reads
    acked = time.perf_counter() - start
    yield flush.stop()
    store.flush()
    durable = time.perf_counter() - start
    size = store.max_phy_offset
    store.shutdown()
    shutil.rmtree(config.storePathRootDir, ignore_errors=True)
    return AppendResult(config.flushDiskType, config.messageIndexEnable, len(msgs), acked, durable, size)


def write_commit_log(config: StoreConfig, total: int, size: int) -> int:
    """Fill a store with about ``total`` bytes of messages, flushed; returns the message count."""
    store = DefaultMessageStore(config)
    store.start()
    batch = make_messages(10_000, size)
    n = 0
    while store.max_phy_offset < total:
        for msg in batch:
            store.put_message(msg)
        n += len(batch)
        if n % 200_000 == 0:
            store.flush()
    store.shutdown()
    return n


def evict_file(path: str) -> None:
    """Drop the cached pages of one file (written back first by the caller's ``os.sync``)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def evict_page_cache(root: str) -> None:
    """Write back and drop the cached pages of every file under ``root``: a restart after a reboot."""
    os.sync()
    for directory, _, names in os.walk(root):
        for name in names:
            evict_file(os.path.join(directory, name))


def disk_sequential_read(paths: list[str], total: int) -> float:
    """GiB/s reading the first ``total`` bytes of ``paths`` in 1 MiB reads from a cold page cache."""
    os.sync()
    for path in paths:
        evict_file(path)
    left = total
    start = time.perf_counter()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            while left > 0 and (chunk := os.read(fd, min(MiB, left))):
                left -= len(chunk)
        finally:
            os.close(fd)
    return (total - left) / GiB / (time.perf_counter() - start)


def damage_a_middle_record(config: StoreConfig) -> int:
    """Overwrite the magic code of the record in the middle of queue 0 (a clean store); returns its offset."""
    store = DefaultMessageStore(config)
    store.start()
    unit = store.consume_queue_table[("BenchmarkStore", 0)].get_unit(
        store.get_max_offset_in_queue("BenchmarkStore", 0) // 2
    )
    store.shutdown()
    assert unit is not None
    segment = unit[0] - unit[0] % config.mappedFileSizeCommitLog
    with open(os.path.join(config.commit_log_path, f"{segment:020d}"), "r+b") as f:
        f.seek(unit[0] - segment + 4)
        f.write(b"\0\0\0\1")
    return unit[0]


# Each case from a cold page cache, in this order (the last one damages the commitlog): a clean restart; a crash
# restart (abort file left, checkpoint removed: everything scanned and CRC-checked); every consume queue rebuilt
# (their directory deleted); the index rebuilt from nothing; a clean restart skipping one damaged record.
RECOVERY_CASES = ("clean", "crash", "consume-queues-rebuilt", "index-rebuilt", "damaged-record")


def recovery_run(config: StoreConfig, messages: int) -> dict[str, Any]:
    """Time each of RECOVERY_CASES and the disk's sequential read of the same commitlog; check every message (all
    but the damaged one) is in a consume queue afterwards."""
    root = config.storePathRootDir
    segments = sorted(os.path.join(config.commit_log_path, name) for name in os.listdir(config.commit_log_path))
    store = DefaultMessageStore(config)
    store.start()
    size = store.max_phy_offset
    store.shutdown()
    disk = disk_sequential_read(segments, size)
    out: dict[str, Any] = {"commitlog_gib": round(size / GiB, 3), "disk_read_gib_per_s": round(disk, 2)}
    for case in RECOVERY_CASES:
        expected = messages
        if case == "crash":
            open(os.path.join(root, "abort"), "w").close()
            os.unlink(os.path.join(root, "checkpoint"))
        elif case == "consume-queues-rebuilt":
            shutil.rmtree(config.consume_queue_root)
        elif case == "index-rebuilt":
            shutil.rmtree(os.path.join(root, "index"))
        elif case == "damaged-record":
            damage_a_middle_record(config)
            expected -= 1
        evict_page_cache(root)
        store = DefaultMessageStore(config)
        start = time.perf_counter()
        report = store.start()
        elapsed = time.perf_counter() - start
        units = sum(store.get_max_offset_in_queue("BenchmarkStore", q) for q in range(8)) - report.cq_units_blanked
        assert units == expected, (case, units, expected)
        assert report.bytes_truncated == 0 and report.cq_units_truncated == 0
        assert len(report.skipped) == (case == "damaged-record")
        scanned = store.max_phy_offset - report.scan_from
        store.shutdown()
        gib_per_s = scanned / GiB / elapsed
        out[case] = {
            "seconds": round(elapsed, 2),
            "scanned_gib": round(scanned / GiB, 3),
            "seconds_per_gib": round(elapsed / (scanned / GiB), 2) if scanned else None,
            "gib_per_s": round(gib_per_s, 3),
            "share_of_disk_read": round(gib_per_s / disk, 3),
            "records_kept": report.records_kept,
            "records_redispatched": report.records_redispatched,
            "index_records_rebuilt": report.index_records_rebuilt,
        }
    return out


def main(reactor: Any, args: argparse.Namespace) -> defer.Deferred[None]:
    return defer.ensureDeferred(_main(reactor, args))


async def appends(reactor: Any, args: argparse.Namespace, root: str, results: dict[str, Any]) -> None:
    """The disk's write rates in ``root``, then appends in each flush mode, index off and on."""
    results["disk_dd_mb_per_s"] = round(disk_sequential_write(root), 1)
    results["disk_fdatasync_4k_per_s"] = round(disk_sync_appends(root), 1)
    base = StoreConfig(storePathRootDir=os.path.join(root, "append"), mappedFileSizeCommitLog=args.segment_mib * MiB)
    print(
        f"disk: {results['disk_dd_mb_per_s']} MB/s sequential (1 MiB writes + fdatasync), "
        f"{results['disk_fdatasync_4k_per_s']} fdatasync'ed 4 KiB appends/s"
    )
    msgs = make_messages(args.messages, args.size)
    results["append"] = []
    for mode, index in ((ASYNC_FLUSH, False), (ASYNC_FLUSH, True), (SYNC_FLUSH, False), (SYNC_FLUSH, True)):
        config = dataclasses.replace(base, flushDiskType=mode, messageIndexEnable=index)
        r = await append_run(reactor, config, msgs, args.window)
        results["append"].append(
            {
                **dataclasses.asdict(r),
                "msgs_per_s": round(r.msgs_per_s),
                "mb_per_s": round(r.mb_per_s, 1),
                "durable_mb_per_s": round(r.durable_mb_per_s, 1),
            }
        )
        print(
            f"{mode:11s} index={'on ' if index else 'off'} {r.msgs_per_s:9.0f} msgs/s {r.mb_per_s:7.1f} MB/s "
            f"acknowledged, {r.durable_mb_per_s:7.1f} MB/s durable "
            f"({r.mb_per_s / results['disk_dd_mb_per_s']:.0%} of the disk)"
        )


async def _main(reactor: Any, args: argparse.Namespace) -> None:
    root = args.dir or tempfile.mkdtemp(prefix="store-bench-")
    os.makedirs(root, exist_ok=True)
    results: dict[str, Any] = {"dir": root}
    try:
        if not args.recovery_only:
            await appends(reactor, args, root, results)
        if args.recovery_gib:
            config = StoreConfig(
                storePathRootDir=os.path.join(root, "recovery"), mappedFileSizeCommitLog=args.segment_mib * MiB
            )
            start = time.perf_counter()
            n = write_commit_log(config, int(args.recovery_gib * GiB), args.size)
            print(f"wrote {n} messages ({args.recovery_gib} GiB) in {time.perf_counter() - start:.0f} s")
            recovery = results["recovery"] = {"messages": n, **recovery_run(config, n)}
            disk = recovery["disk_read_gib_per_s"]
            print(f"disk: {disk} GiB/s sequential read of the {recovery['commitlog_gib']} GiB commitlog (cold cache)")
            for case in RECOVERY_CASES:
                r = recovery[case]
                print(
                    f"recovery {case:22s} {r['seconds']:7.2f} s for {r['scanned_gib']} GiB scanned: "
                    f"{r['gib_per_s']:.3f} GiB/s, {r['share_of_disk_read']:.1%} of the disk's read"
                )
        if args.save:
            with open(args.save, "w") as f:
                json.dump(results, f, indent=2)
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", help="store directory (default: a new temporary directory)")
    p.add_argument("--messages", type=int, default=100_000, help="messages per append run")
    p.add_argument("--size", type=int, default=1024, help="body bytes")
    p.add_argument("--window", type=int, default=256, help="sends in flight (SYNC_FLUSH group commit)")
    p.add_argument("--segment-mib", type=int, default=1024, help="mappedFileSizeCommitLog in MiB")
    p.add_argument("--recovery-gib", type=float, default=0, help="also time recovery of a commitlog this big")
    p.add_argument("--recovery-only", action="store_true", help="skip the disk's write rates and the append runs")
    p.add_argument("--save", help="write the figures as JSON")
    return p.parse_args(argv)


if __name__ == "__main__":
    task.react(main, [parse_args()])
