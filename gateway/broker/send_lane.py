"""The send lane: the common send answered in C (``_send_lane.c``), the Python processor for everything else.

A SEND_MESSAGE or SEND_MESSAGE_V2 of a plain message, or a SEND_BATCH_MESSAGE of plain messages (no transaction,
delay, timer or retry topic, not oneway), to a topic the broker has is validated, appended to the commitlog,
dispatched to its consume queue and index, counted and answered by one C call for all such requests of a read, with
the bytes :class:`SendMessageProcessor` would send (a batch's messages parsed in C as the processor's own
:func:`~gateway.broker.processors.send.batch_messages` makes them, which the lane calls for text that is not ASCII, and
dispatched in one call of the store's ``Dispatcher.dispatch_run``).
The lane stops at the first request it does not take, which the processor then serves (it is the reference), so
requests are served in the order they came. There is no lane (None) where the extensions were not built, with
``ROCKETMQ_GATEWAY_PURE_PYTHON=1`` and on a DLedger commitlog; the lane leaves every send to the processor on a
slave and while the broker refuses writes. With request hooks on (ACL), each send is put to them first
(:meth:`~gateway.remoting.dispatch.RequestDispatcher.admit`, which answers a denial as the dispatcher does) and only
decoded commands are taken. With a metrics exporter on, the sends it answers are counted in the RPC latency
histograms (``rocketmq_rpc_latency``) as the dispatcher counts its own.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from gateway.native import load_extension
from gateway.remoting.codec import encode_json_header
from gateway.remoting.codes import RPC_TYPE_RESPONSE, SERVER_VERSION, ResponseCode, SerializeType
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import KNOWN_GROUPS, KNOWN_TOPICS
from gateway.remoting.message import RecordError, _c_send_properties, string_to_properties
from gateway.remoting.names import NOT_ALLOWED_SEND_TOPICS, RETRY_GROUP_TOPIC_PREFIX
from gateway.store.api import PutMessageStatus
from gateway.store.native import c_store

from .processors.send import batch_messages, batch_properties, status_code

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol

    from .controller import BrokerController
    from .processors.send import SendMessageProcessor

_c_lane = load_extension("gateway.broker._send_lane")

# Where the JSON answer's values go: control characters, which the encoder writes as \u0001..\u0003 and nothing else
# in the answer contains, and an opaque no other field has; the answer is cut at them.
_MSG_ID, _QUEUE_ID, _QUEUE_OFFSET, _OPAQUE = "\x01", "\x02", "\x03", 2147483633


def json_pieces(region_ext: dict[str, str]) -> tuple[bytes, ...]:
    """The JSON header of a send's SUCCESS answer as the codec encodes it, cut where msgId, queueId, queueOffset and
    opaque go (the lane writes them between the pieces)."""
    ext = dict(region_ext, msgId=_MSG_ID, queueId=_QUEUE_ID, queueOffset=_QUEUE_OFFSET)
    answer = RemotingCommand(
        ResponseCode.SUCCESS, _OPAQUE, RPC_TYPE_RESPONSE, "JAVA", SERVER_VERSION, None, ext, b"", SerializeType.JSON
    )
    header = encode_json_header(answer)
    pieces = []
    for mark in (b"\\u0001", b"\\u0002", b"\\u0003", str(_OPAQUE).encode()):
        before, found, header = header.partition(mark)
        if not found or mark in header:
            raise ValueError(f"cannot cut the send answer's JSON at {mark!r}")
        pieces.append(before)
    return (*pieces, header)


class SendLane:
    """The C lane and what it hands back to Python: the sends that wait for a flush or a slave."""

    def __init__(self, broker: BrokerController, processor: SendMessageProcessor) -> None:
        assert _c_lane is not None
        self._broker = broker
        self._processor = processor
        store = broker.store
        commit_log = store.commit_log
        region_ext = processor.region_ext()
        self.lane = _c_lane.Lane(
            config=broker.config,
            broker=broker,
            dispatcher=broker.dispatcher,
            store=store,
            commit_log=commit_log,
            file_queue=commit_log.queue,
            topics=broker.topics,
            store_config=broker.store_config,
            count_put=broker.message_counts.put,
            send_properties=_c_send_properties,
            known_topics=KNOWN_TOPICS,
            known_groups=KNOWN_GROUPS,
            not_allowed=NOT_ALLOWED_SEND_TOPICS,
            retry_prefix=RETRY_GROUP_TOPIC_PREFIX,
            cluster=broker.config.brokerClusterName,
            wait_stored=self.wait_stored,
            serialize_rocketmq=SerializeType.ROCKETMQ,
            region=region_ext["MSG_REGION"].encode(),
            trace_on=region_ext["TRACE_ON"].encode(),
            json_pieces=json_pieces(region_ext),
            batch=self.batch,
            batch_properties=self.batch_properties,
            mapped_file_size=commit_log.queue.mapped_file_size,
            version=SERVER_VERSION,
        )

    def batch_properties(self, properties: str | None) -> str:
        """What each message of a batch with these header properties stores after its own (the lane parses ASCII
        batches itself)."""
        return batch_properties(string_to_properties(properties), self._broker.config.brokerClusterName)

    def batch(self, batch_str: str, body: bytes) -> list[tuple[int, bytes, str, int]] | None:
        """A batch's messages as the processor stores them (flag, body, properties, tags code), each one's properties
        followed by ``batch_str`` (what :meth:`batch_properties` made); None for a body the processor refuses (not a
        batch, or empty). The lane asks for them where its own parse leaves the batch to Python (text that is not
        ASCII)."""
        try:
            return batch_messages(batch_str, body) or None
        except RecordError:
            return None

    def wait_stored(
        self,
        channel: RemotingProtocol,
        code: int,
        opaque: int,
        rocketmq: bool,
        end: int,
        reply: bytes,
        msg_id: str,
        queue_id: int,
        queue_offset: int,
    ) -> None:
        """A stored send of request ``code`` that waits to be on disk (SYNC_FLUSH) or on a slave (SYNC_MASTER):
        ``reply`` once there, else the processor's answer for the wait's status (the message is stored either way);
        counted in the RPC latency histograms, when on, as it is answered."""
        start = time.perf_counter()

        def answer(status: PutMessageStatus) -> None:
            response_code = ResponseCode.SUCCESS if status is PutMessageStatus.PUT_OK else status_code(status)[0]
            latency = self._broker.dispatcher.rpc_latency
            if latency is not None:
                latency.record((code, response_code, False, False), (time.perf_counter() - start) * 1000)
            if status is PutMessageStatus.PUT_OK:
                channel.write_frame(reply)
                return
            ext = self._processor.region_ext()
            ext.update(msgId=msg_id, queueId=str(queue_id), queueOffset=str(queue_offset))
            stype = SerializeType.ROCKETMQ if rocketmq else SerializeType.JSON
            channel.send_command(
                RemotingCommand(response_code, opaque, RPC_TYPE_RESPONSE, "JAVA", SERVER_VERSION, None, ext, b"", stype)
            )

        status = self._broker.put_waiter(end, answer)
        if status is not None:
            answer(status)


def send_lane(broker: BrokerController, processor: SendMessageProcessor) -> SendLane | None:
    """The broker's send lane, or None where sends are all Python's (see the module's docstring)."""
    # The lane dispatches through the C store's Dispatcher (dispatch_run for batches).
    if _c_lane is None or _c_send_properties is None or c_store is None or broker.dledger is not None:
        return None
    return SendLane(broker, processor)
