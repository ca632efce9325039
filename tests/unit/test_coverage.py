"""docs/coverage.md (op coverage against onnxruntime's CPU provider) is what tools/gen_coverage.py makes from the pinned
onnx and onnxruntime, `cinfer ops` and the CUDA kernel tables: regenerate it after adding an op or changing a pin."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_coverage_table_is_current():
    cli = os.environ.get("CINFER_CLI")
    if not cli:
        pytest.fail("CINFER_CLI (the cinfer tool) is not set: the table is made from `cinfer ops`")
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_coverage.py"), cli, "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_every_gap_has_a_reason():
    rows = [line.split("|")[1:-1] for line in (ROOT / "docs" / "coverage.md").read_text().splitlines()
            if line.startswith("| ai.onnx") or line.startswith("| com.microsoft")]
    assert len(rows) > 200
    for domain, op, _version, _ort, cpu, cuda, reason in rows:
        if "no" in (cpu.strip(), cuda.strip()):
            assert reason.strip(), f"{domain.strip()} {op.strip()} has a gap and no reason"
