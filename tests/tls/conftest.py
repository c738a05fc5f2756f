"""Certificates made for each test, an echo server behind :class:`TlsServer`, and blocking TLS/plain callers."""

from __future__ import annotations

import datetime
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor, threads

from gateway.remoting.codec import FrameDecoder, encode
from gateway.remoting.command import RemotingCommand
from gateway.remoting.dispatch import RequestDispatcher
from gateway.remoting.protocol import RemotingProtocol, RemotingServerFactory
from gateway.tls import certs
from gateway.tls.config import TlsConfig
from gateway.tls.server import TlsServer

ECHO = 1001


@dataclass
class Pki:
    """A dev PKI plus certificates that must be refused."""

    dir: Path
    dev: certs.DevPki

    def path(self, name: str) -> str:
        return str(self.dir / name)

    def server_props(self, **extra: str) -> dict[str, str]:
        return {**self.dev.server_properties(), **extra}

    def client_props(self, **extra: str) -> dict[str, str]:
        return {**self.dev.client_properties(), **extra}


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    d = tmp_path / "pki"
    dev = certs.write_dev_pki(d)
    ca = dev.ca
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=30)
    # Signed by our CA but expired.
    certs.write_pair(
        certs.issue(ca, "expired-client", client=True, days=1, not_before=past),
        d / "expired-client.pem",
        d / "expired-client.key",
    )
    certs.write_pair(
        certs.issue(ca, "localhost", ["localhost", "127.0.0.1"], days=1, not_before=past),
        d / "expired-server.pem",
        d / "expired-server.key",
    )
    # Valid but from a CA nobody trusts.
    rogue = certs.make_ca("rogue CA")
    (d / "rogue-ca.pem").write_bytes(rogue.cert_pem())
    certs.write_pair(certs.issue(rogue, "rogue-client", client=True), d / "rogue-client.pem", d / "rogue-client.key")
    certs.write_pair(
        certs.issue(rogue, "localhost", ["localhost", "127.0.0.1"]), d / "rogue-server.pem", d / "rogue-server.key"
    )
    return Pki(d, dev)


def echo(_channel: RemotingProtocol, request: RemotingCommand) -> RemotingCommand:
    return request.response(ext_fields=dict(request.ext_fields or {}), body=request.body)


@dataclass
class EchoServer:
    tls: TlsServer
    factory: RemotingServerFactory
    listening: Any

    @property
    def port(self) -> int:
        return int(self.listening.getHost().port)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest_twisted.async_yield_fixture
async def serve() -> AsyncIterator[Callable[..., EchoServer]]:
    """``serve(props, watch_interval=...)``: an echo server with the TLS settings ``props``."""
    started: list[EchoServer] = []

    def start(props: dict[str, str], watch_interval: float = 0.5) -> EchoServer:
        dispatcher = RequestDispatcher()
        dispatcher.register(ECHO, echo)
        factory = RemotingServerFactory(dispatcher)
        tls = TlsServer(TlsConfig.from_properties(props), reactor, watch_interval)
        tls.start()
        server = EchoServer(tls, factory, reactor.listenTCP(0, tls.wrap(factory), interface="127.0.0.1"))
        started.append(server)
        return server

    yield start
    for server in started:
        server.tls.stop()
        if server.listening.connected:
            await server.listening.stopListening()
        await server.factory.close_all()


def client_context(cert: str | None = None, key: str | None = None, ca: str | None = None) -> ssl.SSLContext:
    """A stdlib TLS client: verifies the server against ``ca`` (no host name check) or trusts anything."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    if ca:
        ctx.load_verify_locations(ca)
    else:
        ctx.verify_mode = ssl.CERT_NONE
    if cert and key:
        ctx.load_cert_chain(cert, key)
    return ctx


def blocking_call(port: int, context: ssl.SSLContext | None, request: RemotingCommand) -> RemotingCommand:
    """One request over a fresh connection (TLS when ``context``); raises when the server closes it."""
    request.opaque = 1
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        sock = context.wrap_socket(raw) if context else raw
        try:
            sock.sendall(encode(request))
            decoder = FrameDecoder()
            while True:
                data = sock.recv(65536)
                if not data:
                    raise ConnectionError("closed by the server")
                for cmd in decoder.feed(data):
                    return cmd
        finally:
            if sock is not raw:
                sock.close()


async def call_in_thread(port: int, context: ssl.SSLContext | None, request: RemotingCommand) -> RemotingCommand:
    """:func:`blocking_call` off the reactor thread (the server under test runs in the reactor)."""
    return await threads.deferToThread(blocking_call, port, context, request)


def echo_request(**ext: str) -> RemotingCommand:
    return RemotingCommand.request(ECHO, dict(ext) or {"hello": "world"}, b"payload")
