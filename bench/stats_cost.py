#!/usr/bin/env python3
"""stats_cost.py — what the statistics counters cost: shoal built with and
without SHOAL_STATISTICS, side by side.

    python3 bench/stats_cost.py [--only NAMES] [--runs N] [--build-root DIR]

Builds libshoal.so twice with CMake (Release, no tests): DIR/build-stats
with the counters (the default build) and DIR/build-nostats with
-DSHOAL_STATISTICS=OFF, where the counting compiles to nothing. Then:

- instructions per malloc+free pair of 64 bytes, counted by callgrind as
  tools/fastpath-instructions.sh does (2M pairs minus 1M pairs), when
  valgrind is here: exact, immune to the machine's noise;
- the workloads of run.py at their quick size, run as run.py runs them
  (its own run_all: preloaded, interleaved, the order rotating), the two
  libraries as two allocators "shoal" and "shoal-nostats".

Writes bench/results/<date>-stats-cost.md (--results-dir) and prints it.
The ratio is nostats / stats of the median time: below 1 the counters
cost time; the spread says how far to trust it.
"""

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(Path(__file__).resolve().parent))
import report  # noqa: E402
import run  # noqa: E402

DEFAULT_WORKLOADS = "scaling,mtalloc,prodcons,larson,strappend,smallobj"
VARIANTS = {"shoal": "ON", "shoal-nostats": "OFF"}  # allocator name -> SHOAL_STATISTICS


def build_library(build_dir, statistics):
    """Configures and builds libshoal.so in build_dir; returns its path."""
    configure = ["cmake", "-S", str(run.ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                 "-DSHOAL_BUILD_TESTS=OFF", f"-DSHOAL_STATISTICS={statistics}"]
    for command in (configure, ["cmake", "--build", str(build_dir), "--target", "shoal", "-j",
                                str(os.cpu_count() or 2)]):
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            run.fail(f"{' '.join(command)} failed:\n{done.stdout[-4000:]}")
    return build_dir / "libshoal.so"


def fastpath_instructions(libraries):
    """{name: (pair with the page kept, pair that empties it)}, or {} without
    valgrind: the method of tools/fastpath-instructions.sh."""
    if shutil.which("valgrind") is None:
        return {}
    counts = {}
    with tempfile.TemporaryDirectory() as work:
        binary = Path(work) / "fastpath"
        subprocess.run(["cc", "-O2", "-fno-builtin", str(run.ROOT / "tools" / "fastpath.c"), "-o",
                        str(binary)], check=True)

        def collected(library, iterations, keep):
            env = dict(os.environ, LD_PRELOAD=str(library))
            out = subprocess.run(["valgrind", "--tool=callgrind",
                                  f"--callgrind-out-file={work}/out", str(binary),
                                  str(iterations), "64", str(keep)],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True).stdout
            for line in out.splitlines():
                if "Collected" in line:
                    return int(line.split()[-1])
            run.fail(f"callgrind gave no count:\n{out[-2000:]}")

        for name, library in libraries.items():
            counts[name] = tuple(
                (collected(library, 2000000, keep) - collected(library, 1000000, keep)) / 1e6
                for keep in (1, 0))
    return counts


def time_table(cases, cells):
    lines = ["| case | shoal (stats) | shoal-nostats | nostats / stats |", "|---|---:|---:|---:|"]
    ratios = []
    for case in cases:
        on, off = cells[(case["label"], "shoal")], cells[(case["label"], "shoal-nostats")]
        t_on, t_off = report.median(on, "time_s"), report.median(off, "time_s")
        if t_on is None or t_off is None:
            lines.append(f"| {case['label']} | {on['status']} | {off['status']} | — |")
            continue
        ratios.append(t_off / t_on)
        lines.append(f"| {case['label']} | {report.number(t_on)} ±{report.spread(on, 'time_s'):.0%}"
                     f" | {report.number(t_off)} ±{report.spread(off, 'time_s'):.0%}"
                     f" | {t_off / t_on:.3f} |")
    if ratios:
        lines.append(f"| **geometric mean** | | | **{report.geomean(ratios):.3f}** |")
    return lines, ratios


def main():
    parser = argparse.ArgumentParser(description="cost of shoal's statistics counters")
    parser.add_argument("--only", default=DEFAULT_WORKLOADS,
                        help=f"workloads, comma-separated (default {DEFAULT_WORKLOADS})")
    parser.add_argument("--runs", type=int, default=7, help="runs per case and build (default 7)")
    parser.add_argument("--build-root", type=Path, default=run.ROOT,
                        help="where build-stats/ and build-nostats/ go (default: the source root)")
    parser.add_argument("--results-dir", type=Path, default=run.BENCH_DIR / "results")
    args = parser.parse_args()
    if args.runs < 1:
        run.fail("--runs must be at least 1")
    names = run.parse_names(args.only, list(run.WORKLOADS), "workload")

    root = args.build_root.absolute()
    libraries = {name: build_library(root / ("build-stats" if on == "ON" else "build-nostats"), on)
                 for name, on in VARIANTS.items()}
    instructions = fastpath_instructions(libraries)

    workload_dir = root / "build-stats" / "workloads"
    run.build(names, workload_dir)
    cases = run.make_cases(names, "quick")
    started = datetime.datetime.now()
    results = run.run_all(cases, libraries, workload_dir, "quick", args.runs,
                          run.TIMEOUT_S["quick"])
    minutes = (datetime.datetime.now() - started).total_seconds() / 60
    cells = report.summarise(cases, list(libraries), results)
    table, ratios = time_table(cases, cells)

    text = [f"# Cost of the statistics counters, {started:%Y-%m-%d}", "",
            "shoal built twice from the same tree: with the counters (the default, "
            "`SHOAL_STATISTICS=ON`) and without (`-DSHOAL_STATISTICS=OFF`: `counter_add` compiles "
            "to nothing). Command: `python3 bench/stats_cost.py "
            f"--only {','.join(names)} --runs {args.runs}`; {report.cpu_model()}, "
            f"{os.cpu_count()} CPUs.", ""]
    if instructions:
        text += ["## Instructions per malloc+free pair of 64 bytes", "",
                 "callgrind, 2 M pairs minus 1 M pairs (as `tools/fastpath-instructions.sh`); "
                 "exact, unlike the times.", "",
                 "| build | page kept | page emptied |", "|---|---:|---:|"]
        text += [f"| {name} | {kept:.0f} | {emptied:.0f} |"
                 for name, (kept, emptied) in instructions.items()]
        text.append("")
    text += ["## Time (s)", "",
             f"Median of {args.runs} runs of each quick case, ±the spread ((max − min) / median), "
             f"the two builds interleaved by run.py's runner ({minutes:.1f} min). "
             "Below 1 the build without counters is faster.", ""]
    text += table
    text.append("")
    if not ratios:
        run.fail("no case succeeded under both builds")
    args.results_dir.mkdir(parents=True, exist_ok=True)
    path = args.results_dir / f"{started:%Y-%m-%d}-stats-cost.md"
    path.write_text("\n".join(text))
    print("\n".join(text))
    print(f"written to {path}", file=sys.stderr)
    bad = [r for r in results if r["status"] != "ok"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
