"""Helpers for the name-server tests: golden frames, request builders, a raw-bytes peer."""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from twisted.internet import reactor, task
from twisted.internet.defer import Deferred
from twisted.internet.protocol import Protocol

from gateway.remoting import fastjson
from gateway.remoting.bodies import DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper
from gateway.remoting.codec import FrameDecoder
from gateway.remoting.codes import RequestCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import RegisterBrokerRequestHeader
from gateway.remoting.message import body_crc

GOLDEN = Path(__file__).parent / "golden"
CLUSTER = "DefaultCluster"


def golden_frame(name: str) -> bytes:
    """A whole Apache 4.9.8 frame from ``golden/<name>.hex``."""
    return bytes.fromhex((GOLDEN / f"{name}.hex").read_text())


def golden_command(name: str) -> RemotingCommand:
    """The golden frame decoded."""
    (command,) = FrameDecoder().feed(golden_frame(name))
    return command


def topic_wrapper(topics: dict[str, int], counter: int = 1) -> TopicConfigSerializeWrapper:
    """Topics (name → queue count, perm 6) under a DataVersion."""
    return TopicConfigSerializeWrapper(
        {name: TopicConfig(name, queues, queues) for name, queues in topics.items()},
        DataVersion(timestamp=1_700_000_000_000, counter=counter),
    )


def compress_register_body(body: RegisterBrokerBody) -> bytes:
    """The broker's ``compressedRegister=true`` encoding of a RegisterBrokerBody."""
    wrapper = body.topic_config_serialize_wrapper

    def chunk(data: bytes) -> bytes:
        return struct.pack(">i", len(data)) + data

    parts = [chunk(fastjson.dumps(wrapper.data_version)), struct.pack(">i", len(wrapper.topic_config_table))]
    for tc in wrapper.topic_config_table.values():
        parts.append(
            chunk(
                f"{tc.topic_name} {tc.read_queue_nums} {tc.write_queue_nums} {tc.perm} {tc.topic_filter_type}".encode()
            )
        )
    parts.append(chunk(fastjson.dumps(body.filter_server_list)))
    return zlib.compress(b"".join(parts), 9)


def register_request(
    broker_name: str,
    broker_addr: str,
    topics: dict[str, int],
    *,
    broker_id: int = 0,
    counter: int = 1,
    ha_server_addr: str = "127.0.0.1:10912",
    cluster: str = CLUSTER,
    compressed: bool = False,
) -> RemotingCommand:
    """REGISTER_BROKER as a 4.9 broker sends it (bodyCrc32 set)."""
    body = RegisterBrokerBody(topic_wrapper(topics, counter))
    data = compress_register_body(body) if compressed else fastjson.dumps(body)
    header = RegisterBrokerRequestHeader(
        broker_name, broker_addr, cluster, ha_server_addr, broker_id, compressed, body_crc(data)
    )
    return RemotingCommand.request(RequestCode.REGISTER_BROKER, header.encode(), data)


def query_data_version_request(broker_name: str, broker_addr: str, counter: int) -> RemotingCommand:
    """QUERY_DATA_VERSION for a master whose topics are at ``counter`` (the timestamp ``topic_wrapper`` uses)."""
    header = {"brokerName": broker_name, "brokerAddr": broker_addr, "clusterName": CLUSTER, "brokerId": "0"}
    body = fastjson.dumps(topic_wrapper({}, counter).data_version)
    return RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, header, body)


def route_request(topic: str, version: int = 409) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, version=version)


def route_json(response: RemotingCommand) -> dict:
    return fastjson.loads(response.body)


async def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll ``predicate`` on the reactor until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await task.deferLater(reactor, 0.01, lambda: None)


class RawPeer(Protocol):
    """Writes bytes as they are and hands back whole frames as the bytes received."""

    def __init__(self) -> None:
        self.buffer = b""
        self.waiting: list[Deferred[bytes]] = []
        self.frames: list[bytes] = []
        self.closed: Deferred[None] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= 4:
            end = 4 + struct.unpack(">i", self.buffer[:4])[0]
            if len(self.buffer) < end:
                break
            self.frames.append(self.buffer[:end])
            self.buffer = self.buffer[end:]
        while self.frames and self.waiting:
            self.waiting.pop(0).callback(self.frames.pop(0))

    def connectionLost(self, reason: object = None) -> None:
        self.closed.callback(None)

    def exchange(self, frame: bytes) -> Deferred[bytes]:
        """Send one frame; the Deferred fires with the next frame received."""
        d: Deferred[bytes] = Deferred()
        self.waiting.append(d)
        self.transport.write(frame)
        return d
