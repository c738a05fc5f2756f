"""Request dispatch: request code → processor, hooks that see every request first, channel listeners.

A processor is ``handler(channel, request) -> RemotingCommand | LaterResponse | Deferred | None``; ``None``
means no response (oneway, or a response sent later by the processor itself, as long polling does).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from .bodies import BodyError
from .codes import ResponseCode
from .command import RemotingCommand
from .fastjson import FastJsonError
from .headers import HeaderError
from .names import InvalidNameError
from .rpc_latency import UNKNOWN_CODE, Histograms

if TYPE_CHECKING:
    from .protocol import RemotingProtocol

Handler = Callable[["RemotingProtocol", RemotingCommand], "RemotingCommand | LaterResponse | Deferred[Any] | None"]
# A hook returns a response to answer the request without dispatching it (e.g. an ACL denial).
Hook = Callable[["RemotingProtocol", RemotingCommand], "RemotingCommand | None"]

log = Logger()


class LaterResponse:
    """A response a processor gives later, lighter than a Deferred (a SYNC_FLUSH send waits with one): the
    processor returns it and calls ``answer`` once, after the dispatcher has taken it."""

    __slots__ = ("_deliver",)

    def __init__(self) -> None:
        self._deliver: Callable[[RemotingCommand], object] | None = None

    def answer(self, response: RemotingCommand) -> None:
        """The response is ready: write it (or fire the Deferred ``deferred`` gave)."""
        assert self._deliver is not None, "answered before the dispatcher took it"
        self._deliver(response)

    def deferred(self) -> Deferred[RemotingCommand]:
        """This response as a Deferred, for code that chains it; return that instead."""
        d: Deferred[RemotingCommand] = Deferred()
        self._deliver = d.callback
        return d


class RequestDispatcher:
    """Routes requests by code; answers unknown codes with REQUEST_CODE_NOT_SUPPORTED."""

    def __init__(self, *, answer_unknown: bool = True) -> None:
        self._handlers: dict[int, Handler] = {}
        self.hooks: list[Hook] = []
        self.answer_unknown = answer_unknown
        self.on_channel_closed: list[Callable[[RemotingProtocol], None]] = []
        self.on_channel_opened: list[Callable[[RemotingProtocol], None]] = []
        # Set to count rocketmq_rpc_latency: (request code, response code, oneway, long polling) → ms.
        self.rpc_latency: Histograms | None = None

    def without(self, codes: set[int]) -> RequestDispatcher:
        """A dispatcher serving the same handlers except ``codes``, sharing hooks and listeners."""
        other = RequestDispatcher(answer_unknown=self.answer_unknown)
        other._handlers = {c: h for c, h in self._handlers.items() if c not in codes}
        other.hooks = self.hooks
        other.on_channel_closed = self.on_channel_closed
        other.on_channel_opened = self.on_channel_opened
        other.rpc_latency = self.rpc_latency
        return other

    def register(self, code: int, handler: Handler) -> None:
        self._handlers[int(code)] = handler

    def register_all(self, handlers: dict[int, Handler]) -> None:
        for code, handler in handlers.items():
            self.register(code, handler)

    def channel_opened(self, channel: RemotingProtocol) -> None:
        for cb in self.on_channel_opened:
            cb(channel)

    def channel_closed(self, channel: RemotingProtocol) -> None:
        for cb in self.on_channel_closed:
            try:
                cb(channel)
            except Exception:
                log.failure("channel-closed listener failed")

    def dispatch(self, channel: RemotingProtocol, request: RemotingCommand) -> None:
        """Run the processor for ``request`` and write its response, if any."""
        start = time.perf_counter() if self.rpc_latency is not None else 0.0
        try:
            response = self._hooked(channel, request) if self.hooks else None
            if response is None:
                handler = self._handlers.get(request.code)
                if handler is None:
                    if not self.answer_unknown:
                        return
                    log.warn("request type {code} not supported from {peer}", code=request.code, peer=channel.peer)
                    response = request.response(
                        ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported"
                    )
                else:
                    response = handler(channel, request)
        except InvalidNameError as e:
            response = request.response(ResponseCode.INVALID_PARAMETER, str(e))
        except HeaderError as e:
            response = request.response(ResponseCode.SYSTEM_ERROR, f"RemotingCommandException: {e}")
        except BodyError as e:  # a body property of the wrong type (Java: fastjson's JSONException) or out of range
            response = request.response(e.code, str(e))
        except FastJsonError as e:
            response = request.response(ResponseCode.SYSTEM_ERROR, f"body is not JSON: {e}")
        except Exception as e:
            log.failure("processor failed for request code {code}", code=request.code)
            response = request.response(ResponseCode.SYSTEM_ERROR, _exception_remark(e))
        if response is None:
            return
        # Deferred is an ABC (Awaitable): isinstance() against it costs a send ~1 us, a type() check nothing.
        if type(response) is not RemotingCommand:
            if type(response) is LaterResponse:
                response._deliver = lambda r: self._respond(channel, request, r, start)
                return
            if isinstance(response, Deferred):
                response.addCallbacks(
                    lambda r: self._respond(channel, request, r, start),
                    lambda f: self._failed(channel, request, f, start),
                )
                return
        self._respond(channel, request, response, start)

    def admit(self, channel: RemotingProtocol, request: RemotingCommand) -> bool | None:
        """The hooks (ACL) for a request served outside :meth:`dispatch` (the broker's send lane), run as dispatch
        runs them: True to serve it; False when a hook answered it (the answer is sent as dispatch sends it); None
        when a hook failed or answered later, for dispatch to run them again and answer its way."""
        start = time.perf_counter() if self.rpc_latency is not None else 0.0
        try:
            response = self._hooked(channel, request)
        except Exception:
            return None
        if response is None:
            return True
        if type(response) is not RemotingCommand:
            return None
        self._respond(channel, request, response, start)
        return False

    def _hooked(self, channel: RemotingProtocol, request: RemotingCommand) -> Any:
        """The first hook's answer to ``request`` (a refusal), or None when every hook lets it through."""
        for hook in self.hooks:
            response = hook(channel, request)
            if response is not None:
                return response
        return None

    def _respond(
        self, channel: RemotingProtocol, request: RemotingCommand, response: RemotingCommand | None, start: float
    ) -> None:
        if response is None:
            return
        if self.rpc_latency is not None:
            self.count_latency(request, response, start)
        if request.is_oneway:
            return
        response.opaque = request.opaque
        response.flag |= 1
        channel.send_command(response)

    def count_latency(
        self, request: RemotingCommand, response: RemotingCommand, start: float, long_polling: bool = False
    ) -> None:
        """Count one answered request in ``rpc_latency`` (if set): ``start`` is its ``time.perf_counter()``
        on arrival; ``long_polling`` for a pull answered after being held."""
        latency = self.rpc_latency
        if latency is not None:
            code = request.code if request.code in self._handlers else UNKNOWN_CODE
            key = (code, response.code, request.is_oneway, long_polling)
            latency.record(key, (time.perf_counter() - start) * 1000)

    def _failed(self, channel: RemotingProtocol, request: RemotingCommand, failure: Any, start: float) -> None:
        log.failure("processor failed for request code {code}", failure, code=request.code)
        response = request.response(ResponseCode.SYSTEM_ERROR, _exception_remark(failure.value))
        self._respond(channel, request, response, start)


def _exception_remark(e: BaseException) -> str:
    # The exception's type and, for anything but an OS error, its message; never a file path or a
    # source line (OS errors name paths, tracebacks name our files): the log has the details.
    if isinstance(e, OSError):
        return f"{type(e).__name__}: {e.strerror or 'I/O error'}"
    return f"{type(e).__name__}: {e}"
