"""`cmake --install` into a scratch prefix: the files land where README says, the installed programs run from the
prefix without LD_LIBRARY_PATH, and examples/run_model.c builds against the prefix through pkg-config (shared and
static) and prints what the build tree's example prints."""
import os
import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = ROOT / "examples" / "models"
BUILD = pathlib.Path(os.environ["CINFER_BUILD_DIR"])
PREFIX = BUILD / "install-test-prefix"
CC = os.environ.get("CINFER_CC", "cc")
# Sanitizer builds: the static library's objects call the sanitizer runtimes, so the example links them too.
EXTRA_FLAGS = os.environ.get("CINFER_TEST_LINK_FLAGS", "").split()


def run(args, env=None, expect=0):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == expect, \
        f"{args}: exit {p.returncode}, expected {expect}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    return p.stdout


def clean_env(**extra):
    """The environment without LD_LIBRARY_PATH: whatever runs must find its libraries on its own."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env.update(extra)
    return env


def resolved_libraries(path):
    """ldd's soname -> resolved path for a program or library (the loader's real search, RUNPATH included)."""
    out = run(["ldd", path], env=clean_env())
    assert "not found" not in out, out
    return dict(re.findall(r"^\s*(\S+) => (\S+)", out, re.M))


@pytest.fixture(scope="module")
def prefix():
    shutil.rmtree(PREFIX, ignore_errors=True)
    run([os.environ.get("CMAKE_COMMAND", "cmake"), "--install", BUILD, "--prefix", PREFIX])
    return PREFIX


def pkg_config(prefix, *args):
    env = clean_env(PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    return run([os.environ.get("PKG_CONFIG", "pkg-config"), *args, "cinfer"], env=env).split()


def test_files_are_installed(prefix):
    expected = ["bin/cinfer", "lib/libcinfer.so", "lib/libcinfer.so.0", "lib/libcinfer.a",
                "include/cinfer/cinfer.h", "lib/pkgconfig/cinfer.pc"]
    if os.environ.get("CINFER_HAVE_SERVER") == "ON":
        expected.append("bin/cinfer-server")
    missing = [f for f in expected if not (prefix / f).exists()]
    assert not missing, f"not installed: {missing}"
    assert (prefix / "include/cinfer/cinfer.h").read_bytes() == (ROOT / "include/cinfer/cinfer.h").read_bytes()
    # The engine looks for the CUDA module beside libcinfer.so (src/runtime/device.c): there, and only when built.
    assert (prefix / "lib/libcinfer_cuda.so").exists() == (os.environ.get("CINFER_HAVE_CUDA") == "ON")


def test_installed_programs_run_from_the_prefix(prefix):
    programs = ["cinfer"] + (["cinfer-server"] if os.environ.get("CINFER_HAVE_SERVER") == "ON" else [])
    for name in programs:
        libs = resolved_libraries(prefix / "bin" / name)
        assert pathlib.Path(libs["libcinfer.so.0"]).resolve() == (prefix / "lib/libcinfer.so.0").resolve(), libs
    version = run([prefix / "bin/cinfer", "version"], env=clean_env())
    assert version.strip() == f"cinfer {os.environ['CINFER_VERSION']}", version
    ops = run([prefix / "bin/cinfer", "ops"], env=clean_env())
    for op in ("Conv", "Gemm", "MatMul", "Relu", "Softmax"):
        assert re.search(rf"^ai\.onnx\s+{op}\s", ops, re.M), f"{op} missing from `cinfer ops`:\n{ops}"
    if os.environ.get("CINFER_HAVE_SERVER") == "ON":
        assert "--model-repository" in run([prefix / "bin/cinfer-server", "--help"], env=clean_env())


def test_installed_cuda_module_resolves_its_libraries(prefix):
    """The module binds to the engine through the table it is handed at load (docs/cuda.md), not by linking
    libcinfer: installed, every library it needs (CUDA's, cuDNN, OpenBLAS) resolves from its RUNPATH."""
    if os.environ.get("CINFER_HAVE_CUDA") != "ON":
        pytest.skip("the CUDA module is not built here (CINFER_CUDA off or no nvcc)")
    libs = resolved_libraries(prefix / "lib/libcinfer_cuda.so")  # fails on any "not found"
    assert "libcinfer.so.0" not in libs, libs
    assert any(name.startswith("libcudart") for name in libs), libs


def test_pkg_config_flags_point_into_the_prefix(prefix):
    cflags, libs = pkg_config(prefix, "--cflags"), pkg_config(prefix, "--libs")
    assert [pathlib.Path(f[2:]).resolve() for f in cflags if f.startswith("-I")] == [(prefix / "include").resolve()]
    assert [pathlib.Path(f[2:]).resolve() for f in libs if f.startswith("-L")] == [(prefix / "lib").resolve()]
    assert "-lcinfer" in libs
    assert pkg_config(prefix, "--modversion") == [os.environ["CINFER_VERSION"]]


@pytest.fixture(scope="module")
def expected_output():
    """What the build tree's example prints for each bundled model: the installed one must print the same."""
    return {m: run([os.environ["CINFER_EXAMPLE"], MODELS / m]) for m in ("mlp.onnx", "tiny_cnn.onnx")}


def check_example_runs(program, expected_output):
    for model, expected in expected_output.items():
        out = run([program, MODELS / model], env=clean_env())
        assert out == expected and "output " in out, f"{model}:\n{out}\nexpected:\n{expected}"


def test_example_builds_with_pkg_config_against_the_shared_library(prefix, tmp_path, expected_output):
    libdir = pkg_config(prefix, "--variable=libdir")[0]
    program = tmp_path / "run_model"
    # A prefix off the loader's path needs its lib/ on the RUNPATH (or LD_LIBRARY_PATH), as README says.
    run([CC, ROOT / "examples/run_model.c", "-o", program, *pkg_config(prefix, "--cflags", "--libs"),
         f"-Wl,-rpath,{libdir}", *EXTRA_FLAGS])
    assert pathlib.Path(resolved_libraries(program)["libcinfer.so.0"]).resolve() == \
        (prefix / "lib/libcinfer.so.0").resolve()
    check_example_runs(program, expected_output)


def test_example_links_libcinfer_a_with_pkg_config_static(prefix, tmp_path, expected_output):
    """pkg-config --static adds Libs.private: with them, libcinfer.a alone links (nothing undefined, no .so)."""
    flags = ["-l:libcinfer.a" if f == "-lcinfer" else f for f in pkg_config(prefix, "--cflags", "--libs", "--static")]
    program = tmp_path / "run_model_static"
    run([CC, ROOT / "examples/run_model.c", "-o", program, *flags, *EXTRA_FLAGS])
    assert "libcinfer.so.0" not in resolved_libraries(program)
    check_example_runs(program, expected_output)
