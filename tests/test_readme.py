"""The README's instructions, run as written against real servers so they cannot rot: the Python client example,
the commands that move ``python3 -m gateway`` off 9876/10911, the installed commands, the addresses each entry point
listens on and the Spark job's ``SPARK_LOCAL_IP``."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import pytest

from compat_tests.sdk5 import sdk5_python
from compat_tests.servers import GatewayServers, default_sigint, free_port
from gateway.client import blocking

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
READY = re.compile(r"rocketmq-gateway ready: namesrv (\S+) broker (\S+)")


def readme_block(pattern: str) -> str:
    """The README's text matched by ``pattern`` (its first group when it has one); fails the test if absent."""
    m = re.search(pattern, README, re.M | re.S)
    assert m is not None, f"README has no {pattern!r}"
    return m.group(1) if m.re.groups else m.group(0)


def listening(port: int) -> str | None:
    """The address a TCP socket of this machine listens on ``port`` at (``0.0.0.0``, ``127.0.0.1``), else None."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        host, _, hex_port = local.partition(":")
        if state == "0A" and int(hex_port, 16) == port:
            return ".".join(str(b) for b in reversed(bytes.fromhex(host)))
    return None


def wait_listening(port: int, proc: subprocess.Popen[str], timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while (addr := listening(port)) is None:
        assert proc.poll() is None, f"exited {proc.returncode}"
        assert time.monotonic() < deadline, f"nothing listens on {port}"
        time.sleep(0.1)
    return addr


def ready(proc: subprocess.Popen[str], timeout: float = 30.0) -> re.Match[str]:
    """The ready line of ``python3 -m gateway``; the process is killed when none comes within ``timeout``."""
    assert proc.stdout is not None
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    try:
        for line in proc.stdout:
            if m := READY.search(line):
                return m
    finally:
        watchdog.cancel()
    raise AssertionError(f"no ready line, exit code {proc.wait()}")


def stop(proc: subprocess.Popen[str]) -> str:
    """SIGINT, as Ctrl-C; the process's output."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out


def popen(argv: list[str], cwd: Path) -> subprocess.Popen[str]:
    # HOME: the log files go to the test's folder, not ~/logs.
    env = dict(os.environ, HOME=str(cwd), PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=default_sigint
    )


def python(argv: list[str]) -> list[str]:
    """A documented ``python3 ...`` command line, run with this interpreter."""
    assert argv[0] == "python3", argv
    return [sys.executable, *argv[1:]]


def test_python_client_example_sends_receives_and_traces(tmp_path: Path) -> None:
    code = readme_block(r"^```python\n(.*?)^```")
    assert "127.0.0.1:9876" in code
    servers = GatewayServers(tmp_path / "gateway", {"traceTopicEnable": "true"}).start()
    try:
        result = subprocess.run(
            [sys.executable, "-c", code.replace("127.0.0.1:9876", servers.namesrv_addr)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert result.returncode == 0, result.stderr
        sent = re.findall(r"^sent (\w+) SEND_OK$", result.stdout, re.M)
        assert len(sent) == 3
        received = sorted(line for line in result.stdout.splitlines() if line.startswith("received "))
        assert received == [f"received TagA order-{i} order {i}" for i in range(3)]
        # Both clients traced: the send (Pub) and the consumption (SubAfter, as mqadmin's view shows it) of each.
        admin = blocking.Admin(servers.namesrv_addr)
        try:
            for msg_id in sent:
                deadline = time.monotonic() + 15
                while True:
                    types = {v.trace_type for v in admin.query_msg_trace_by_id(msg_id)}
                    if types >= {"Pub", "SubAfter"} or time.monotonic() > deadline:
                        break
                    time.sleep(0.2)
                assert types >= {"Pub", "SubAfter"}, (msg_id, types)
        finally:
            admin.shutdown()
    finally:
        servers.stop()


def test_gateway_moved_off_the_default_ports_listens_on_loopback(tmp_path: Path) -> None:
    block = readme_block(
        r"^    (printf 'listenPort=\d+\\n' > broker\.conf\n    python3 -m gateway --namesrv-port \d+ .*?)$"
    )
    printf, command = (line.strip() for line in block.splitlines())
    documented_namesrv = int(re.search(r"--namesrv-port (\d+)", command).group(1))
    documented_broker = int(re.search(r"listenPort=(\d+)", printf).group(1))
    assert f"Clients then use `127.0.0.1:{documented_namesrv}`" in README
    # The same commands on ports free here.
    namesrv_port, broker_port = free_port(), free_port()
    printf = printf.replace(f"={documented_broker}", f"={broker_port}")
    subprocess.run(["bash", "-c", printf], cwd=tmp_path, check=True)
    proc = popen(python(shlex.split(command.replace(str(documented_namesrv), str(namesrv_port)))), tmp_path)
    try:
        assert ready(proc).groups() == (f"127.0.0.1:{namesrv_port}", f"127.0.0.1:{broker_port}")
        assert "It listens on 127.0.0.1 only" in README
        assert listening(namesrv_port) == listening(broker_port) == "127.0.0.1"
    finally:
        stop(proc)


def test_separate_servers_listen_on_every_interface(tmp_path: Path) -> None:
    assert "Run this way they listen on every interface (`bindAddress=0.0.0.0`), as Apache's do" in README
    namesrv_port, broker_port = free_port(), free_port()
    (tmp_path / "namesrv.properties").write_text(f"listenPort={namesrv_port}\n")
    (tmp_path / "broker.conf").write_text(f"listenPort={broker_port}\nstorePathRootDir={tmp_path / 'store'}\n")
    namesrv = popen(python(["python3", "-m", "gateway.namesrv", "-c", "namesrv.properties"]), tmp_path)
    try:
        argv = ["python3", "-m", "gateway.broker", "-c", "broker.conf", "-n", f"127.0.0.1:{namesrv_port}"]
        broker = popen(python(argv), tmp_path)
        try:
            assert wait_listening(namesrv_port, namesrv) == "0.0.0.0"
            assert wait_listening(broker_port, broker) == "0.0.0.0"
        finally:
            stop(broker)
    finally:
        stop(namesrv)


def test_installed_commands_are_the_documented_entry_points() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    sentence = readme_block(r"The install puts Apache's command names on the PATH too: (.*?is `python3 -m gateway`)")
    commands = re.findall(r"`(mq\w+)`", sentence)
    modules = re.findall(r"`(?:python3 -m )?(gateway[\w.]*)`", sentence)
    documented = dict(zip(commands, modules, strict=False))
    documented["rocketmq-gateway"] = "gateway"
    # Every installed command is documented, as the module it runs (python3 -m <module>).
    assert set(documented) == set(scripts)
    for name, target in scripts.items():
        module, _, function = target.partition(":")
        runs = module.removesuffix(".__main__").removesuffix(".cli")
        assert runs == documented[name], name
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import sys; from {module} import {function}; sys.argv[0] = {name!r}; {function}()",
                "--help",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0 and "usage:" in result.stdout, (name, result.stderr)


@pytest.mark.spark
def test_spark_job_with_spark_local_ip_binds_loopback(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    line = readme_block(r"^    (SPARK_LOCAL_IP=\S+ python3 -m spark\.trace_ingest [^\n]*)$")
    assignment, *command = shlex.split(line)
    name, _, value = assignment.partition("=")
    assert (name, value) == ("SPARK_LOCAL_IP", "127.0.0.1")
    # Against a name server that is down, so the job stops right after Spark started.
    down = f"127.0.0.1:{free_port()}"
    argv = python([down if arg == "127.0.0.1:9876" else arg for arg in command])
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}
    env.update(SPARK_LOCAL_IP=value, HOME=str(tmp_path), PYTHONPATH=str(ROOT))
    result = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 2
    assert f"error: no name server answered ({down}): " in result.stderr
    # Spark took the address given: no "hostname resolves to a loopback address" fallback to another interface.
    assert "resolves to a loopback address" not in result.stderr


@pytest.mark.compat
def test_rocketmq5_python_sdk_example_sends_and_receives(tmp_path: Path) -> None:
    code = readme_block(r"^```python\n(# pip install rocketmq-python-client\n.*?)^```")
    command = readme_block(r"With the topic made first \(`(mqadmin updateTopic -n 127\.0\.0\.1:9876 [^`]*)`\)")
    servers = GatewayServers(tmp_path / "gateway", {}).start()
    try:
        topic = command.rsplit(" ", 1)[1]
        servers.create_topic(topic, 4)
        result = subprocess.run(
            [sdk5_python(), "-c", code.replace("127.0.0.1:8081", servers.grpc_addr)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert result.returncode == 0, result.stderr + "".join(servers.output)
        assert len(re.findall(r"^sent \w+$", result.stdout, re.M)) == 3, result.stdout
        received = sorted(line for line in result.stdout.splitlines() if line.startswith("received "))
        assert received == [f"received TagA order {i}" for i in range(3)]
    finally:
        servers.stop()


def test_dledger_group_as_documented_elects_a_master_and_two_slaves(tmp_path: Path) -> None:
    block = readme_block(r"^    (cat > broker-n0\.conf <<'CONF'\n.*?done)$")
    lines = [line.removeprefix("    ") for line in block.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("python3 "))
    files, commands = "\n".join(lines[:start]), lines[start:]
    assert commands == [
        "python3 -m gateway.namesrv &",
        "for n in 0 1 2; do python3 -m gateway.broker -c broker-n$n.conf & done",
    ]
    # The same files on ports free here.
    namesrv_port = free_port()
    for documented in ("30911", "31911", "32911"):
        files = files.replace(documented, str(free_port()))
    for documented in ("40911", "40912", "40913"):
        files = files.replace(documented, str(free_port()))
    subprocess.run(["bash", "-c", files.replace("9876", str(namesrv_port))], cwd=tmp_path, check=True)
    (tmp_path / "namesrv.properties").write_text(f"listenPort={namesrv_port}\nbindAddress=127.0.0.1\n")
    procs = [popen(python(["python3", "-m", "gateway.namesrv", "-c", "namesrv.properties"]), tmp_path)]
    try:
        for n in range(3):
            procs.append(popen(python(["python3", "-m", "gateway.broker", "-c", f"broker-n{n}.conf"]), tmp_path))
        addrs = {
            f"n{n}": "127.0.0.1:" + re.search(r"listenPort=(\d+)", (tmp_path / f"broker-n{n}.conf").read_text())[1]
            for n in range(3)
        }
        admin = blocking.Admin(f"127.0.0.1:{namesrv_port}")
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    route = {d.broker_name: d.broker_addrs for d in admin.get_route("TBW102").broker_datas}
                except Exception:
                    route = {}
                ids = route.get("broker-a", {})
                if (len(ids) == 3 and 0 in ids) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        finally:
            admin.shutdown()
        assert 0 in ids and set(ids.values()) == set(addrs.values()), ids
        # The slaves under their self id's number + 1.
        master = next(i for i, a in addrs.items() if a == ids[0])
        assert {k: v for k, v in ids.items() if k} == {int(i[1:]) + 1: a for i, a in addrs.items() if i != master}
    finally:
        for proc in reversed(procs):
            stop(proc)
