"""TLS on a real port: modes, first-byte sniffing, mutual TLS, refused certificates, reload without drops."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Callable

import pytest
import pytest_twisted
from OpenSSL import SSL
from twisted.internet import reactor, threads
from twisted.internet.task import deferLater

from gateway.remoting.client import RemotingClient
from gateway.tls.client import client_endpoint_factory
from gateway.tls.config import TlsConfig

from .conftest import EchoServer, Pki, call_in_thread, client_context, echo_request


async def sleep(seconds: float) -> None:
    await deferLater(reactor, seconds, lambda: None)


async def refused(port: int, context: object) -> str:
    """The error a connection gets from the server (the test fails if it is served)."""
    try:
        await call_in_thread(port, context, echo_request())  # type: ignore[arg-type]
    except (OSError, ConnectionError) as e:
        return repr(e)
    pytest.fail("the server answered a connection it must refuse")


@pytest_twisted.ensureDeferred
async def test_permissive_serves_plain_and_tls_on_one_port(serve: Callable[..., EchoServer], pki: Pki) -> None:
    server = serve(pki.server_props(**{"tls.server.mode": "permissive", "tls.server.need.client.auth": "none"}))
    plain = await call_in_thread(server.port, None, echo_request(n="1"))
    tls = await call_in_thread(server.port, client_context(ca=pki.path("ca.pem")), echo_request(n="2"))
    assert (plain.code, plain.ext_fields, plain.body) == (0, {"n": "1"}, b"payload")
    assert (tls.code, tls.ext_fields, tls.body) == (0, {"n": "2"}, b"payload")


@pytest_twisted.ensureDeferred
async def test_enforcing_closes_plain_connections(serve: Callable[..., EchoServer], pki: Pki) -> None:
    server = serve(pki.server_props(**{"tls.server.need.client.auth": "none"}))
    await refused(server.port, None)
    ok = await call_in_thread(server.port, client_context(ca=pki.path("ca.pem")), echo_request())
    assert ok.code == 0


@pytest_twisted.ensureDeferred
async def test_disabled_closes_tls_handshakes(serve: Callable[..., EchoServer], pki: Pki) -> None:
    server = serve({"tls.server.mode": "disabled"})
    await refused(server.port, client_context())
    assert (await call_in_thread(server.port, None, echo_request())).code == 0


@pytest_twisted.ensureDeferred
async def test_test_mode_self_signed_certificate(serve: Callable[..., EchoServer]) -> None:
    """Java's defaults (permissive, test mode): TLS with a generated certificate, plain as well."""
    server = serve({})
    assert (await call_in_thread(server.port, client_context(), echo_request())).code == 0
    assert (await call_in_thread(server.port, None, echo_request())).code == 0


@pytest_twisted.ensureDeferred
async def test_mutual_tls_required(serve: Callable[..., EchoServer], pki: Pki) -> None:
    server = serve(pki.server_props())
    ca = pki.path("ca.pem")
    good = client_context(pki.path("client.pem"), pki.path("client.key"), ca)
    assert (await call_in_thread(server.port, good, echo_request())).code == 0
    # No certificate, an expired one, one from an unknown CA: all refused.
    await refused(server.port, client_context(ca=ca))
    await refused(server.port, client_context(pki.path("expired-client.pem"), pki.path("expired-client.key"), ca))
    await refused(server.port, client_context(pki.path("rogue-client.pem"), pki.path("rogue-client.key"), ca))


@pytest_twisted.ensureDeferred
async def test_optional_client_auth(serve: Callable[..., EchoServer], pki: Pki) -> None:
    server = serve(pki.server_props(**{"tls.server.need.client.auth": "optional"}))
    ca = pki.path("ca.pem")
    assert (await call_in_thread(server.port, client_context(ca=ca), echo_request())).code == 0
    good = client_context(pki.path("client.pem"), pki.path("client.key"), ca)
    assert (await call_in_thread(server.port, good, echo_request())).code == 0
    # A certificate shown is still verified.
    await refused(server.port, client_context(pki.path("rogue-client.pem"), pki.path("rogue-client.key"), ca))


@pytest_twisted.ensureDeferred
async def test_require_without_auth_client_trusts_any_certificate(serve: Callable[..., EchoServer], pki: Pki) -> None:
    """tls.server.authClient=false: a certificate must be shown, any will do (Java's InsecureTrustManager)."""
    server = serve(pki.server_props(**{"tls.server.authClient": "false"}))
    ca = pki.path("ca.pem")
    rogue = client_context(pki.path("rogue-client.pem"), pki.path("rogue-client.key"), ca)
    assert (await call_in_thread(server.port, rogue, echo_request())).code == 0
    await refused(server.port, client_context(ca=ca))


@pytest_twisted.ensureDeferred
async def test_our_client_verifies_the_server(serve: Callable[..., EchoServer], pki: Pki) -> None:
    """tls.client.authServer=true refuses an expired or untrusted server certificate; false accepts any."""
    good = serve(pki.server_props())
    expired = serve(
        pki.server_props(
            **{
                "tls.server.certPath": pki.path("expired-server.pem"),
                "tls.server.keyPath": pki.path("expired-server.key"),
            }
        )
    )
    rogue = serve(
        pki.server_props(
            **{"tls.server.certPath": pki.path("rogue-server.pem"), "tls.server.keyPath": pki.path("rogue-server.key")}
        )
    )
    verifying = RemotingClient(
        reactor, endpoint_factory=client_endpoint_factory(TlsConfig.from_properties(pki.client_props()))
    )
    trusting = RemotingClient(
        reactor,
        endpoint_factory=client_endpoint_factory(
            TlsConfig.from_properties(pki.client_props(**{"tls.client.authServer": "false"}))
        ),
    )
    try:
        assert (await verifying.invoke(good.addr, echo_request())).code == 0
        for bad in (expired, rogue):
            with pytest.raises(SSL.Error, match="certificate verify failed"):
                await verifying.invoke(bad.addr, echo_request())
            assert (await trusting.invoke(bad.addr, echo_request())).code == 0
    finally:
        await verifying.close()
        await trusting.close()


@pytest_twisted.ensureDeferred
async def test_certificate_reload_keeps_live_connections(serve: Callable[..., EchoServer], pki: Pki) -> None:
    server = serve(pki.server_props(**{"tls.server.need.client.auth": "none"}), watch_interval=0.05)
    client = RemotingClient(
        reactor, endpoint_factory=client_endpoint_factory(TlsConfig.from_properties(pki.client_props()))
    )
    try:
        assert (await client.invoke(server.addr, echo_request())).code == 0
        live = await client.get_channel(server.addr)
        before = server.tls.options
        # Rotate the server's certificate to a new one from another CA.
        shutil.copy(pki.path("rogue-server.pem"), pki.path("server.pem"))
        shutil.copy(pki.path("rogue-server.key"), pki.path("server.key"))
        for _ in range(100):
            if server.tls.options is not before:
                break
            await sleep(0.05)
        assert server.tls.options is not before, "certificate not reloaded"
        # The open connection still works; a new one gets the new certificate (which our client rejects).
        assert (await live.invoke(echo_request(), 3)).code == 0
        assert live.connected_
        rogue_ca = client_context(ca=pki.path("rogue-ca.pem"))
        assert (await call_in_thread(server.port, rogue_ca, echo_request())).code == 0
    finally:
        await client.close()


@pytest_twisted.ensureDeferred
async def test_broken_files_keep_the_previous_context(serve: Callable[..., EchoServer], pki: Pki) -> None:
    server = serve(pki.server_props(**{"tls.server.need.client.auth": "none"}), watch_interval=0.05)
    before = server.tls.options
    with open(pki.path("server.key"), "w") as f:
        f.write("not a key")
    await sleep(0.3)
    assert server.tls.options is before
    assert (await call_in_thread(server.port, client_context(ca=pki.path("ca.pem")), echo_request())).code == 0


@pytest_twisted.ensureDeferred
async def test_no_context_closes_tls_but_serves_plain(serve: Callable[..., EchoServer], pki: Pki) -> None:
    """Without usable files TLS handshakes are closed (Java: sslContext is null); permissive plain works."""
    server = serve(
        {
            "tls.server.mode": "permissive",
            "tls.test.mode.enable": "false",
            "tls.server.certPath": pki.path("missing.pem"),
            "tls.server.keyPath": pki.path("server.key"),
        }
    )
    assert server.tls.options is None
    await refused(server.port, client_context())
    assert (await call_in_thread(server.port, None, echo_request())).code == 0


@pytest_twisted.ensureDeferred
async def test_silent_connections_closed_when_the_port_stops(serve: Callable[..., EchoServer], pki: Pki) -> None:
    """A connection that never sent its first byte is not left open by a stopping server."""
    server = serve(pki.server_props())
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    try:
        await sleep(0.1)
        await server.listening.stopListening()
        try:
            data = await threads.deferToThread(sock.recv, 10)
        except ConnectionResetError:
            data = b""
        assert data == b""
    finally:
        sock.close()
