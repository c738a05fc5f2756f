"""benchmarks/versus.py runs end to end on our servers (its figures are not checked here: benchmarks, not tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_versus_runs_our_pair_and_verifies_its_drains(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    argv = [sys.executable, "-m", "benchmarks.versus", "--rounds", "1", "--duration", "1", "--warmup", "0.5",
            "--settle", "0.5", "--topics", "5", "--connections", "5", "--no-scaling", "--save", str(out)]  # fmt: skip
    run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "every drain matched its sends, no send errors" in run.stdout
    [ours] = json.loads(out.read_text())["results"]["ours"]
    for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        assert ours[flush]["send"]["rate"] > 0
        assert ours[flush]["drain"]["verify"].startswith("OK")
    assert len(ours["loaded_rss_mb"]) == 2 and ours["idle_rss_one_process_mb"] > 0
