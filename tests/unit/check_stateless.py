"""The shared internals hold no mutable state (ctest unit_internals_stateless).

libcinfer.so and the CUDA module each link their own copy of the cinfer_internals objects (CMakeLists.txt), so a
variable in them would silently be two variables, one per library. This fails naming every symbol such an object
defines in a writable data section (.data, .bss, thread-local); constants (.rodata, .data.rel.ro) are fine.

Usage: check_stateless.py NM "OBJECT;OBJECT;..."
"""
import subprocess
import sys

WRITABLE = (".data", ".bss", ".tdata", ".tbss", "COMMON")


def writable_symbols(nm, obj):
    out = subprocess.run([nm, "-f", "sysv", "--defined-only", obj], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) < 7:
            continue
        name, section = fields[0], fields[6]
        if section.startswith(".data.rel.ro") or name.startswith((".L", "__asan", "___asan", "__odr_asan", "__sancov")):
            continue  # relocated constants; sanitizer and coverage bookkeeping
        if section.startswith(WRITABLE):
            yield name, section


def main():
    nm, objects = sys.argv[1], [o for o in sys.argv[2].split(";") if o]
    if not objects:
        print("FAIL: no objects given")
        return 1
    bad = [f"{obj.rsplit('/', 1)[-1]}: {name} ({section})" for obj in objects for name, section in writable_symbols(nm, obj)]
    if bad:
        print("FAIL: cinfer_internals objects hold mutable state (each library would get its own copy):")
        print("\n".join("  " + b for b in bad))
        return 1
    print(f"ok: {len(objects)} cinfer_internals objects hold no mutable state")
    return 0


if __name__ == "__main__":
    sys.exit(main())
