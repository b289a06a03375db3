#!/usr/bin/env python3
"""run.py — build the workloads, run each under every allocator, report.

    python3 bench/run.py [--full] [--only NAMES] [--alloc NAMES] [--tiny]

Each workload (bench/<name>.c) is built with gcc -O2 and run as a separate
process per allocator, which is chosen with LD_PRELOAD ("system" is glibc,
no preload). Runs are interleaved: for each case, run k of every allocator
comes before run k+1 of any, and the order of allocators rotates, so drift
of the machine hits all alike. The table gives the median of N runs (quick 3,
full 5) with the spread, (max - min) / median; a case whose first N runs
spread over 50 % under some allocator runs twice more under every one
(NOISY_SPREAD, EXTRA_RUNS; from N = 3). Two workloads, redis and
compile, run installed programs (redis-server, gcc) instead of a file of ours.

--tiny runs each workload once at its tiny size under each allocator and
fails if any run fails; it writes no results (ctest runs it).

--journal FILE keeps each finished run in FILE as it ends; started again
with the same FILE (same mode, run count and allocators), the suite takes
those runs from it and runs only the rest, so a run cut short goes on where
it stopped.

Standard library only. report.py turns the runs into tables and charts.
"""

import argparse
import json
import os
import re
import shutil
import socket
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
# A case (VARIANT, THREADS) passes one more argument after THREADS: a
# variant's name (larson's "sized"), or for replay a trace (see below).
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
    "xmalloc": {"tiny": [2], "quick": [2, 8], "full": MULTI},
    "larson": {"tiny": [2, ("sized", 2)], "quick": [2, 8, ("sized", 2), ("sized", 8)],
               "full": MULTI + [("sized", t) for t in MULTI]},
    "mstress": {"tiny": [2], "quick": [2, 8, 64], "full": MULTI},
    "rptest": {"tiny": [2], "quick": [2, 8], "full": MULTI},
    "strappend": {"tiny": [None], "quick": [None], "full": [None]},
    "smallobj": {"tiny": [None], "quick": [None], "full": [None]},
    "largeblk": {"tiny": [None], "quick": [None], "full": [None]},
    "largemix": {"tiny": [1], "quick": [1, 2], "full": [1, 2, 8]},
    "giveback": {"tiny": [2], "quick": [2], "full": [2, 8, 64]},
    "cthrash": {"tiny": [2], "quick": [2], "full": MULTI},
    "loader": {"tiny": [None], "quick": [None], "full": [None]},
    "parallel": {"tiny": [2], "quick": [2], "full": MULTI},
    "replay": {"tiny": [("gcc", 1), ("python-threads", 1), ("python-threads", 3)], "quick": REPLAYS,
               "full": REPLAYS},
    # Real programs, not bench binaries (see PROGRAMS): redis is left out of
    # --tiny (a server and a network client are more than a smoke test needs).
    "redis": {"tiny": [], "quick": [None], "full": [None]},
    "compile": {"tiny": [None], "quick": [None], "full": [None]},
}

# How a case's THREADS argument reads in the tables.
THREAD_LABEL = {"prodcons": "1:{}", "xmalloc": "{0}:{0}"}

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
        depends = [source, header] + ([ROOT / "src" / "diag" / "trace_format.h"] if name == "replay" else [])
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


# ---- real programs: redis-server and gcc ----------------------------------
#
# These run an installed program under the allocator instead of a workload of
# ours; run_program() returns the same dict as run_once(), with metrics
# time_s and peak_rss_kb. PROGRAMS names the executables each needs: a
# workload whose programs are missing is skipped with a note.

PROGRAMS = {"redis": ["redis-server", "redis-benchmark"], "compile": ["gcc"]}
REDIS_REQUESTS = {"tiny": 20000, "quick": 200000, "full": 1000000}
REDIS_TESTS = ["set", "get", "lpush", "lpop", "incr"]
# gcc -O2 -c of our own sources, all in one gcc run (cc1 once per file).
COMPILE_SOURCES = {"tiny": ["bench/larson.c"], "quick": ["bench/*.c"],
                   "full": ["bench/*.c", "src/*/*.c"]}
# Runs the command in argv[2:] and writes its ru_maxrss (its largest process,
# cc1 included) to argv[1]. A fresh small process, not the runner: a child's
# ru_maxrss starts at the high-water mark of the process it was forked from.
MAXRSS_WRAPPER = """import os, sys
env = dict(os.environ)
preload = env.pop("SHOAL_BENCH_PRELOAD", "")
if preload:
    env["LD_PRELOAD"] = preload
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], env)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(f"{usage.ru_maxrss}\\n")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def program_env(preload):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if preload is not None:
        env["LD_PRELOAD"] = str(preload)
    return env


def failed(status, message, wall=0.0):
    return {"status": status, "message": message, "wall_s": wall, "maxrss_kb": 0, "metrics": None}


def run_compile(allocator, preload, size, timeout_s):
    """gcc -O2 -c of COMPILE_SOURCES[size] into a temporary folder."""
    sources = sorted(str(path) for pattern in COMPILE_SOURCES[size] for path in ROOT.glob(pattern)
                     if path.name != "windows.c")  # the Windows OS layer needs windows.h
    env = program_env(None)
    if preload is not None:
        env["SHOAL_BENCH_PRELOAD"] = str(preload)
    with tempfile.TemporaryDirectory(prefix="shoal-compile-") as tmp:
        rss_file = Path(tmp) / "maxrss"
        command = [sys.executable, "-I", "-S", "-c", MAXRSS_WRAPPER, str(rss_file), "gcc",
                   *CFLAGS, "-I", str(ROOT / "src"), "-I", str(ROOT / "include"), "-c", *sources]
        start = time.monotonic()
        try:
            done = subprocess.run(command, cwd=tmp, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, errors="replace",
                                  timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return failed("timeout", f"killed after {timeout_s} s", time.monotonic() - start)
        wall = time.monotonic() - start
        objects = len(list(Path(tmp).glob("*.o")))
        lines = done.stderr.strip().splitlines()
        if done.returncode < 0:
            return failed("crashed", f"signal {-done.returncode}", wall)
        if done.returncode != 0 or objects != len(sources) or not rss_file.exists():
            return failed("failed", lines[-1] if lines else f"{objects}/{len(sources)} objects",
                          wall)
        maxrss = int(rss_file.read_text())
    metrics = {"time_s": wall, "files": len(sources), "peak_rss_kb": maxrss}
    return {"status": "ok", "message": "", "wall_s": wall, "maxrss_kb": maxrss, "metrics": metrics}


def redis_command(port, *words, timeout=5.0):
    """Sends one command, returns the reply as text (an error reply raises)."""
    request = f"*{len(words)}\r\n" + "".join(f"${len(w)}\r\n{w}\r\n" for w in words)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(request.encode())
        reader = conn.makefile("rb")
        line = reader.readline().decode(errors="replace").rstrip("\r\n")
        if line.startswith("-") or not line:
            raise OSError(f"redis: {' '.join(words)}: {line or 'connection closed'}")
        if line.startswith("$"):
            length = int(line[1:])
            return "" if length < 0 else reader.read(length + 2)[:-2].decode(errors="replace")
        return line[1:]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vm_hwm_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def run_redis(allocator, preload, size, timeout_s):
    """redis-server under the allocator; redis-benchmark (not preloaded) sends
    a fixed number of requests. time_s is the benchmark's wall time."""
    if allocator == "system":
        # Debian's redis-server is linked to libjemalloc.so.2; preloading libc
        # puts glibc's malloc first, as a preloaded allocator would be.
        preload = find_library("libc.so.6")
    requests, port = REDIS_REQUESTS[size], free_port()
    server_command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                      "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"]
    bench_command = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-q",
                     "-n", str(requests), "-c", "50", "-P", "16", "-t", ",".join(REDIS_TESTS)]
    with tempfile.TemporaryFile("w+", errors="replace") as log:
        server = subprocess.Popen(server_command, stdout=log, stderr=log, env=program_env(preload))
        try:
            return redis_session(server, port, requests, allocator, bench_command, timeout_s)
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            exited = server.poll() is not None
            log.seek(0)
            last = log.read().strip().splitlines() if exited else []
            return failed("crashed" if exited and server.returncode < 0 else "failed",
                          f"{e}{' (server: ' + last[-1] + ')' if last else ''}")
        finally:
            if server.poll() is None:
                server.kill()
            server.wait()


def redis_session(server, port, requests, allocator, bench_command, timeout_s):
    deadline = time.monotonic() + 10
    while True:  # until the server answers PING
        if server.poll() is not None:
            raise OSError(f"redis-server exited with status {server.returncode} at start")
        try:
            if redis_command(port, "PING", timeout=1) == "PONG":
                break
        except OSError:
            if time.monotonic() > deadline:
                raise OSError("redis-server did not answer PING within 10 s")
            time.sleep(0.02)
    start = time.monotonic()
    try:
        bench = subprocess.run(bench_command, env=program_env(None), capture_output=True,
                               text=True, errors="replace", timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return failed("timeout", f"redis-benchmark killed after {timeout_s} s",
                      time.monotonic() - start)
    wall = time.monotonic() - start
    if server.poll() is not None:
        raise OSError(f"redis-server exited with status {server.returncode} during the run")
    metrics = {"time_s": wall, "rps": requests * len(REDIS_TESTS) / wall}
    for test, rate in re.findall(r"^\s*(\w+): ([0-9.]+) requests per second",
                                 bench.stdout.replace("\r", "\n"),
                                 re.MULTILINE):
        metrics[f"{test.lower()}_rps"] = float(rate)
    if bench.returncode != 0 or len(metrics) != 2 + len(REDIS_TESTS):
        lines = (bench.stderr or bench.stdout).strip().splitlines()
        raise OSError(f"redis-benchmark: {lines[-1] if lines else 'no results'}")
    # The data must be right: every INCR counted, the list emptied by LPOP.
    counter = redis_command(port, "GET", "counter:__rand_int__")
    if counter != str(requests) or redis_command(port, "DBSIZE") != "2":
        raise OSError(f"redis: counter {counter}, expected {requests}, or wrong key count")
    # Debian's redis reports libjemalloc's own statistics: it must have served
    # (almost) nothing unless jemalloc is the allocator under test.
    info = dict(re.findall(r"^(\w+):(\S*)", redis_command(port, "INFO", "memory"), re.MULTILINE))
    served = int(info.get("allocator_allocated", "0"))
    if allocator != "jemalloc" and served > 1 << 20:
        raise OSError(f"libjemalloc served {served} bytes: the preload did not replace malloc")
    metrics["peak_rss_kb"] = vm_hwm_kb(server.pid)
    try:
        redis_command(port, "SHUTDOWN", "NOSAVE")
    except OSError:
        pass  # the server closes the connection as it exits
    server.wait(timeout=10)
    if server.returncode != 0:
        raise OSError(f"redis-server exited with status {server.returncode} at shutdown")
    return {"status": "ok", "message": "", "wall_s": wall, "maxrss_kb": metrics["peak_rss_kb"],
            "metrics": metrics}


RUNNERS = {"redis": run_redis, "compile": run_compile}


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
            if isinstance(threads, tuple):  # (variant, threads); replay: (trace, threads)
                variant, threads = threads
                label = f"{name} {variant}"
                args = [str(TRACE_DIR / f"{variant}.trace.gz") if name == "replay" else variant]
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


class Journal:
    """A file that keeps every finished run as a line of JSON, so that a run
    of the suite cut short (a full run takes two hours here) goes on where
    it stopped: runs already in the file, of the same mode, run count and
    allocators, are taken from it instead of run again."""

    def __init__(self, path, setup):
        self.path, self.done = path, {}
        if path.exists():
            with open(path) as f:
                texts = [line for line in f if line.strip()]
            try:
                lines = [json.loads(text) for text in texts]
            except json.JSONDecodeError:
                # A run stopped while writing leaves its last line cut short:
                # that run is run again; anywhere else the file is not a journal.
                try:
                    lines = [json.loads(text) for text in texts[:-1]]
                except json.JSONDecodeError:
                    fail(f"{path} is not a journal of this suite (a line is not JSON)")
                print(f"journal: {path}: its last line was cut short; that run runs again",
                      file=sys.stderr)
            if not lines or lines[0].get("journal") != setup:
                fail(f"{path} was written by another run of the suite (mode, runs or "
                     f"allocators differ): {lines[0] if lines else 'empty'}")
            for entry in lines[1:]:
                self.done[(entry["label"], entry["allocator"], entry["run"])] = entry["result"]
        else:
            with open(path, "w") as f:
                f.write(json.dumps({"journal": setup}) + "\n")

    def take(self, case, allocator, k):
        return self.done.get((case["label"], allocator, k))

    def add(self, case, allocator, k, result):
        entry = {"label": case["label"], "allocator": allocator, "run": k, "result": result}
        with open(self.path, "a") as f:
            f.write(json.dumps(entry) + "\n")


# A case whose first runs spread under some allocator by more than
# NOISY_SPREAD of their median ((max - min) / median, as the tables print
# it) gets EXTRA_RUNS more, interleaved as the first were: on a small shared
# machine one slow minute otherwise decides a median of three (larson sized
# t=8: every allocator's runs spread ±45-189 % in the thirty-second
# session's full run, and the row's ratio went from 0.89 in the run before,
# of nearly the same code, to 2.36). Only from 3 runs.
NOISY_SPREAD = 0.5
EXTRA_RUNS = 2


def noisy(case_results):
    """Whether some allocator's times of these runs spread over NOISY_SPREAD."""
    times = {}
    for r in case_results:
        if r["status"] == "ok" and "time_s" in r["metrics"]:
            times.setdefault(r["allocator"], []).append(r["metrics"]["time_s"])
    return any(report.spread_of(values) > NOISY_SPREAD for values in times.values())


# A peer whose first run of a case took HOPELESS_TIMES the best first run
# and HOPELESS_S seconds or more, with a peak RSS of HOPELESS_RSS times the
# leanest first run or more, runs that case only once: more runs would
# change no ratio of the row (it is neither the fastest nor the leanest by
# far), and each costs minutes (tbbmalloc's largemix took 366, 204 and 186 s
# a run at 1, 2 and 8 threads, the best 0.75-1.0 s: 25 of a full run's
# minutes went to its second and third runs). shoal runs every time.
HOPELESS_TIMES = 20
HOPELESS_S = 30
HOPELESS_RSS = 1.25


def hopeless(first_runs):
    """The peers of these first runs (one per allocator) that run no more."""
    ok = {r["allocator"]: r for r in first_runs
          if r["status"] == "ok" and "time_s" in r["metrics"] and "peak_rss_kb" in r["metrics"]}
    if len(ok) < 2:
        return set()
    fastest = min(r["metrics"]["time_s"] for r in ok.values())
    leanest = min(r["metrics"]["peak_rss_kb"] for r in ok.values())
    return {a for a, r in ok.items()
            if a != "shoal" and r["wall_s"] >= HOPELESS_S
            and r["metrics"]["time_s"] >= HOPELESS_TIMES * fastest
            and r["metrics"]["peak_rss_kb"] >= HOPELESS_RSS * leanest}


def run_all(cases, allocators, build_dir, size, runs, timeout_s, journal=None):
    """Runs every case under every allocator, interleaved, a noisy case
    EXTRA_RUNS more times and a hopeless peer's once; returns the runs."""
    names = list(allocators)
    progress = Progress(len(cases) * len(names) * runs)
    results = []
    for case in cases:
        binary = build_dir / case["workload"]
        case_results = []
        case_runs, k = runs, 0
        once = set()
        while k < case_runs:
            rotation = names[k % len(names):] + names[:k % len(names)]
            for allocator in rotation:
                kept = journal.take(case, allocator, k + 1) if journal else None
                if kept is None and allocator in once:
                    continue
                if kept is not None:
                    result = dict(kept, from_journal=True)
                elif case["workload"] in RUNNERS:
                    result = RUNNERS[case["workload"]](allocator, allocators[allocator], size,
                                                       timeout_s)
                else:
                    result = run_once(binary, size, case["threads"], allocators[allocator],
                                      timeout_s, case["args"])
                if journal and kept is None:
                    journal.add(case, allocator, k + 1, result)
                result.update(case=case, allocator=allocator, run=k + 1)
                results.append(result)
                case_results.append(result)
                progress.report(case, allocator, k + 1, case_runs, result)
                if result["status"] != "ok":
                    print(f"    {case['label']} under {allocator}: {result['status']}: "
                          f"{result['message']}", file=sys.stderr)
            k += 1
            if k == 1 and runs > 1:
                once = hopeless(case_results)
                progress.total -= (runs - 1) * len(once)
            if k == runs and runs >= 3 and noisy(case_results):
                case_runs += EXTRA_RUNS
                progress.total += EXTRA_RUNS * (len(names) - len(once))
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
    parser.add_argument("--journal", type=Path,
                        help="keep each finished run in this file; runs already in it are "
                             "not run again (a run cut short goes on where it stopped)")
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

    for name in [n for n in names if n in PROGRAMS]:
        absent = [p for p in PROGRAMS[name] if shutil.which(p) is None]
        if absent:
            print(f"run.py: skipping {name}: {', '.join(absent)} not installed", file=sys.stderr)
            names.remove(name)
    build([n for n in names if n not in PROGRAMS], args.build_dir)
    cases = make_cases(names, mode)
    if not cases:
        print("run.py: nothing to run", file=sys.stderr)
        return 0
    runs = 1 if args.tiny else args.runs or (5 if args.full else 3)
    load_before = os.getloadavg()[0]
    cpu_before, started = cpu_seconds(), time.monotonic()
    journal = None
    if args.journal:
        journal = Journal(args.journal, {"mode": mode, "runs": runs,
                                         "allocators": {n: str(p) for n, p in allocators.items()}})
    results = run_all(cases, allocators, args.build_dir, mode, runs, TIMEOUT_S[mode], journal)
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
             "from_journal": sum(1 for r in results if r.get("from_journal")),
             "runs_wall": sum(r.get("wall_s", 0.0) for r in results), "all_runs": len(results),
             "extra_runs": EXTRA_RUNS if runs >= 3 else 0, "noisy_spread": NOISY_SPREAD,
             "hopeless": (HOPELESS_TIMES, HOPELESS_S, HOPELESS_RSS),
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
