"""A broker killed with SIGKILL while clients send: after a restart every acknowledged message is consumable,
exactly once.  Senders are plain blocking sockets speaking the remoting protocol, several requests in flight each.

The fast variant runs in the default suite; the ``chaos`` one sends longer and kills the broker several times.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.servers import GatewayServers
from gateway.remoting.blocking import BlockingConnection
from gateway.remoting.codec import FrameDecoder, encode
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import PullMessageRequestHeader, SendMessageRequestHeader
from gateway.remoting.message import decode_records

TOPIC = "CrashTopic"
QUEUES = 4


class Sender(threading.Thread):
    """Sends numbered messages over one connection, ``window`` in flight, until the connection dies."""

    def __init__(self, addr: str, prefix: str, window: int = 8) -> None:
        super().__init__(daemon=True)
        self.addr = addr
        self.prefix = prefix
        self.window = window
        self.acked: set[bytes] = set()
        self.sent = 0

    def _request(self, seq: int) -> RemotingCommand:
        body = f"{self.prefix}-{seq}".encode().ljust(256, b".")
        header = SendMessageRequestHeader(
            producer_group="crash-pg",
            topic=TOPIC,
            default_topic="TBW102",
            default_topic_queue_nums=QUEUES,
            queue_id=seq % QUEUES,
            sys_flag=0,
            born_timestamp=int(time.time() * 1000),
            flag=0,
            properties=f"UNIQ_KEY\x01{self.prefix}{seq:012d}",
        ).encode_v2()
        req = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header, body)
        req.opaque = seq
        return req

    def run(self) -> None:
        host, _, port = self.addr.rpartition(":")
        pending: dict[int, bytes] = {}
        decoder = FrameDecoder()
        try:
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                while True:
                    while len(pending) < self.window:
                        req = self._request(self.sent)
                        sock.sendall(encode(req))
                        pending[req.opaque] = req.body
                        self.sent += 1
                    data = sock.recv(65536)
                    if not data:
                        return
                    for resp in decoder.feed(data):
                        body = pending.pop(resp.opaque)
                        if resp.code == ResponseCode.SUCCESS:
                            self.acked.add(body)
        except OSError:
            return  # the broker died


def pull_everything(addr: str) -> Iterator[tuple[int, int, bytes]]:
    """(queue id, queue offset, body) of every message in the topic, pulled from offset 0 over one connection
    (one a pull would leave tens of thousands in TIME_WAIT, and tests after this one short of ports)."""
    with BlockingConnection(addr, 5.0) as conn:
        for qid in range(QUEUES):
            offset = 0
            while True:
                header = PullMessageRequestHeader(
                    consumer_group="crash-cg",
                    topic=TOPIC,
                    queue_id=qid,
                    queue_offset=offset,
                    max_msg_nums=32,
                    sys_flag=0x4,  # subscription in the request, no suspend
                    commit_offset=0,
                    suspend_timeout_millis=0,
                    subscription="*",
                    sub_version=0,
                    expression_type="TAG",
                )
                resp = conn.invoke(RemotingCommand.request(RequestCode.PULL_MESSAGE, header.encode()))
                if resp.code != ResponseCode.SUCCESS:
                    break
                for m in decode_records(resp.body):
                    yield qid, m.queue_offset, m.body
                offset = int(resp.ext_fields["nextBeginOffset"])


def send_and_kill(servers: GatewayServers, senders: int, seconds: float) -> set[bytes]:
    """Send from ``senders`` connections for ``seconds``, SIGKILL the broker mid-stream; the acked bodies."""
    threads = [Sender(servers.broker_addr, f"s{i}t{time.monotonic_ns()}") for i in range(senders)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    assert all(t.is_alive() for t in threads), "a sender stopped before the kill"
    servers.kill()
    for t in threads:
        t.join(10)
    acked = set().union(*(t.acked for t in threads))
    assert len(acked) > senders * 10, "too few sends to prove anything"
    assert sum(t.sent for t in threads) > len(acked)  # some sends were in flight at the kill
    return acked


def check_consumable(servers: GatewayServers, acked: set[bytes]) -> int:
    """Every acked body is in the queues exactly once, queue offsets are dense; returns acked messages lost."""
    stored = list(pull_everything(servers.broker_addr))
    bodies = [body for _, _, body in stored]
    assert len(bodies) == len(set(bodies)), "a message is in the consume queues twice"
    for qid in range(QUEUES):
        offsets = [o for q, o, _ in stored if q == qid]
        assert offsets == list(range(len(offsets)))
    return len(acked - set(bodies))


def crash_cycles(tmp_path: Path, flush_disk_type: str, cycles: int, senders: int, seconds: float) -> tuple[int, int]:
    """(acked, acked but lost) over ``cycles`` kill/restart rounds."""
    servers = GatewayServers(
        tmp_path,
        extra_config={"flushDiskType": flush_disk_type, "mappedFileSizeCommitLog": str(256 * 1024)},
    )
    servers.start()
    try:
        servers.create_topic(TOPIC, QUEUES)
        acked: set[bytes] = set()
        lost = 0
        for _ in range(cycles):
            acked |= send_and_kill(servers, senders, seconds)
            servers.start()
            lost = check_consumable(servers, acked)
        return len(acked), lost
    finally:
        servers.kill()


def test_sync_flush_loses_no_acknowledged_message_on_sigkill(tmp_path: Path) -> None:
    acked, lost = crash_cycles(tmp_path, "SYNC_FLUSH", cycles=1, senders=4, seconds=1.5)
    print(f"SYNC_FLUSH SIGKILL: {acked} acknowledged, {lost} lost")
    assert lost == 0


@pytest.mark.chaos
@pytest.mark.parametrize("flush_disk_type", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_repeated_sigkill_under_load(tmp_path: Path, flush_disk_type: str) -> None:
    # A killed process leaves its page cache behind, so even ASYNC_FLUSH must lose nothing here; what
    # ASYNC_FLUSH loses on power loss is measured in tests/store/test_power_loss.py.
    acked, lost = crash_cycles(tmp_path, flush_disk_type, cycles=3, senders=8, seconds=4)
    print(f"{flush_disk_type} 3x SIGKILL: {acked} acknowledged, {lost} lost")
    assert lost == 0
