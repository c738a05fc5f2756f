"""Idle connections are closed by the server, as Java's IdleStateHandler does; busy ones stay."""

from __future__ import annotations

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.task import deferLater

from gateway.remoting.client import RemotingClient
from gateway.remoting.command import RemotingCommand
from gateway.remoting.dispatch import RequestDispatcher
from gateway.remoting.protocol import RemotingServerFactory


@pytest_twisted.ensureDeferred
async def test_idle_connection_closed_busy_one_kept() -> None:
    dispatcher = RequestDispatcher()
    dispatcher.register(1, lambda ch, req: req.response())
    factory = RemotingServerFactory(dispatcher, idle_timeout=0.4)
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")
    addr = f"127.0.0.1:{port.getHost().port}"
    idle, busy = RemotingClient(reactor), RemotingClient(reactor)
    try:
        idle_ch = await idle.get_channel(addr)
        busy_ch = await busy.get_channel(addr)
        for _ in range(8):  # 0.8 s of traffic every 0.1 s keeps this one open
            assert (await busy_ch.invoke(RemotingCommand.request(1), 2)).code == 0
            await deferLater(reactor, 0.1, lambda: None)
        assert not idle_ch.connected_
        assert busy_ch.connected_
    finally:
        await idle.close()
        await busy.close()
        await factory.close_all()
        await port.stopListening()
