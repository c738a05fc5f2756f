"""``python -m gateway.controller``: starts, says it is ready, stops on SIGTERM; a bad config names key and file."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.ha.procs import free_port


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
