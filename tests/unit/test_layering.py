"""Layering rules: which parts of the source tree may include which others.

Each rule says "the files under X may include only headers under Y". The test reads every #include in the files a
rule covers, resolves it the way the compiler would (a quoted name against the including file's folder first, then
the include paths src/ and include/; an angle-bracket name against src/ and include/ only), and fails naming every
file and include that breaks the rule. A quoted include that resolves to no file in the tree (a generated header, a
typo) breaks every rule, since nothing can be said about where it lives; an angle-bracket one is a system header and
no rule's business.

Adding a rule: one row in RULES (a unique name, the files it covers, what they may include, why) and one ctest entry
in tests/CMakeLists.txt (the foreach over rule names). Runs on the sources alone, nothing built: pytest
tests/unit/test_layering.py, or python tests/unit/test_layering.py [rule ...] to print the violations.
"""
import dataclasses
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
INCLUDE_PATHS = ("src", "include")  # the -I folders every target in CMakeLists.txt uses, in that order
SOURCE_SUFFIXES = (".c", ".h", ".cu", ".cuh")
INCLUDE_LINE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


@dataclasses.dataclass(frozen=True)
class Rule:
    name: str            # the ctest name is layering_<name>
    files: tuple         # folders (ending in "/") or single files, relative to the repository root
    may_include: tuple   # folders or files whose headers those files may include
    why: str


RULES = (
    Rule(name="graph",
         files=("src/graph/",),
         may_include=("src/core/", "src/graph/"),
         why="the IR, shape schemas and passes build on core/ alone: what they need from a backend (evaluating a "
             "node on the host) the runtime hands them through graph_evaluator_i (graph/graph.h)"),
)


def covered(path, prefixes):
    """True when the repository-relative path lies under one of the folders or is one of the files."""
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in prefixes)


def files_of(rule):
    found = []
    for entry in rule.files:
        target = ROOT / entry
        if target.is_file():
            found.append(target)
        else:
            found.extend(p for p in sorted(target.rglob("*")) if p.suffix in SOURCE_SUFFIXES and p.is_file())
    return found


def resolve(including, name, quoted):
    """The repository-relative path the include names, or None when no file of the tree matches."""
    folders = ([including.parent] if quoted else []) + [ROOT / p for p in INCLUDE_PATHS]
    for folder in folders:
        candidate = (folder / name).resolve()
        if candidate.is_file() and candidate.is_relative_to(ROOT):
            return candidate.relative_to(ROOT).as_posix()
    return None


def violations(rule):
    """One line per include that breaks the rule: "file:line: #include "x" (resolved) ..."."""
    found = []
    for path in files_of(rule):
        rel = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            match = INCLUDE_LINE.match(line)
            if not match:
                continue
            quoted, name = match.group(1) == '"', match.group(2)
            spelled = f'"{name}"' if quoted else f"<{name}>"
            target = resolve(path, name, quoted)
            if target is None:
                if quoted:
                    found.append(f"{rel}:{number}: #include {spelled} resolves to no file of the tree "
                                 f"(searched the file's folder, {', '.join(INCLUDE_PATHS)})")
                continue
            if not covered(target, rule.may_include):
                found.append(f"{rel}:{number}: #include {spelled} ({target}) is outside "
                             f"{', '.join(rule.may_include)}")
    return found


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_includes_follow_rule(rule):
    # a renamed folder must not leave a rule checking nothing
    assert files_of(rule), f"layering rule '{rule.name}': no source files under {', '.join(rule.files)}"
    broken = violations(rule)
    assert not broken, (f"layering rule '{rule.name}': files under {', '.join(rule.files)} may include only "
                        f"{', '.join(rule.may_include)} ({rule.why}); broken by:\n  " + "\n  ".join(broken))


def main(names):
    """Prints the violations of the named rules (all when none is named); exit status 1 when there are any."""
    unknown = set(names) - {r.name for r in RULES}
    if unknown:
        print(f"unknown layering rule(s): {', '.join(sorted(unknown))}; known: {', '.join(r.name for r in RULES)}")
        return 2
    status = 0
    for rule in RULES:
        if names and rule.name not in names:
            continue
        broken = violations(rule) if files_of(rule) else [f"no source files under {', '.join(rule.files)}"]
        print(f"layering rule '{rule.name}': {len(broken)} violation(s)")
        for line in broken:
            print("  " + line)
        status |= bool(broken)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
