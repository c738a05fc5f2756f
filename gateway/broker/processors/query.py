"""QUERY_MESSAGE and VIEW_MESSAGE_BY_ID (QueryMessageProcessor): lookups by key, unique key and offset id.

mqadmin ``queryMsgByKey`` sends QUERY_MESSAGE to every broker of the topic; ``queryMsgById`` sends
VIEW_MESSAGE_BY_ID to the address inside an offsetMsgId and, if the id is not one, QUERY_MESSAGE with
``_UNIQUE_KEY_QUERY=true``.  Clients filter the records by key themselves, as with Java's broker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.headers import QueryMessageRequestHeader, QueryMessageResponseHeader, ViewMessageRequestHeader
from gateway.remoting.message import RecordError, decode_record

if TYPE_CHECKING:
    from gateway.remoting.protocol import RemotingProtocol

    from ..controller import BrokerController

UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG


class QueryMessageProcessor:
    """Serves records found through the index or at a commitlog offset."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker

    def handlers(self) -> dict[int, Any]:
        return {
            RequestCode.QUERY_MESSAGE: self.query_message,
            RequestCode.VIEW_MESSAGE_BY_ID: self.view_message_by_id,
        }

    def query_message(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        """Records under ``topic#key`` stored within [beginTimestamp, endTimestamp]; 22 when there are none."""
        h = QueryMessageRequestHeader.decode(request.ext_fields)
        store = self.broker.store
        max_num = h.max_num
        if (request.ext_fields or {}).get(UNIQUE_MSG_QUERY_FLAG) == "true":
            max_num = store.config.defaultQueryMaxNum
        result = store.query_message(h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp)
        ext = QueryMessageResponseHeader(
            index_last_update_timestamp=result.index_last_update_timestamp,
            index_last_update_phyoffset=result.index_last_update_phyoffset,
        ).encode()
        if not result.buffers:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", ext
            )
        response = request.response(ResponseCode.SUCCESS, None, ext)
        response.body_tail = result.buffers
        return response

    def view_message_by_id(self, channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
        """The record starting at commitlog ``offset``; 1 SYSTEM_ERROR if there is none (or, with ACL, if the
        account may not read its topic)."""
        h = ViewMessageRequestHeader.decode(request.ext_fields)
        record = self.broker.store.look_message_by_offset(h.offset)
        if record is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {h.offset}")
        acl = self.broker.acl
        if acl is not None:
            # 4.9.8 serves any signed account: the message's topic must be readable by this one.
            try:
                msg = decode_record(record)
            except RecordError:
                return request.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {h.offset}")
            refused = acl.validator.refuse_message(channel, request, msg)
            if refused is not None:
                return refused
        response = request.response(ResponseCode.SUCCESS)
        response.body_tail = [record]
        return response
