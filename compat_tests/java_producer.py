"""The official Java client's producer for DLedger tests (``ROCKETMQ_JAVA_CLASSPATH``): FailoverProducer
(compat_tests/java_failover/) sends synchronously one message after another until its stdin is closed, printing
each SendResult."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

from .servers import jdk_tool

CLASSPATH = os.environ.get("ROCKETMQ_JAVA_CLASSPATH", "").strip()

SOURCE = Path(__file__).resolve().parent / "java_failover" / "FailoverProducer.java"


def compile_producer(out: Path) -> Path:
    """FailoverProducer compiled into ``out`` against the Java client's jars."""
    javac = [jdk_tool("javac"), "-encoding", "UTF-8", "-nowarn", "-d", str(out), "-cp", CLASSPATH, str(SOURCE)]
    compiled = subprocess.run(javac, capture_output=True, text=True, timeout=180)
    assert compiled.returncode == 0, compiled.stderr
    return out


class JavaProducer:
    """FailoverProducer in a child process until its stdin is closed; a thread collects its lines."""

    def __init__(self, classes: Path, tmp_path: Path, namesrv: str, run: str, topic: str) -> None:
        logs = tmp_path / f"java-logs-{run}"
        logs.mkdir()
        self.stderr = tmp_path / f"java-stderr-{run}.txt"
        self._err = self.stderr.open("w")
        self.proc = subprocess.Popen(
            [
                jdk_tool("java"),
                "-Xmx256m",
                f"-Drocketmq.client.logRoot={logs}",
                "-cp",
                f"{classes}{os.pathsep}{CLASSPATH}",
                "FailoverProducer",
                namesrv,
                topic,
                f"java_failover_pg_{run}",
                run,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
        )
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._pump_thread = threading.Thread(target=self._pump, daemon=True)
        self._pump_thread.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def of(self, kind: str) -> list[list[str]]:
        with self._lock:
            return [line.split(" ", 6)[1:] for line in self.lines if line.startswith(kind + " ")]

    def finish(self) -> str:
        """Close its stdin and wait for it to end; returns its stderr."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._pump_thread.join(10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self._err.close()
        return self.stderr.read_text(errors="replace")
