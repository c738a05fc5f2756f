"""DLedger's RPCs on the project's remoting (``DLedgerRpcNettyService`` of dledger 0.3.1.2).

A request is a remoting command whose code is a :class:`~.codes.DLedgerRequestCode` and whose body is the request's
JSON; the answer is a remoting response with code 200 whose body is the response's JSON, its ``code`` saying how it
went. A body that is not the request's JSON is answered SYSTEM_ERROR and the connection kept, as Netty's remoting
answers the exception fastjson throws there. Outgoing calls never fail: a lost, late or unreadable answer becomes the
response DLedger makes up for it (NETWORK_ERROR; an empty vote for VOTE).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.internet.abstract import isIPAddress, isIPv6Address
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP6ClientEndpoint
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.logger import Logger

from gateway.remoting.client import RemotingClient, split_addr, tcp_endpoint
from gateway.remoting.codes import ResponseCode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.dispatch import RequestDispatcher
from gateway.remoting.protocol import RemotingServerFactory

from .codes import DLedgerRequestCode, DLedgerResponseCode
from .member_state import MemberState
from .protocol import (
    BODIES,
    DLedgerProtocolError,
    HeartBeatResponse,
    RequestOrResponse,
    VoteResponse,
)

log = Logger()

# DLedgerRpcNettyService's timeout for every call it makes.
RPC_TIMEOUT_S = 3.0
# What the remoting response carries (DLedgerResponseCode.SUCCESS), whatever the body says.
RESPONSE_REMOTING_CODE = int(DLedgerResponseCode.SUCCESS)

# A handler answers a decoded request with its response, at once or later.
Handler = Callable[[Any], "RequestOrResponse | defer.Deferred[RequestOrResponse]"]


def copy_base_info(response: RequestOrResponse, request: RequestOrResponse) -> RequestOrResponse:
    """``copyBaseInfo``: the request's group, term, code and ids on its response."""
    response.group = request.group
    response.term = request.term
    response.code = request.code
    response.local_id = request.local_id
    response.remote_id = request.remote_id
    response.leader_id = request.leader_id
    return response


def peer_endpoint(reactor: Any, host: str, port: int) -> IStreamClientEndpoint:
    """A peer at an IP address directly: a refused connection fails at once (a HostnameEndpoint waits its
    attempt delay first, which a candidate would wait out on every member that is down)."""
    if isIPAddress(host):
        return TCP4ClientEndpoint(reactor, host, port, timeout=int(RPC_TIMEOUT_S))
    if isIPv6Address(host):
        return TCP6ClientEndpoint(reactor, host, port, timeout=int(RPC_TIMEOUT_S))
    return tcp_endpoint(reactor, host, port)


def network_error(code: DLedgerRequestCode, request: RequestOrResponse) -> RequestOrResponse:
    """The response DLedger makes up when a call gets no answer (what a peer cut off sees)."""
    response_type = BODIES[code][1]
    if code is DLedgerRequestCode.VOTE:
        return VoteResponse()  # voteResult UNKNOWN: not counted as a valid vote
    if code is DLedgerRequestCode.HEART_BEAT:
        return HeartBeatResponse(code=int(DLedgerResponseCode.NETWORK_ERROR))
    response = copy_base_info(response_type(), request)
    response.code = int(DLedgerResponseCode.NETWORK_ERROR)
    return response


class DLedgerRpcService:
    """One listener for the peers' RPCs (on the member's own address) and one client for ours to them."""

    def __init__(self, member_state: MemberState, reactor: Any, handlers: dict[DLedgerRequestCode, Handler]) -> None:
        self.member_state = member_state
        self.reactor = reactor
        self.dispatcher = RequestDispatcher()
        for code, handler in handlers.items():
            self.dispatcher.register(code, self._serve(code, handler))
        self.factory = RemotingServerFactory(self.dispatcher)
        self.client = RemotingClient(reactor, endpoint_factory=peer_endpoint)
        self._port: Any = None
        self.closed = False

    # -- serving

    def _serve(self, code: DLedgerRequestCode, handler: Handler) -> Callable[[Any, RemotingCommand], Any]:
        request_type = BODIES[code][0]

        def refuse(channel: Any, command: RemotingCommand, e: DLedgerProtocolError) -> RemotingCommand:
            log.warn(
                "[{id}] refused {code} from {peer}: {error}",
                id=self.member_state.self_id,
                code=code.name,
                peer=channel.peer,
                error=e,
            )
            return command.response(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")

        def serve(channel: Any, command: RemotingCommand) -> Any:
            try:
                request = request_type.decode(command.body)
            except DLedgerProtocolError as e:
                return refuse(channel, command, e)
            d = defer.maybeDeferred(handler, request)
            d.addCallback(lambda response: command.response(RESPONSE_REMOTING_CODE, body=response.encode()))
            d.addErrback(lambda f: refuse(channel, command, f.trap(DLedgerProtocolError) and f.value))
            return d

        return serve

    def listen(self) -> int:
        """Listen on this member's address; returns the port."""
        host, port = split_addr(self.member_state.peers[self.member_state.self_id])
        self._port = self.reactor.listenTCP(port, self.factory, interface=host)
        return int(self._port.getHost().port)

    @defer.inlineCallbacks
    def close(self) -> Any:
        """Stop listening, close the peers' connections and ours."""
        self.closed = True
        if self._port is not None:
            yield self._port.stopListening()
            self._port = None
        yield self.factory.close_all()
        yield self.client.close()

    # -- calling

    def call(self, code: DLedgerRequestCode, request: RequestOrResponse) -> defer.Deferred[Any]:
        """Send ``request`` to the member ``request.remote_id``; fires with its response, or with the one DLedger
        makes up when there is none (never errbacks)."""
        response_type = BODIES[code][1]
        addr = self.member_state.peers.get(request.remote_id or "")
        if addr is None or self.closed:
            return defer.succeed(network_error(code, request))
        command = RemotingCommand.request(code, body=request.encode(), language="JAVA")
        d = self.client.invoke(addr, command, RPC_TIMEOUT_S)

        def answered(response: RemotingCommand) -> RequestOrResponse:
            if response.code != RESPONSE_REMOTING_CODE:
                raise DLedgerProtocolError(f"remoting code {response.code}: {response.remark}")
            return response_type.decode(response.body)

        def failed(failure: Any) -> RequestOrResponse:
            log.debug(
                "[{id}] {code} to {peer} failed: {error}",
                id=self.member_state.self_id,
                code=code.name,
                peer=request.remote_id,
                error=failure.getErrorMessage(),
            )
            return network_error(code, request)

        d.addCallback(answered)
        d.addErrback(failed)
        return d
