#!/usr/bin/env python3
"""run.py — build the workloads, run each under every allocator, report.

    python3 bench/run.py [--full] [--only NAMES] [--alloc NAMES] [--tiny]

Each workload (bench/<name>.c) is built with gcc -O2 and run as a separate
process per allocator, which is chosen with LD_PRELOAD ("system" is glibc,
no preload). Runs are interleaved: for each case, run k of every allocator
comes before run k+1 of any, and the order of allocators rotates, so drift
of the machine hits all alike. The table gives the median of N runs (quick 3,
full 5) with the spread, (max - min) / median.

--tiny runs each workload once at its tiny size under each allocator and
fails if any run fails; it writes no results (ctest runs it).

Standard library only. report.py turns the runs into tables and charts.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import report  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent

# Workloads in run order, with the thread counts (THREADS argument) of their
# cases per mode; None runs the workload without a THREADS argument.
# The sizes themselves are fixed in each C file (tiny, quick, full).
MULTI = [2, 4, 8, 16, 32, 64]
# replay's cases are (trace in bench/traces/, THREADS): 1 replays every call
# in one thread, the trace's own thread count each traced thread in its own.
TRACE_DIR = BENCH_DIR / "traces"
REPLAYS = [("gcc", 1), ("python", 1), ("python-threads", 1), ("python-threads", 3)]
WORKLOADS = {
    "scaling": {"tiny": [2], "quick": [1, 2, 4], "full": [1, 2, 3, 4, 6, 8, 16]},
    "mtalloc": {"tiny": [2], "quick": [2, 8], "full": MULTI},
    "mtrealloc": {"tiny": [2], "quick": [2, 8], "full": MULTI},
    "prodcons": {"tiny": [2], "quick": [1, 4], "full": [1] + MULTI},
    "larson": {"tiny": [2], "quick": [2, 8], "full": MULTI},
    "strappend": {"tiny": [None], "quick": [None], "full": [None]},
    "smallobj": {"tiny": [None], "quick": [None], "full": [None]},
    "largeblk": {"tiny": [None], "quick": [None], "full": [None]},
    "giveback": {"tiny": [2], "quick": [2], "full": [2, 8, 64]},
    "cthrash": {"tiny": [2], "quick": [2], "full": MULTI},
    "loader": {"tiny": [None], "quick": [None], "full": [None]},
    "parallel": {"tiny": [2], "quick": [2], "full": MULTI},
    "replay": {"tiny": [("gcc", 1), ("python-threads", 1), ("python-threads", 3)], "quick": REPLAYS,
               "full": REPLAYS},
}

# How a case's THREADS argument reads in the tables.
THREAD_LABEL = {"prodcons": "1:{}"}

# name -> (shared library to preload, Debian package); system preloads nothing.
PEERS = {
    "mimalloc": ("libmimalloc.so.2", "libmimalloc2.0"),
    "jemalloc": ("libjemalloc.so.2", "libjemalloc2"),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
    "tbbmalloc": ("libtbbmalloc_proxy.so.2", "libtbbmalloc2"),
}
ALLOCATORS = ["system", "shoal"] + list(PEERS)
LIB_DIRS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
            "/usr/lib", "/usr/local/lib"]

CFLAGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-pthread", "-fno-builtin-malloc",
          "-fno-builtin-free", "-fno-builtin-calloc", "-fno-builtin-realloc"]
TIMEOUT_S = {"tiny": 60, "quick": 120, "full": 900}


def fail(message):
    print(f"run.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def parse_names(text, valid, what):
    """Splits "a,b" and checks each name; a bad one ends the program."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        if name not in valid:
            fail(f"unknown {what} '{name}' (valid: {', '.join(valid)})")
    return names


def find_library(filename):
    for directory in LIB_DIRS:
        path = Path(directory) / filename
        if path.exists():
            return path
    return None


def find_allocators(wanted, shoal_lib):
    """Returns {name: preload path or None} for the wanted allocators present,
    and {name: why} for those missing."""
    found, missing = {}, {}
    for name in wanted:
        if name == "system":
            found[name] = None
        elif name == "shoal":
            if shoal_lib.exists():
                found[name] = shoal_lib
            else:
                missing[name] = f"{shoal_lib} not built (run make)"
        else:
            filename, package = PEERS[name]
            path = find_library(filename)
            if path is None and os.environ.get("SHOAL_BENCH_INSTALL") == "1":
                print(f"installing {package} for {name}", file=sys.stderr)
                subprocess.run(["apt-get", "install", "-y", package], check=False)
                path = find_library(filename)
            if path is None:
                missing[name] = f"{filename} not found (Debian package {package})"
            else:
                found[name] = path
    return found, missing


def build(names, build_dir):
    """Compiles the workloads that are out of date; all at once."""
    build_dir.mkdir(parents=True, exist_ok=True)
    compiler = shutil.which("gcc") or shutil.which("cc") or fail("no C compiler (gcc) found")
    header = BENCH_DIR / "bench.h"
    jobs = []
    for name in names:
        source, binary = BENCH_DIR / f"{name}.c", build_dir / name
        depends = [source, header] + ([ROOT / "src" / "trace_format.h"] if name == "replay" else [])
        newest = max(path.stat().st_mtime for path in depends)
        if binary.exists() and binary.stat().st_mtime >= newest:
            continue
        command = [compiler, *CFLAGS, "-o", str(binary), str(source)]
        jobs.append((name, subprocess.Popen(command, stderr=subprocess.PIPE, text=True)))
    for name, job in jobs:
        _, errors = job.communicate()
        if job.returncode != 0:
            fail(f"building {name} failed:\n{errors}")
        if errors:
            print(errors, file=sys.stderr, end="")


def parse_line(name, stdout):
    """The workload's result line, "name key=value ...", as a dict of floats."""
    for line in stdout.splitlines():
        words = line.split()
        if words and words[0] == name:
            metrics = {}
            for word in words[1:]:
                key, _, value = word.partition("=")
                try:
                    metrics[key] = float(value)
                except ValueError:
                    pass
            if "time_s" in metrics:
                return metrics
    return None


def run_once(binary, size, threads, preload, timeout_s, args=()):
    """Runs one workload process. Returns a dict: status (ok, failed, crashed,
    timeout), wall_s, maxrss_kb (from wait4), metrics, message."""
    command = [str(binary), size] + ([str(threads)] if threads is not None else []) + list(args)
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if preload is not None:
        env["LD_PRELOAD"] = str(preload)
    with tempfile.TemporaryFile("w+", errors="replace") as out, \
            tempfile.TemporaryFile("w+", errors="replace") as err:
        start = time.monotonic()
        process = subprocess.Popen(command, stdout=out, stderr=err, env=env)
        killed = threading.Event()

        def kill():
            killed.set()
            process.kill()

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.monotonic() - start
        timer.cancel()
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    result = {"wall_s": wall, "maxrss_kb": usage.ru_maxrss, "metrics": None,
              "message": stderr.strip().splitlines()[-1] if stderr.strip() else ""}
    if killed.is_set():
        result.update(status="timeout", message=f"killed after {timeout_s} s")
    elif os.WIFSIGNALED(status):
        result.update(status="crashed", message=f"signal {os.WTERMSIG(status)} {result['message']}")
    elif process.returncode != 0:
        result.update(status="failed")
    else:
        result["metrics"] = parse_line(binary.name, stdout)
        result["status"] = "ok" if result["metrics"] else "failed"
        if not result["metrics"]:
            result["message"] = "no result line"
    return result


def cpu_seconds():
    """(CPU seconds the whole machine has been busy, CPU seconds of this
    process and its reaped children): their growth apart is other processes'."""
    busy = 0.0
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        pass
    t = os.times()
    return busy, t.user + t.system + t.children_user + t.children_system


def make_cases(names, mode):
    cases = []
    for name in names:
        for threads in WORKLOADS[name][mode]:
            label, args = name, []
            if isinstance(threads, tuple):  # replay: (trace, threads)
                trace, threads = threads
                label, args = f"{name} {trace}", [str(TRACE_DIR / f"{trace}.trace.gz")]
            if threads is not None:
                label += " " + THREAD_LABEL.get(name, "t={}").format(threads)
            cases.append({"workload": name, "threads": threads, "label": label, "args": args})
    return cases


def clock(seconds):
    seconds = int(seconds)
    return f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    """One line per run on stderr: where we are, elapsed, estimated time left."""

    def __init__(self, total):
        self.total, self.done, self.start = total, 0, time.monotonic()

    def report(self, case, allocator, k, runs, result):
        self.done += 1
        elapsed = time.monotonic() - self.start
        left = (self.total - self.done) * (elapsed / self.done)
        ok = result["status"] == "ok"
        status = f"{result['wall_s']:6.2f}s" if ok else result["status"].upper()
        print(f"[{self.done:3d}/{self.total}] {case['label']:<14} {allocator:<9} run {k}/{runs} "
              f"{status}  elapsed {clock(elapsed)}  left ~{clock(left)}", file=sys.stderr)


def run_all(cases, allocators, build_dir, size, runs, timeout_s):
    """Runs every case under every allocator, interleaved; returns the runs."""
    names = list(allocators)
    progress = Progress(len(cases) * len(names) * runs)
    results = []
    for case in cases:
        binary = build_dir / case["workload"]
        for k in range(runs):
            rotation = names[k % len(names):] + names[:k % len(names)]
            for allocator in rotation:
                result = run_once(binary, size, case["threads"], allocators[allocator], timeout_s,
                                  case["args"])
                result.update(case=case, allocator=allocator, run=k + 1)
                results.append(result)
                progress.report(case, allocator, k + 1, runs, result)
                if result["status"] != "ok":
                    print(f"    {case['label']} under {allocator}: {result['status']}: "
                          f"{result['message']}", file=sys.stderr)
    return results


def check_replays(results):
    """Every replay of a trace, under any allocator and in any thread count,
    must replay the same ops and skip the same records; a run that does not
    is marked failed."""
    counts = {}
    for r in results:
        if r["case"]["workload"] == "replay" and r["status"] == "ok":
            key = (r["metrics"].get("ops"), r["metrics"].get("skipped"))
            counts.setdefault(r["case"]["args"][0], {}).setdefault(key, []).append(r)
    for trace, by_key in counts.items():
        usual = max(by_key, key=lambda k: len(by_key[k]))
        for key, runs in by_key.items():
            for r in runs if key != usual else []:
                r.update(status="failed", message=f"{Path(trace).name}: ops, skipped = {key}, "
                         f"other runs {usual}")


def main():
    parser = argparse.ArgumentParser(description="shoal's benchmark suite")
    parser.add_argument("--full", action="store_true", help="bigger sizes, more thread counts")
    parser.add_argument("--tiny", action="store_true", help="smoke test: each workload once, tiny")
    parser.add_argument("--only", help="workloads, comma-separated: " + ",".join(WORKLOADS))
    parser.add_argument("--alloc", help="allocators, comma-separated: " + ",".join(ALLOCATORS))
    parser.add_argument("--runs", type=int, help="runs per case and allocator (quick 3, full 5)")
    parser.add_argument("--shoal-lib", type=Path, default=ROOT / "build" / "libshoal.so",
                        help="the shoal library to preload (default build/libshoal.so)")
    default_build = os.environ.get("SHOAL_BENCH_BUILD_DIR", ROOT / "build" / "bench")
    parser.add_argument("--build-dir", type=Path, default=Path(default_build),
                        help="where the workloads are built (default build/bench)")
    parser.add_argument("--results-dir", type=Path, default=BENCH_DIR / "results")
    args = parser.parse_args()
    if args.full and args.tiny:
        fail("--full and --tiny exclude each other")
    if args.runs is not None and args.runs < 1:
        fail("--runs must be at least 1")

    mode = "tiny" if args.tiny else "full" if args.full else "quick"
    names = parse_names(args.only, list(WORKLOADS), "workload") if args.only else list(WORKLOADS)
    wanted = parse_names(args.alloc, ALLOCATORS, "allocator") if args.alloc else ALLOCATORS
    allocators, missing = find_allocators(wanted, args.shoal_lib.absolute())
    for name, why in missing.items():
        print(f"run.py: skipping {name}: {why}", file=sys.stderr)
    if args.alloc and missing:
        fail(f"asked for {', '.join(missing)}, which this machine lacks")
    if not allocators:
        fail("no allocator to run")

    build(names, args.build_dir)
    cases = make_cases(names, mode)
    runs = 1 if args.tiny else args.runs or (5 if args.full else 3)
    load_before = os.getloadavg()[0]
    cpu_before, started = cpu_seconds(), time.monotonic()
    results = run_all(cases, allocators, args.build_dir, mode, runs, TIMEOUT_S[mode])
    check_replays(results)
    elapsed = time.monotonic() - started
    machine_cpu, own_cpu = (after - before for after, before in zip(cpu_seconds(), cpu_before))
    load = (load_before, max(0.0, machine_cpu - own_cpu) / elapsed)

    bad = [r for r in results if r["status"] != "ok"]
    if args.tiny:
        for r in bad:
            print(f"FAIL {r['case']['label']} under {r['allocator']}: {r['status']}: "
                  f"{r['message']}")
        print(f"bench --tiny: {len(results) - len(bad)}/{len(results)} runs passed "
              f"({', '.join(allocators)}) in {elapsed:.1f} s")
        return 1 if bad else 0

    subset = bool(args.only or args.alloc)
    setup = {"mode": mode, "runs": runs, "elapsed": elapsed, "load": load,
             "allocators": allocators,
             "missing": missing, "packages": {n: p for n, (_, p) in PEERS.items()},
             "results_dir": args.results_dir,
             "suffix": ("-full" if args.full else "") + ("-partial" if subset else "")}
    print(report.write_all(setup, cases, results))
    if bad:
        print(f"run.py: {len(bad)} run(s) failed; see the table", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
