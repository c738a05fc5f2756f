"""Run the RocketMQ 5.x Node.js SDK programs (compat_tests/node/sdk5_*.js) against a gRPC endpoint.

``npm --prefix compat_tests/node install`` (done by scripts/test) installs rocketmq-client-nodejs 1.0.8 from
package-lock.json. Each program prints JSON lines (see sdk5_common.js); :func:`run` waits for one, :func:`start`
leaves it running beside the test (a consumer waiting while something else produces).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from .test_ali_ons import NODE_DIR, SLACK, Run

NODE = shutil.which("node")
SDK = NODE_DIR / "node_modules" / "rocketmq-client-nodejs"
EXIT_TIMEOUT = 3


def require_sdk() -> None:
    """Skip the calling module when Node.js or the SDK is missing."""
    if NODE is None:
        pytest.skip("node is not installed: the Node.js 5.x SDK tests need it", allow_module_level=True)
    if not SDK.is_dir():
        pytest.skip(
            "rocketmq-client-nodejs is not installed: run `npm --prefix compat_tests/node install` (scripts/test does)",
            allow_module_level=True,
        )


def _command(program: str, endpoints: str, topic: str, options: dict[str, Any], timeout: float) -> list[str]:
    assert NODE is not None
    cmd = [NODE, str(NODE_DIR / f"sdk5_{program}.js"), "--endpoints", endpoints, "--topic", topic]
    for name, value in {**options, "timeout": timeout}.items():
        if value is not None:
            cmd += [f"--{name.replace('_', '-')}", str(value).lower() if isinstance(value, bool) else str(value)]
    return cmd


def run(
    program: str, endpoints: str, topic: str, timeout: float = 60, env: dict[str, str] | None = None, **options: Any
) -> Run:
    """Run ``sdk5_<program>.js`` to its end; options become ``--name value`` (``work_ms`` → ``--work-ms``);
    ``env`` is added to the program's environment."""
    cmd = _command(program, endpoints, topic, options, timeout)
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout + SLACK,
            cwd=NODE_DIR,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        pytest.fail(f"{program} was killed after {timeout + SLACK}s\n{Run(program, None, out, err).describe()}")
    return Run(program, proc.returncode, proc.stdout, proc.stderr)


class Background:
    """A program left running; :meth:`wait_ready` until its client started, :meth:`finish` for its output."""

    def __init__(self, program: str, cmd: list[str], timeout: float) -> None:
        self.program = program
        self.timeout = timeout
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=NODE_DIR, stdin=subprocess.DEVNULL
        )
        self.lines: list[str] = []

    def wait_ready(self) -> None:
        """Read stdout until the program says ``ready`` (its client has routes and settings)."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith("{") and json.loads(line).get("event") == "ready":
                return
        pytest.fail(f"{self.program} ended before it was ready\n{self.finish().describe()}")

    def finish(self) -> Run:
        """Wait for the program's end (killing it past its timeout) and return what it printed."""
        try:
            out, err = self.proc.communicate(timeout=self.timeout + SLACK)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        return Run(self.program, self.proc.returncode, "".join(self.lines) + out, err)


def start(program: str, endpoints: str, topic: str, timeout: float = 60, **options: Any) -> Background:
    """Start ``sdk5_<program>.js`` and return once it is ready."""
    cmd = _command(program, endpoints, topic, options, timeout)
    bg = Background(program, cmd, timeout)
    bg.wait_ready()
    return bg


def spec_file(tmp_path: Path, specs: list[dict[str, Any]]) -> Path:
    """``specs`` written as sdk5_producer.js's ``--messages`` file (one JSON object a line)."""
    path = tmp_path / f"sdk5-{uuid.uuid4().hex[:8]}.jsonl"
    path.write_text("".join(json.dumps(s, ensure_ascii=False) + "\n" for s in specs), encoding="utf-8")
    return path


def produce(
    tmp_path: Path,
    endpoints: str,
    topic: str,
    specs: list[dict[str, Any]],
    timeout: float = 60,
    env: dict[str, str] | None = None,
    **options: Any,
) -> Run:
    """Send ``specs`` (sdk5_producer.js's message lines, more ``options`` as in :func:`run`) and check every one
    was sent."""
    result = run("producer", endpoints, topic, timeout=timeout, env=env, messages=spec_file(tmp_path, specs), **options)
    done = result.of("done")
    assert result.returncode == 0 and done and done[-1]["sent"] == len(specs), result.describe()
    return result
