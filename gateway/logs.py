"""Logging as RocketMQ's operators expect it: one file per component under a log directory
(``~/logs/rocketmqlogs`` by default, as Apache's logback configuration), rotated by size and by day with a
number of old files kept, text or JSON lines; the console shows the start and stop lines and warnings and errors.

Components follow the logger namespaces: ``gateway.store`` writes store.log, ``gateway.remoting`` and
``gateway.tls`` remoting.log, ``gateway.broker.transaction`` transaction.log, ``gateway.broker`` and
``gateway.acl`` broker.log, ``gateway.namesrv`` namesrv.log, ``gateway.controller`` controller.log; anything
else goes to the process's own file. An event logged with ``console=True`` is shown on the console too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from twisted.logger import (
    FilteringLogObserver,
    ILogObserver,
    LogLevel,
    PredicateResult,
    formatEvent,
    formatEventAsClassicLogText,
    globalLogBeginner,
    textFileLogObserver,
)
from twisted.python.logfile import LogFile
from zope.interface import implementer

# Longest prefix first: the first match names the file.
_COMPONENT_FILES = (
    ("gateway.broker.transaction", "transaction.log"),
    ("gateway.store", "store.log"),
    ("gateway.remoting", "remoting.log"),
    ("gateway.tls", "remoting.log"),
    ("gateway.broker", "broker.log"),
    ("gateway.acl", "broker.log"),
    ("gateway.namesrv", "namesrv.log"),
    ("gateway.controller", "controller.log"),
)


def default_log_dir() -> Path:
    """``$ROCKETMQ_LOG_DIR``, else ``~/logs/rocketmqlogs`` (Apache's default)."""
    return Path(os.environ.get("ROCKETMQ_LOG_DIR") or Path.home() / "logs" / "rocketmqlogs")


@dataclass(frozen=True)
class LogSettings:
    """Where and how to log. ``max_size`` is in bytes; ``max_files`` rotated files are kept per component."""

    log_dir: Path
    level: LogLevel = LogLevel.info
    json_lines: bool = False
    max_size: int = 128 * 1024 * 1024
    max_files: int = 10
    console_level: LogLevel = LogLevel.warn

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> LogSettings:
        return cls(
            log_dir=Path(args.log_dir) if args.log_dir else default_log_dir(),
            level=LogLevel.levelWithName(args.log_level),
            json_lines=args.log_json,
            max_size=args.log_max_size * 1024 * 1024,
            max_files=args.log_max_files,
            console_level=LogLevel.levelWithName(args.console_level),
        )


def add_log_arguments(parser: argparse.ArgumentParser) -> None:
    """The logging options every entry point takes."""
    group = parser.add_argument_group("logging")
    levels = ("debug", "info", "warn", "error", "critical")
    group.add_argument(
        "--log-dir", help="directory of the log files (default $ROCKETMQ_LOG_DIR or ~/logs/rocketmqlogs)"
    )
    group.add_argument("--log-level", default="info", choices=levels, help="level of the log files (default info)")
    group.add_argument("--log-json", action="store_true", help="write JSON lines instead of text")
    group.add_argument("--log-max-size", type=int, default=128, metavar="MIB", help="rotate a file at this size")
    group.add_argument("--log-max-files", type=int, default=10, metavar="N", help="rotated files kept per component")
    group.add_argument("--console-level", default="warn", choices=levels, help="console level (default warn)")


class DailyRotatingFile(LogFile):
    """A LogFile that also rotates when the local date changes; ``maxRotatedFiles`` old files are kept."""

    def __init__(self, name: str, directory: str, rotate_length: int, max_rotated: int) -> None:
        super().__init__(name, directory, rotateLength=rotate_length, maxRotatedFiles=max_rotated)
        self.day = time.localtime().tm_yday

    def shouldRotate(self) -> bool:
        return super().shouldRotate() or time.localtime().tm_yday != self.day

    def rotate(self) -> None:
        super().rotate()
        self.day = time.localtime().tm_yday


def json_line(event: dict[str, Any]) -> str:
    """One event as a JSON object on one line: time, level, logger, message (and the traceback of a failure)."""
    record: dict[str, Any] = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(event.get("log_time", time.time())))
        + f".{int(event.get('log_time', 0) % 1 * 1000):03d}",
        "level": event.get("log_level", LogLevel.info).name.upper(),
        "logger": event.get("log_namespace", ""),
        "message": formatEvent(event),
    }
    failure = event.get("log_failure")
    if failure is not None:
        record["error"] = failure.getTraceback()
    return json.dumps(record, ensure_ascii=False) + "\n"


@implementer(ILogObserver)
class ComponentFilesObserver:
    """Writes each event at ``settings.level`` or above to its component's file."""

    def __init__(self, settings: LogSettings, default_file: str) -> None:
        self.settings = settings
        self.default_file = default_file
        self.files: dict[str, DailyRotatingFile] = {}
        settings.log_dir.mkdir(parents=True, exist_ok=True)

    def close(self) -> None:
        for out in self.files.values():
            out.close()
        self.files.clear()

    def file_for(self, namespace: str) -> str:
        for prefix, name in _COMPONENT_FILES:
            if namespace == prefix or namespace.startswith(prefix + "."):
                return name
        return self.default_file

    def __call__(self, event: dict[str, Any]) -> None:
        level = event.get("log_level", LogLevel.info)
        if level < self.settings.level:
            return
        name = self.file_for(event.get("log_namespace", ""))
        out = self.files.get(name)
        if out is None:
            s = self.settings
            out = self.files[name] = DailyRotatingFile(name, str(s.log_dir), s.max_size, s.max_files)
        line = json_line(event) if self.settings.json_lines else formatEventAsClassicLogText(event)
        if line:
            out.write(line)
            out.flush()  # a crash must not lose the lines before it


def console_observer(settings: LogSettings, stream: TextIO) -> FilteringLogObserver:
    """Warnings and errors (``settings.console_level`` and up) and the events marked ``console=True``."""

    def shown(event: dict[str, Any]) -> PredicateResult:
        if event.get("console") or event.get("log_level", LogLevel.info) >= settings.console_level:
            return PredicateResult.yes
        return PredicateResult.no

    return FilteringLogObserver(textFileLogObserver(stream), [shown])


def start_logging(settings: LogSettings, default_file: str, stream: TextIO | None = None) -> ComponentFilesObserver:
    """Log to the component files and the console (stdout) from now on."""
    files = ComponentFilesObserver(settings, default_file)
    globalLogBeginner.beginLoggingTo(
        [files, console_observer(settings, stream or sys.stdout)], redirectStandardIO=False
    )
    return files
