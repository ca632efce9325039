"""The soak (bench/soak/soak.py) as a ctest: perf_analyzer load on one model while a second model is loaded, used and
unloaded over and over; zero failed requests, model memory (and the GPU allocator's bytes when exposed) back exactly to
baseline after every unload, RSS growth under the soak's bound. CINFER_SOAK_SECONDS sets the duration (120 in CI;
the sanitizer build's ctest uses 30 and sets CINFER_SOAK_RSS_BOUND_MIB=off: ASan's quarantine holds freed memory; leaks
are server_valgrind's job). Skips without perf_analyzer, except under CI."""
import os
import pathlib
import sys

import pytest

from conftest import SERVER
from test_perf_analyzer import _perf_available, PERF

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "soak"))
import soak  # noqa: E402


def test_soak():
    ok, why = _perf_available()
    if not ok:
        if os.environ.get("CI"):
            pytest.fail(f"perf_analyzer must be installed in CI: {why}")
        pytest.skip(why)
    seconds = float(os.environ.get("CINFER_SOAK_SECONDS", "120"))
    bound = os.environ.get("CINFER_SOAK_RSS_BOUND_MIB", "6")
    bound = None if bound == "off" else float(bound)
    s = soak.run(SERVER, PERF, seconds, rss_bound_mib=bound, log=lambda m: print(m, flush=True))
    print(s)
    assert s["cycles"] >= 3 and s["perf_requests"] > 0 and s["second_requests"] == 3 * s["cycles"]
    assert bound is None or s["rss_growth_mib"] <= bound
    assert s["server_exit"] == 0


def test_metrics_parser_and_family():
    m = soak.parse_metrics('# HELP x y\nx{model="a",kind="CPU"} 5\nx{model="b"} 1.5e3\ny 2\n')
    assert m[("x", (("kind", "CPU"), ("model", "a")))] == 5 and m[("x", (("model", "b"),))] == 1500 and m[("y", ())] == 2
    assert set(soak.family(m, "x").values()) == {5, 1500}
