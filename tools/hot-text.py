#!/usr/bin/env python3
"""Writes cmake/hot-text.ld: the functions of libshoal that common programs
run, which the build links into one segment of their own.

The kernel maps the pages of a file 64 KiB around each fault, within the
mapping; with the common code spread over the library's text, every page of
it was resident in every process (132 KiB, where a process runs some 48).
Gathered into a segment (a mapping) of its own, the rest (diagnostics,
reports of bad input, the rarer paths) is never mapped in a common process. The
same script starts new segments before the unwind tables and before .data
(see its header).

The functions are those callgrind sees run, in a release build, by
test/resident_text.c's paths, by tools/fastpath.c and by the bench's
workloads at their tiny sizes, plus every entry point of api/exports.c;
those that more of these programs run come first, the hottest first among
equals. The compilers inline and split differently, so the
list is the union of the gcc and the clang build's. Run it after a change
that puts a new function on a common path (test resident_text fails then,
naming the pages):

    make test-release test-clang       (builds both, with their tests)
    tools/hot-text.py build build-clang

It needs valgrind, each BUILD_DIR built with its tests and, for the bench's
workloads, `python3 bench/run.py --tiny` run once (build/bench).
"""
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "cmake" / "hot-text.ld"

# Each workload at its tiny size, as bench/run.py --tiny runs it.
WORKLOADS = ["scaling tiny 2", "mtalloc tiny 2", "mtrealloc tiny 2", "prodcons tiny 2",
             "xmalloc tiny 2", "larson tiny 2", "larson tiny 2 sized", "mstress tiny 2",
             "rptest tiny 2", "strappend tiny", "smallobj tiny", "largeblk tiny",
             "largemix tiny 1", "giveback tiny 2", "cthrash tiny 2", "parallel tiny 2"]

HEADER = """\
/* hot-text.ld: written by tools/hot-text.py, which says how; do not edit.
 *
 * The functions of libshoal that common programs run, linked into a segment
 * of their own, apart from the rest of the code, which a common process then
 * never maps (the kernel maps a file's pages 64 KiB around each fault, but
 * not past the mapping). A gap of more than a page before and after the
 * section starts a new segment (the linker starts one where the next
 * section begins past the page after the last one's end): 64 KiB of
 * address space each, whatever the sections' sizes. The start-up and exit code (crtbeginS,
 * .fini, constructors and destructors) and libc_nonshared's pthread_atfork
 * run in every process, so they come along. test/resident_text.c checks
 * that a common process maps none of the rest.
 * Two more gaps, for the same reason: before .eh_frame_hdr, so that the
 * unwind tables, read only when an exception passes through the library,
 * are not mapped with .rodata; before .data, so that the loader's read of
 * .dynamic does not map the empty heap's 19 KiB (heap.c's heap_empty),
 * of which a process writes the first page (its relocations) and reads no
 * other. */
"""


def defined_functions(build, objects, kinds):
    """Function names the objects define (nm symbol types in kinds), without
    the compilers' suffixes (.part.0, .cold, ...)."""
    names = set()
    for obj in (build / "CMakeFiles").glob(f"{objects}.dir/**/*.o"):
        out = subprocess.run(["nm", "--defined-only", str(obj)], capture_output=True,
                             text=True, check=True).stdout
        for parts in (line.split() for line in out.splitlines()):
            if len(parts) == 3 and parts[1] in kinds:
                names.add(parts[2].split(".")[0])
    return names


def callgrind_costs(library, command, work, name, costs, runs):
    out = work / f"{name}.out"
    env = dict(os.environ, LD_PRELOAD=str(library))
    run = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + command,
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if run.returncode != 0:
        sys.exit(f"hot-text: {' '.join(command)} failed under valgrind")
    report = subprocess.run(["callgrind_annotate", "--threshold=100", str(out)],
                            capture_output=True, text=True, check=True).stdout
    # "  1,234 (0.5%)  ???:function'2 [/path/libshoal.so.0.1.0]"; valgrind
    # names the object of some functions of the library's own segments "???".
    pattern = re.compile(r"^\s*([\d,]+) .*?:([^ :\[]+) \[(.*)\]$")
    ran = set()
    for line in report.splitlines():
        match = pattern.match(line)
        if match and ("libshoal" in match.group(3) or match.group(3) == "???"):
            function = match.group(2).split("'")[0].split(".")[0]
            costs[function] = costs.get(function, 0) + int(match.group(1).replace(",", ""))
            ran.add(function)
    for function in ran:
        runs[function] = runs.get(function, 0) + 1


def profile(build, bench, work, costs, runs):
    """Adds what the programs run of BUILD's library to costs."""
    library = build / "libshoal.so"
    exercise = build / "test" / "test_resident_text"
    for needed in (library, exercise):
        if not needed.exists():
            sys.exit(f"hot-text: no {needed} (a release build with its tests first)")
    tag = build.name
    fastpath = work / "fastpath"
    callgrind_costs(library, [str(exercise), "exercise"], work, f"{tag}-exercise", costs, runs)
    for keep in ("1", "0"):
        callgrind_costs(library, [str(fastpath), "100000", "64", keep], work,
                        f"{tag}-fastpath{keep}", costs, runs)
    for case in WORKLOADS:
        words = case.split()
        program = bench / words[0]
        if not program.exists():
            sys.exit(f"hot-text: no {program} (python3 bench/run.py --tiny builds it)")
        callgrind_costs(library, [str(program)] + words[1:], work, f"{tag}-" + "-".join(words),
                        costs, runs)


def main():
    builds = [Path(arg).resolve() for arg in sys.argv[1:]] or [ROOT / "build"]
    bench = ROOT / "build" / "bench"
    costs, runs = {}, {}
    defined = set()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run(["cc", "-O2", "-fno-builtin", str(ROOT / "tools" / "fastpath.c"), "-o",
                        str(work / "fastpath")], check=True)
        for build in builds:
            profile(build, bench, work, costs, runs)
            defined |= defined_functions(build, "shoal*objects", "tT")
    # What the most programs run first, the hottest first among those: the
    # kernel maps the segment 64 KiB at a time, and a process that runs only
    # what nearly every process runs (start-up and exit included, run once
    # but in each) then maps the first 64 KiB alone, not the rare entry
    # points, fork's handlers and C++'s operators after them.
    hot = sorted((f for f in costs if f in defined), key=lambda f: (-runs[f], -costs[f], f))
    hot += sorted(defined_functions(builds[0], "shoal_export_objects", "T") - set(hot))
    lines = [HEADER, "SECTIONS\n{\n  .text.shoal_hot ALIGN(0x10000) :\n  {\n",
             "    *crtbeginS.o(.text .text.*)\n",
             "    *pthread_atfork.oS(.text .text.*)\n",
             "    KEEP (*(SORT_NONE(.fini)))\n",
             "    *(.text.startup .text.startup.* .text.exit .text.exit.*)\n"]
    for f in hot:
        lines.append(f"    *(.text.{f} .text.{f}.* .text.unlikely.{f} .text.unlikely.{f}.*)\n")
    lines.append("  }\n  . += 0x10000;\n}\nINSERT BEFORE .text;\n")
    for section in (".eh_frame_hdr", ".data"):
        lines.append(f"\nSECTIONS\n{{\n  . += 0x10000;\n}}\nINSERT BEFORE {section};\n")
    OUTPUT.write_text("".join(lines))
    print(f"hot-text: {len(hot)} functions into {OUTPUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
