"""``python -m gateway.broker`` on a damaged or unusable store: derived files rebuilt and a damaged record skipped
with a warning, then the broker boots; a store it may not use ends in one line and exit status 1."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.remoting.message import decode_records
from gateway.store import DefaultMessageStore, GetMessageStatus, StoreConfig
from tests.store.conftest import make_msg

SEGMENT = 1 << 20
MESSAGES = 600


def store_config(tmp_path: Path) -> StoreConfig:
    """What the broker started by ``run_broker`` uses: default consume-queue files (6,000,000 bytes)."""
    return StoreConfig(storePathRootDir=str(tmp_path / "store"), mappedFileSizeCommitLog=SEGMENT)


def write_messages(config: StoreConfig) -> list[tuple[int, int]]:
    """MESSAGES numbered messages in TopicTest queue 0, then a clean shutdown; their (offset, size)."""
    store = DefaultMessageStore(config)
    store.start()
    results = [store.put_message(make_msg(body=b"%04d" % i + bytes(996))).append for i in range(MESSAGES)]
    store.shutdown()
    return [(r.wrote_offset, r.wrote_bytes) for r in results if r is not None]


def pullable(config: StoreConfig) -> list[int]:
    """Numbers of the messages a consumer of TopicTest queue 0 gets, in order."""
    store = DefaultMessageStore(config)
    store.start()
    numbers = []
    try:
        offset = 0
        while (r := store.get_message("g", "TopicTest", 0, offset, 32)) and r.status is GetMessageStatus.FOUND:
            numbers += [int(m.body[:4]) for m in decode_records(b"".join(r.buffers))]
            offset = r.next_begin_offset
    finally:
        store.shutdown()
    return numbers


def broker_command(tmp_path: Path, config: StoreConfig) -> list[str]:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "listenPort=0\nbindAddress=127.0.0.1\nbrokerIP1=127.0.0.1\n"
        f"storePathRootDir={config.storePathRootDir}\nmappedFileSizeCommitLog={config.mappedFileSizeCommitLog}\n"
    )
    return [sys.executable, "-m", "gateway.broker", "-c", str(conf), "--log-dir", str(tmp_path / "logs")]


def boot_and_stop(tmp_path: Path, config: StoreConfig) -> str:
    """Run the broker until it says it booted, stop it with SIGTERM; its stderr (the console's warnings)."""
    env = {**os.environ, "NAMESRV_ADDR": ""}
    command = broker_command(tmp_path, config)
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            # Warnings may come first (a VIP port taken by another test's connection): read up to the ready line.
            seen = []
            while (line := proc.stdout.readline()) and "boot success" not in line:
                seen.append(line)
            assert line, "".join(seen) + proc.stderr.read()
            proc.send_signal(signal.SIGTERM)
            _, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, stderr
    return stderr


def refused(tmp_path: Path, config: StoreConfig) -> str:
    """Run the broker, which must exit 1 at once; the one line it printed on stderr."""
    env = {**os.environ, "NAMESRV_ADDR": ""}
    run = subprocess.run(broker_command(tmp_path, config), capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 1, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    return lines[0]


def test_truncated_consume_queue_is_rebuilt_at_start(tmp_path: Path) -> None:
    config = store_config(tmp_path)
    write_messages(config)
    damaged = Path(config.consume_queue_root) / "TopicTest" / "0" / f"{0:020d}"
    os.truncate(damaged, 2000)
    stderr = boot_and_stop(tmp_path, config)
    assert (
        f"consume queue TopicTest-0 is damaged ({damaged}: length 2000 does not match the configured 6000000): "
        "rebuilding it from the commitlog"
    ) in stderr
    assert pullable(config) == list(range(MESSAGES))


def test_damaged_record_mid_segment_is_skipped_at_start(tmp_path: Path) -> None:
    config = store_config(tmp_path)
    records = write_messages(config)
    offset, size = records[300]
    with open(Path(config.commit_log_path) / f"{0:020d}", "r+b") as f:
        f.seek(offset + 4)
        f.write(b"\0\0\0\1")  # the magic code
    stderr = boot_and_stop(tmp_path, config)
    assert (
        f"commitlog: skipped damaged bytes [{offset}, {offset + size}) ({size} bytes: bad magic code 0x1 at {offset}) "
        f"from {config.commit_log_path}/{0:020d}; the records after them are kept"
    ) in stderr
    assert pullable(config) == [i for i in range(MESSAGES) if i != 300]


def test_commitlog_of_the_wrong_length_refuses_in_one_line(tmp_path: Path) -> None:
    config = store_config(tmp_path)
    write_messages(config)
    segment = Path(config.commit_log_path) / f"{0:020d}"
    os.truncate(segment, 2000)
    assert refused(tmp_path, config) == (
        f"cannot start the store: {segment}: length 2000 does not match the configured {SEGMENT}"
    )


@contextlib.contextmanager
def unwritable(path: Path) -> Iterator[None]:
    """Make ``path`` unwritable even for root: the immutable attribute (chattr +i) as root, else permission bits."""
    if os.geteuid() == 0:
        if shutil.which("chattr") is None:
            pytest.skip("chattr is needed to make a path unwritable for root")
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True)
        if done.returncode:
            pytest.skip(f"chattr +i not supported here: {done.stderr.decode().strip()}")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        mode = path.stat().st_mode
        path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield
        finally:
            path.chmod(mode)


def test_unwritable_store_directory_in_one_line(tmp_path: Path) -> None:
    config = store_config(tmp_path)
    root = Path(config.storePathRootDir)
    root.mkdir()
    with unwritable(root):
        line = refused(tmp_path, config)
    assert line.startswith(f"cannot start the store: {root}: ")
    assert line.endswith(": the store needs to read, write and create files in this directory")


def test_unwritable_store_file_in_one_line(tmp_path: Path) -> None:
    config = store_config(tmp_path)
    write_messages(config)
    segment = Path(config.commit_log_path) / f"{0:020d}"
    with unwritable(segment):
        line = refused(tmp_path, config)
    assert line.startswith(f"cannot start the store: {segment}: ")
    assert line.endswith(": the store needs to read and write this file")
