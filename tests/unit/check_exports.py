"""Exported-symbol check for libcinfer.so (ctest unit_library_exports).

The engine is built with hidden visibility and exports what include/cinfer/cinfer.h marks CINFER_API. This holds
the line both ways: every symbol in the library's dynamic table is a cinfer_* function the header declares (an
internal name there would become ABI by accident), and every function the header declares is exported (one left
without CINFER_API would link in-tree and fail for users).

Usage: check_exports.py NM LIBCINFER_SO CINFER_H
"""
import re
import subprocess
import sys


def exported(nm, library):
    out = subprocess.run([nm, "-D", "--defined-only", library], check=True, capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def declared(header):
    """Function names the public header declares (a declaration starts at column 0 and names cinfer_x before '(')."""
    text = open(header, encoding="utf-8").read()
    return set(re.findall(r"^[A-Za-z][^\n;(]*?\b(cinfer_[a-z0-9_]+)\(", text, re.MULTILINE))


def main():
    nm, library, header = sys.argv[1:4]
    symbols, api = exported(nm, library), declared(header)
    if not api:
        print(f"FAIL: found no function declarations in {header}")
        return 1
    offenders = sorted(s for s in symbols if not s.startswith("cinfer_"))
    undeclared = sorted(s for s in symbols if s.startswith("cinfer_") and s not in api)
    hidden = sorted(api - symbols)
    for what, names in (("exports internal symbols (not cinfer_*)", offenders),
                        ("exports cinfer_* symbols include/cinfer/cinfer.h does not declare", undeclared),
                        ("does not export functions include/cinfer/cinfer.h declares (CINFER_API missing?)", hidden)):
        if names:
            print(f"FAIL: {library} {what}: {' '.join(names)}")
    if offenders or undeclared or hidden:
        return 1
    print(f"ok: {library} exports exactly the {len(api)} functions of {header}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
