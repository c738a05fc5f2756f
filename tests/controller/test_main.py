"""``python -m gateway.controller``: starts, says it is ready, stops on SIGTERM; a bad config names key and file;
its settings read and changed remotely (GET/UPDATE_CONTROLLER_CONFIG)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest_twisted
from twisted.internet import reactor

from compat_tests.servers import free_port
from gateway.config import parse_properties
from gateway.controller.config import load_controller_config
from gateway.controller.service import ControllerManager
from gateway.remoting.client import RemotingClient
from gateway.remoting.codes import RequestCode, ResponseCode
from gateway.remoting.command import RemotingCommand


def test_a_standalone_controller_starts_and_stops(tmp_path: Path) -> None:
    conf = tmp_path / "controller.properties"
    conf.write_text(
        f"controllerDLegerPeers=n0-127.0.0.1:{free_port()}\ncontrollerDLegerSelfId=n0\n"
        f"controllerStorePath={tmp_path / 'raft'}\nlistenPort=0\nbindAddress=127.0.0.1\n"
    )
    with subprocess.Popen(
        [sys.executable, "-m", "gateway.controller", "-c", str(conf)], stdout=subprocess.PIPE, text=True
    ) as proc:
        _ready_then_stopped(proc)
    assert (tmp_path / "raft").is_dir()


def _ready_then_stopped(proc: subprocess.Popen[str]) -> None:
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "controller n0 ready on port" in line:
                break
        else:
            raise AssertionError("no ready line")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_bad_config_names_the_key_and_the_file(tmp_path: Path) -> None:
    conf = tmp_path / "bad.properties"
    conf.write_text("controllerDLegerPeers=n0-127.0.0.1:9877\ncontrollerDLegerSelfId=n7\n")
    done = subprocess.run(
        [sys.executable, "-m", "gateway.controller", "-c", str(conf)], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 1
    assert "controllerDLegerSelfId" in done.stderr and str(conf) in done.stderr


@pytest_twisted.ensureDeferred
async def test_get_and_update_controller_config(tmp_path: Path) -> None:
    conf = tmp_path / "controller.properties"
    conf.write_text(
        f"controllerDLegerPeers=n0-127.0.0.1:{free_port()}\ncontrollerStorePath={tmp_path / 'raft'}\n"
        "listenPort=0\nbindAddress=127.0.0.1\n"
    )
    manager = ControllerManager(load_controller_config(str(conf)), reactor)
    manager.startService()
    client = RemotingClient(reactor)
    addr = f"127.0.0.1:{manager.port}"
    try:
        got = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_CONTROLLER_CONFIG))
        props = parse_properties(got.body.decode())
        assert props["enableElectUncleanMaster"] == "false" and props["configStorePath"] == str(conf)
        update = RemotingCommand.request(RequestCode.UPDATE_CONTROLLER_CONFIG, body=b"enableElectUncleanMaster=true\n")
        assert (await client.invoke(addr, update)).code == ResponseCode.SUCCESS
        assert manager.config.enableElectUncleanMaster is True
        assert "enableElectUncleanMaster=true" in conf.read_text()  # persisted to the -c file
        for body in (
            b"controllerStorePath=/elsewhere\n",
            b"controllerDLegerPeers=n0-1.2.3.4:1\n",
            b"tls.server.mode=disabled\n",
        ):
            refused = await client.invoke(
                addr, RemotingCommand.request(RequestCode.UPDATE_CONTROLLER_CONFIG, body=body)
            )
            assert refused.code == ResponseCode.NO_PERMISSION, body
        unknown = RemotingCommand.request(RequestCode.UPDATE_CONTROLLER_CONFIG, body=b"noSuchKey=1\n")
        assert (await client.invoke(addr, unknown)).code == ResponseCode.INVALID_PARAMETER
    finally:
        await client.close()
        await manager.stopService()
