"""src/onnx/opset_table.inc (the op version history the old-opset mapping reads) is what tools/gen_opset_table.py
makes from the pinned onnx: regenerate it after changing the pin."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_opset_table_matches_the_pinned_onnx():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_opset_table.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
