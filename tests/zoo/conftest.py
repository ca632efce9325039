"""Fixtures of the model-coverage suite: the export cache (CINFER_ZOO_CACHE, default build/zoo-cache) shared by all
tests of a session, and the per-model table printed at the end of the run (and written to zoo-report.txt there)."""
import os
import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import catalog  # noqa: E402
import exports  # noqa: E402

ROWS = []  # one per (model, thread count): filled by test_zoo.py, printed by pytest_terminal_summary
COLUMNS = (("model", 34), ("thr", 3), ("result", 6), ("export s", 8), ("load ms", 8), ("cinfer err", 10),
           ("ort err", 9), ("cinfer ms", 9), ("torch ms", 8), ("ort ms", 8))


class Zoo:
    """The catalog's exports, made on first use (one export per model per session, or none with a warm cache)."""

    def __init__(self, directory):
        self.directory = exports.open_cache(directory)
        self.specs = {spec.name: spec for spec in catalog.all_specs()}
        self.memo = {}

    def get(self, model_id):
        if model_id not in self.memo:
            self.memo[model_id] = exports.export(model_id, self.specs, self.directory)
        return self.memo[model_id]


@pytest.fixture(scope="session")
def zoo():
    default = pathlib.Path(__file__).resolve().parents[2] / "build" / "zoo-cache"
    return Zoo(os.environ.get("CINFER_ZOO_CACHE", default))


def _cell(value, width):
    if value is None:
        text = "-"
    elif isinstance(value, float):
        text = f"{value:.1e}" if value < 0.01 and value != 0 else f"{value:.1f}" if value >= 10 else f"{value:.3g}"
    else:
        text = str(value)
    return text.rjust(width) if isinstance(value, (int, float)) else text.ljust(width)


def format_table(rows):
    lines = ["  ".join(name.ljust(width) for name, width in COLUMNS)]
    for row in rows:
        lines.append("  ".join(_cell(row.get(name), width) for name, width in COLUMNS))
        if row.get("why"):
            lines.append("      " + row["why"])
    return "\n".join(lines)


def pytest_terminal_summary(terminalreporter):
    if not ROWS:
        return
    table = format_table(ROWS)
    terminalreporter.section("zoo: cinfer vs PyTorch fp32 (err: max|diff| / max|reference|; onnxruntime beside)")
    terminalreporter.write_line(table)
    cache = pathlib.Path(os.environ.get("CINFER_ZOO_CACHE", HERE.parents[1] / "build" / "zoo-cache"))
    if cache.is_dir():
        (cache / "zoo-report.txt").write_text(table + "\n")
