"""Issue 25 item 5: start-up as an operator meets it, through the real entry points.

A value outside what a key allows stops start-up with the key, the file and the allowed values (one table,
``KEY_RULES``); an unknown key's warning names the nearest known one; a busy port, a store in use or not writable
ends in one line and exit code 1, never a traceback; ``python -m gateway`` takes the files' values over its own
defaults; and the ready line comes only once a NameServer has accepted the broker.
"""

from __future__ import annotations

import fcntl
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path

import pytest
from twisted.logger import formatEvent, globalLogPublisher

from compat_tests.servers import default_sigint, free_port
from gateway.broker.config import BrokerConfig, load_broker_config
from gateway.config import KEY_RULES, ConfigError, UpdateRefused, remote_update
from gateway.controller.config import ControllerConfig, load_controller_config
from gateway.namesrv.config import NamesrvConfig, load_namesrv_config
from gateway.proxy.config import ProxyConfig
from gateway.remoting.codec import FrameDecoder, encode
from gateway.remoting.codes import ResponseCode
from gateway.store.config import StoreConfig

from .namesrv.support import route_request

ROOT = Path(__file__).resolve().parents[1]

# -- the values a key allows


@pytest.mark.parametrize(
    ("line", "allowed"),
    [
        # The four: each used to print "boot success".
        ("flushDiskType=SOMETIMES", "'SOMETIMES' is not one of ASYNC_FLUSH, SYNC_FLUSH"),
        ("metricsExporterType=PROMETHEUS", "'PROMETHEUS' is not one of DISABLE, PROM"),
        ("fileReservedTime=-5", "-5 is not at least 0 hours"),
        ("deleteWhen=99", "'99' is not hours of the day from 0 to 23, ';'-separated"),
        ("deleteWhen=04;24", "'04;24' is not hours of the day"),
        ("deleteWhen=", "'' is not hours of the day"),
        ("brokerRole=MASTER", "'MASTER' is not one of ASYNC_MASTER, SYNC_MASTER, SLAVE"),
        ("listenPort=70000", "70000 is not from 0 to 65535"),
        ("brokerPermission=9", "9 is not from 0 to 7"),
        ("diskMaxUsedSpaceRatio=101", "101 is not from 0 to 100 percent"),
        ("diskSpaceWarningLevelRatio=1.5", "1.5 is not from 0.0 to 1.0"),
        ("messageDelayLevel=1s 5x", "'1s 5x' is not blank-separated delays with a unit s, m, h or d"),
        ("registerNameServerPeriod=0", "0 is not at least 1 ms"),
        ("mappedFileSizeConsumeQueue=10", "10 is not at least 20 bytes"),
    ],
)
def test_broker_conf_value_outside_what_the_key_allows_names_key_file_and_allowed(
    tmp_path: Path, line: str, allowed: str
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=b\n{line}\n")
    key = line.partition("=")[0]
    with pytest.raises(ConfigError) as caught:
        load_broker_config(str(conf))
    assert str(caught.value).startswith(f"{conf}: key {key}: {allowed}")


@pytest.mark.parametrize(
    "line",
    [
        "deleteWhen=04;16",
        "deleteWhen=0",
        "metricsExporterType=prom",
        "fileReservedTime=0",
        "flushDiskType=SYNC_FLUSH",
        "messageDelayLevel=1s 2m 3h 1d",
        "listenPort=0",
    ],
)
def test_allowed_values_still_start(tmp_path: Path, line: str) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"{line}\n")
    load_broker_config(str(conf))


def test_namesrv_and_controller_files_and_remote_updates_are_checked_too(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.properties"
    conf.write_text("metricsExporterType=PROMETHEUS\n")
    with pytest.raises(ConfigError, match=f"^{re.escape(str(conf))}: key metricsExporterType: 'PROMETHEUS' is not"):
        load_namesrv_config(conf)
    conf.write_text("listenPort=-1\n")
    with pytest.raises(ConfigError, match="key listenPort: -1 is not from 0 to 65535"):
        load_namesrv_config(conf)
    conf.write_text("scanNotActiveBrokerInterval=-5\n")
    with pytest.raises(ConfigError, match="key scanNotActiveBrokerInterval: -5 is not at least 1 ms"):
        load_controller_config(str(conf))
    # UPDATE_BROKER_CONFIG: refused as a whole, nothing changed.
    broker, store = BrokerConfig(), StoreConfig()
    with pytest.raises(UpdateRefused) as caught:
        remote_update(b"fileReservedTime=48\nflushDiskType=SOMETIMES\n", [broker, store], lambda key: False, "update")
    assert caught.value.code == ResponseCode.SYSTEM_ERROR and "key flushDiskType" in caught.value.remark
    assert (store.fileReservedTime, store.flushDiskType) == (72, "ASYNC_FLUSH")


def test_every_rule_is_for_a_key_we_have_and_every_default_is_allowed() -> None:
    configs = (BrokerConfig(), StoreConfig(), NamesrvConfig(), ControllerConfig(), ProxyConfig())
    declared = {f.name: getattr(c, f.name) for c in configs for f in fields(c)}
    assert set(KEY_RULES) <= set(declared)
    for c in configs:
        for f in fields(c):
            if f.name in KEY_RULES:
                assert KEY_RULES[f.name](getattr(c, f.name)) is None, f.name


def test_unknown_key_warning_names_the_nearest_known_key(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerNmae=b\nflushDiskTyep=SYNC_FLUSH\nzzzz=1\n")
    events: list[str] = []

    def observer(event: dict) -> None:
        events.append(formatEvent(event))

    globalLogPublisher.addObserver(observer)
    try:
        load_broker_config(str(conf))
    finally:
        globalLogPublisher.removeObserver(observer)
    assert f"{conf}: unknown key brokerNmae ignored (did you mean brokerName?)" in events
    assert f"{conf}: unknown key flushDiskTyep ignored (did you mean flushDiskType?)" in events
    assert f"{conf}: unknown key zzzz ignored" in events


# -- real processes


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    for name in ("NAMESRV_ADDR", "ROCKETMQ_LOG_DIR"):
        env.pop(name, None)
    return env


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=60
    )


def _one_line(run: subprocess.CompletedProcess[str]) -> str:
    """The only line a failed start printed, after checking it exited 1 with no traceback."""
    assert run.returncode == 1, run
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr + run.stdout, run
    assert "ready" not in run.stdout and "boot success" not in run.stdout, run
    return lines[0]


def _broker_conf(tmp_path: Path, *lines: str, store: Path | None = None) -> Path:
    conf = tmp_path / "broker.conf"
    store = store or tmp_path / "store"
    base = ["listenPort=0", "grpcServerPort=0", "bindAddress=127.0.0.1", f"storePathRootDir={store}"]
    conf.write_text("\n".join([*base, *lines]) + "\n")
    return conf


@pytest.mark.parametrize(
    ("line", "allowed"),
    [
        ("flushDiskType=SOMETIMES", "'SOMETIMES' is not one of ASYNC_FLUSH, SYNC_FLUSH"),
        ("metricsExporterType=PROMETHEUS", "'PROMETHEUS' is not one of DISABLE, PROM"),
        ("fileReservedTime=-5", "-5 is not at least 0 hours"),
        ("deleteWhen=99", "'99' is not hours of the day from 0 to 23"),
    ],
)
def test_mqbroker_refuses_a_bad_value_in_one_line(tmp_path: Path, line: str, allowed: str) -> None:
    conf = _broker_conf(tmp_path, line)
    key = line.partition("=")[0]
    assert _one_line(_run(tmp_path, "gateway.broker", "-c", str(conf))).startswith(
        f"configuration error: {conf}: key {key}: {allowed}"
    )


@contextmanager
def _busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_mqbroker_port_in_use_is_one_line_and_the_store_is_closed_cleanly(tmp_path: Path) -> None:
    with _busy_port() as port:
        conf = _broker_conf(tmp_path, f"listenPort={port}")
        line = _one_line(_run(tmp_path, "gateway.broker", "-c", str(conf)))
    assert line == f"cannot listen on 127.0.0.1:{port}: Address already in use"
    # Shut down, not abandoned: the next start needs no recovery.
    assert (tmp_path / "store" / "checkpoint").exists() and not (tmp_path / "store" / "abort").exists()


def test_gateway_port_in_use_is_one_line(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    with _busy_port() as port:
        line = _one_line(_run(tmp_path, "gateway", "--namesrv-port", str(port), "--store", store))
        assert line == f"cannot listen on 127.0.0.1:{port}: Address already in use"
        conf = _broker_conf(tmp_path, f"listenPort={port}")
        line = _one_line(_run(tmp_path, "gateway", "--namesrv-port", "0", "--broker-config", str(conf)))
        assert line == f"cannot listen on 127.0.0.1:{port}: Address already in use"


def test_mqnamesrv_port_in_use_is_one_line(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.properties"
    with _busy_port() as port:
        conf.write_text(f"listenPort={port}\nbindAddress=127.0.0.1\nkvConfigPath={tmp_path / 'kv.json'}\n")
        line = _one_line(_run(tmp_path, "gateway.namesrv", "-c", str(conf)))
    assert line == f"mqnamesrv: cannot listen on 127.0.0.1:{port}: Address already in use"


@pytest.mark.parametrize("module", ["gateway.broker", "gateway"])
def test_a_store_locked_by_another_broker_is_one_line(tmp_path: Path, module: str) -> None:
    store = tmp_path / "store"
    store.mkdir()
    # The lock a running broker holds on its store.
    with open(store / "lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        conf = _broker_conf(tmp_path, store=store)
        option = "-c" if module == "gateway.broker" else "--broker-config"
        extra = [] if module == "gateway.broker" else ["--namesrv-port", "0"]
        line = _one_line(_run(tmp_path, module, option, str(conf), *extra))
    assert line == f"cannot start the store: {store} is locked: another store is running on it"


def test_a_store_path_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.write_text("not a directory")
    line = _one_line(_run(tmp_path, "gateway.broker", "-c", str(_broker_conf(tmp_path, store=store))))
    assert line == f"cannot start the store: {store}: a file is in the way: the store needs a directory there"


def test_a_store_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    """Permission bits do not stop root: an immutable directory (chattr +i) does, for every user."""
    store = tmp_path / "store"
    store.mkdir()
    if subprocess.run(["chattr", "+i", str(store)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported here")
    try:
        line = _one_line(_run(tmp_path, "gateway.broker", "-c", str(_broker_conf(tmp_path, store=store))))
    finally:
        subprocess.run(["chattr", "-i", str(store)], check=True)
    assert line == (
        f"cannot start the store: {store}: Operation not permitted (immutable? see lsattr): "
        "the store needs to read, write and create files in this directory"
    )


def test_state_files_that_cannot_be_written_are_one_line_and_the_store_is_closed(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / "config").mkdir(parents=True)
    if subprocess.run(["chattr", "+i", str(store / "config")], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported here")
    try:
        line = _one_line(_run(tmp_path, "gateway.broker", "-c", str(_broker_conf(tmp_path, store=store))))
    finally:
        subprocess.run(["chattr", "-i", str(store / "config")], check=True)
    assert line.startswith(f"cannot start: {store / 'config'}") and line.endswith(": Operation not permitted")
    assert not (store / "abort").exists()  # shut down cleanly: the next start needs no recovery


@contextmanager
def _process(tmp_path: Path, *args: str) -> Iterator[queue.Queue[str]]:
    """A server process whose output lines arrive in the queue; stopped with SIGINT at the end."""
    lines: queue.Queue[str] = queue.Queue()
    with subprocess.Popen(
        [sys.executable, "-m", *args], cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, preexec_fn=default_sigint,
    ) as proc:  # fmt: skip
        assert proc.stdout is not None
        out = proc.stdout
        reader = threading.Thread(target=lambda: [lines.put(line) for line in out], daemon=True)
        reader.start()
        try:
            yield lines
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            reader.join(timeout=5)


def _line_with(lines: queue.Queue[str], text: str, seconds: float) -> tuple[str, list[str]]:
    """The first line holding ``text`` within ``seconds``, and every line before it."""
    deadline = time.monotonic() + seconds
    before: list[str] = []
    while True:
        line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        if text in line:
            return line, before
        before.append(line)


def test_gateway_takes_the_namesrv_files_port_and_address_over_its_defaults(tmp_path: Path) -> None:
    port = free_port()
    namesrv_conf = tmp_path / "namesrv.properties"
    # 127.0.0.2 is loopback too: the file's bindAddress wins over --bind's default 127.0.0.1.
    namesrv_conf.write_text(f"listenPort={port}\nbindAddress=127.0.0.2\nkvConfigPath={tmp_path / 'kv.json'}\n")
    conf = _broker_conf(tmp_path)
    with _process(tmp_path, "gateway", "--namesrv-config", str(namesrv_conf), "--broker-config", str(conf)) as lines:
        ready, _ = _line_with(lines, "rocketmq-gateway ready", 30)
        assert f"namesrv 127.0.0.2:{port} " in ready
        # The broker registered with it: its topics have routes there.
        assert _route_code("127.0.0.2", port, "TBW102") == ResponseCode.SUCCESS


def _route_code(host: str, port: int, topic: str) -> int:
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(encode(route_request(topic)))
        decoder = FrameDecoder()
        responses: list = []
        while not responses:
            responses = decoder.feed(sock.recv(65536))
    return responses[0].code


def test_broker_is_ready_only_once_a_namesrv_accepted_it(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there yet
    conf = _broker_conf(tmp_path, "registerNameServerPeriod=10000")
    with _process(tmp_path, "gateway.broker", "-c", str(conf), "-n", f"127.0.0.1:{port}") as lines:
        warning, before = _line_with(lines, "is not ready", 20)
        assert f"no name server has accepted its registration yet (tried 127.0.0.1:{port}); retrying every 10 s" in (
            warning
        )
        assert not any("boot success" in line for line in before)
        namesrv_conf = tmp_path / "namesrv.properties"
        namesrv_conf.write_text(f"listenPort={port}\nbindAddress=127.0.0.1\nkvConfigPath={tmp_path / 'kv.json'}\n")
        with _process(tmp_path, "gateway.namesrv", "-c", str(namesrv_conf)):
            # The next periodic registration, at most 10 s after the first.
            ready, _ = _line_with(lines, "boot success", 20)
            assert f"name server is:127.0.0.1:{port}" in ready
            assert _route_code("127.0.0.1", port, "TBW102") == ResponseCode.SUCCESS
