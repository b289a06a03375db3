"""report.py — turn the runs of run.py into tables, a CSV file and charts.

Per case and allocator: the median of the runs and the spread, (max - min) /
median, for every metric a workload prints. The Markdown file has tables of
time, peak RSS and workload metrics with each cell also given relative to
the best in its row, a geometric-mean line, and shoal's ratio to the best
other allocator, and a table of both at once (each allocator's worse ratio
of the two in each row); the machine and the allocator versions are written
beside them. The CSV file holds the same summaries in long form, one metric a line.
Charts need gnuplot (Debian: gnuplot-nox) and are skipped without it.
"""

import csv
import datetime
import math
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIB_KB = 1024


# ---- summaries ---------------------------------------------------------

def summarise(cases, allocators, results):
    """{(case label, allocator): cell}; a cell has runs, ok, status, message,
    and per metric the list of values of the runs that succeeded."""
    cells = {}
    for case in cases:
        for allocator in allocators:
            cells[(case["label"], allocator)] = {"runs": 0, "ok": 0, "status": "ok",
                                                 "message": "", "values": {}}
    for r in results:
        cell = cells[(r["case"]["label"], r["allocator"])]
        cell["runs"] += 1
        if r["status"] != "ok":
            cell["status"], cell["message"] = r["status"], r["message"]
            continue
        cell["ok"] += 1
        metrics = dict(r["metrics"])
        metrics["wall_s"] = r["wall_s"]
        metrics["maxrss_wait4_kb"] = r["maxrss_kb"]
        metrics.setdefault("peak_rss_kb", r["maxrss_kb"])
        for key, value in metrics.items():
            cell["values"].setdefault(key, []).append(value)
    return cells


def median(cell, key):
    """The cell's median for `key`, or None if any run failed."""
    if cell["status"] != "ok" or key not in cell["values"]:
        return None
    return statistics.median(cell["values"][key])


def spread_of(values):
    """(max - min) / median of the values; 0 for none."""
    mid = statistics.median(values) if values else 0
    return (max(values) - min(values)) / mid if values and mid > 0 else 0.0


def spread(cell, key):
    return spread_of(cell["values"].get(key, []))


def geomean(values):
    values = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def worse_of_both(times, peaks):
    """{allocator: the worse of its time and its peak RSS in one row, each over
    the best of the other allocators}, for those with both figures. The
    fastest and the leanest are seldom the same allocator; the bar asks to be
    within 1.25 of each at once."""
    worse = {}
    for allocator in sorted(times.keys() & peaks.keys()):
        other_times = [v for a, v in times.items() if a != allocator and v]
        other_peaks = [v for a, v in peaks.items() if a != allocator and v]
        if other_times and other_peaks and times[allocator] and peaks[allocator]:
            worse[allocator] = max(times[allocator] / min(other_times),
                                   peaks[allocator] / min(other_peaks))
    return worse


def rank_both_at_once(rows, limit):
    """Over rows of (times, peaks), each {allocator: figure}: per allocator
    the geometric mean of worse_of_both, the rows within `limit` and the
    rows it has; best first."""
    worse = {}
    for times, peaks in rows:
        for allocator, value in worse_of_both(times, peaks).items():
            worse.setdefault(allocator, []).append(value)
    return sorted((geomean(values), allocator, sum(v <= limit for v in values), len(values))
                  for allocator, values in worse.items())


# ---- number formatting ---------------------------------------------------

def number(value):
    if value is None:
        return "–"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:#.3g}"


def ratio(value):
    return "–" if value is None else f"{value:.2f}"


# ---- Markdown tables -------------------------------------------------------

def metric_table(title, key, scale, cases, allocators, cells):
    """A table of one metric: median ±spread (ratio to the row's best)."""
    has_shoal = "shoal" in allocators and len(allocators) > 1
    head = ["case"] + allocators + (["shoal / best other"] if has_shoal else [])
    lines = [f"## {title}", "", "| " + " | ".join(head) + " |",
             "|---" + "|---:" * (len(head) - 1) + "|"]
    relative = {a: [] for a in allocators}
    shoal_ratios = []
    for case in cases:
        label = case["label"]
        values = {a: median(cells[(label, a)], key) for a in allocators}
        present = [v for v in values.values() if v is not None]
        best = min(present) if present else None
        row = [label]
        most_runs = max(len(cells[(label, a)]["values"].get(key, [])) for a in allocators)
        for a in allocators:
            cell, v = cells[(label, a)], values[a]
            if v is None:
                row.append(cell["status"].upper())
                continue
            rel = v / best if best else None
            once = len(cell["values"][key]) == 1 and most_runs > 1  # a hopeless peer (run.py)
            how = "1 run" if once else f"±{spread(cell, key) * 100:.0f}%"
            row.append(f"{number(v / scale)} {how} ({ratio(rel)})")
        complete = len(present) == len(allocators)
        for a in allocators:
            relative[a].append(values[a] / best if complete and best else None)
        if has_shoal:
            others = [values[a] for a in allocators if a != "shoal" and values[a] is not None]
            r = values["shoal"] / min(others) if values["shoal"] is not None and others else None
            shoal_ratios.append(r)
            row.append(ratio(r))
        lines.append("| " + " | ".join(row) + " |")
    means = ["**geometric mean of ratios**"] + [ratio(geomean(relative[a])) for a in allocators]
    if has_shoal:
        means.append(f"**{ratio(geomean(shoal_ratios))}**")
    lines.append("| " + " | ".join(means) + " |")
    return lines, shoal_ratios


def both_at_once_table(cases, allocators, cells, limit=1.25):
    """The Markdown table of rank_both_at_once over the run's cases."""
    def figures(label, key):
        values = {a: median(cells[(label, a)], key) for a in allocators}
        return {a: v for a, v in values.items() if v is not None}

    ranked = rank_both_at_once(((figures(case["label"], "time_s"),
                                 figures(case["label"], "peak_rss_kb")) for case in cases), limit)
    if not ranked:  # one allocator: no other to be over
        return []
    lines = ["## Time and peak RSS at once", "",
             "In each row, the worse of an allocator's time and its peak RSS, each over the best "
             "of the other allocators in that row: its geometric mean over the rows where it "
             f"ran, and the rows where both are within {limit:.2f}.", "",
             f"| allocator | geometric mean | rows within {limit:.2f} |", "|---|---:|---:|"]
    for mean, a, within, count in ranked:
        lines.append(f"| {a} | {ratio(mean)} | {within} of {count} |")
    return lines


def extra_metrics(cases, allocators, cells):
    """Keys a workload prints besides time and RSS whose values differ between
    allocators or runs (equal everywhere means it is a parameter)."""
    skip = {"time_s", "peak_rss_kb", "wall_s", "maxrss_wait4_kb", "threads", "consumers"}
    rows = []
    for case in cases:
        keys = []
        for a in allocators:
            for key in cells[(case["label"], a)]["values"]:
                if key not in skip and key not in keys:
                    keys.append(key)
        for key in keys:
            seen = {v for a in allocators for v in cells[(case["label"], a)]["values"].get(key, [])}
            if len(seen) > 1:
                rows.append((case["label"], key))
    return rows


def extras_table(cases, allocators, cells):
    lines = ["## Workload metrics (medians)", "",
             "| case | metric | " + " | ".join(allocators) + " |",
             "|---|---" + "|---:" * len(allocators) + "|"]
    for label, key in extra_metrics(cases, allocators, cells):
        values = [number(median(cells[(label, a)], key)) for a in allocators]
        lines.append(f"| {label} | {key} | " + " | ".join(values) + " |")
    return lines


# ---- the machine ---------------------------------------------------------

def command_output(command):
    try:
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def memory_gib():
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
    except OSError:
        pass
    return "? GiB"


def package_version(package):
    return command_output(["dpkg-query", "-W", "-f=${Version}", package]) or "version unknown"


def shoal_version(shoal_lib):
    commit = command_output(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    dirty = command_output(["git", "-C", str(ROOT), "status", "--porcelain", "--",
                            "src", "include"])
    text = f"git {commit}" if commit else "no commit yet"
    return f"{shoal_lib} ({text}{', uncommitted changes' if dirty else ''})"


def machine_lines(setup):
    lines = ["## Machine and allocators", "",
             f"- CPU: {cpu_model()}, {os.cpu_count()} cores, {memory_gib()} memory",
             f"- kernel: {platform.system()} {platform.release()}; "
             f"glibc {platform.libc_ver()[1]}; gcc {command_output(['gcc', '-dumpfullversion'])}"]
    load_before, others = setup["load"]
    lines.append(f"- other processes: load average {load_before:.2f} before the runs; during them "
                 f"they used {others:.2f} cores on average (of {os.cpu_count()}); "
                 "above ~0.1 the multi-threaded rows are disturbed")
    for name, path in setup["allocators"].items():
        if name == "system":
            lines.append(f"- system: glibc malloc (libc6 {package_version('libc6')}), no preload")
        elif name == "shoal":
            lines.append(f"- shoal: {shoal_version(path)}")
        else:
            package = setup["packages"][name]
            lines.append(f"- {name}: {path} ({package} {package_version(package)})")
    for name, why in setup["missing"].items():
        lines.append(f"- not run: {name}: {why}")
    return lines


# ---- CSV -----------------------------------------------------------------

def write_csv(path, setup, cases, allocators, cells):
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["date", "mode", "workload", "case", "threads", "allocator", "metric",
                      "median", "min", "max", "spread_pct", "runs_ok", "runs", "status"])
        for case in cases:
            for a in allocators:
                cell = cells[(case["label"], a)]
                common = [setup["date"], setup["mode"], case["workload"], case["label"],
                          case["threads"] or "", a]
                if not cell["values"]:
                    out.writerow(common + ["", "", "", "", "", cell["ok"], cell["runs"],
                                           cell["status"]])
                for key, values in cell["values"].items():
                    out.writerow(common + [key, f"{statistics.median(values):.6g}",
                                           f"{min(values):.6g}", f"{max(values):.6g}",
                                           f"{spread(cell, key) * 100:.1f}", cell["ok"],
                                           cell["runs"], cell["status"]])


# ---- charts (gnuplot) ------------------------------------------------------

def gnuplot(script, data):
    """Runs a gnuplot script with $DATA replaced by a file holding `data`."""
    with tempfile.NamedTemporaryFile("w", suffix=".dat", delete=False) as f:
        f.write(data)
    try:
        subprocess.run(["gnuplot"], input=script.replace("$DATA", f.name), text=True,
                       capture_output=True, check=True)
        return True
    except subprocess.CalledProcessError as e:
        print(f"report.py: gnuplot failed: {e.stderr.strip()}")
        return False
    finally:
        os.unlink(f.name)


def chart_scaling(path, cases, allocators, cells):
    """Seed 001's chart: time per thread against threads, a line per allocator."""
    rows = [c for c in cases if c["workload"] == "scaling"]
    if len(rows) < 2:
        return False
    data = "threads\t" + "\t".join(allocators) + "\n"
    for case in rows:
        values = [median(cells[(case["label"], a)], "time_s") for a in allocators]
        data += f"{case['threads']}\t" + "\t".join("NaN" if v is None else f"{v:.5f}"
                                                    for v in values) + "\n"
    script = f"""set terminal pngcairo size 800,500
set output '{path}'
set datafile separator "\\t"
set title 'scaling (seed 001): average time per thread, lower is better'
set xlabel 'threads'
set ylabel 'seconds per thread'
set key top left
set grid
set yrange [0:*]
set xtics ({", ".join(str(c["threads"]) for c in rows)})
plot for [i=2:{len(allocators) + 1}] '$DATA' using 1:i with linespoints lw 2 title columnheader
"""
    return gnuplot(script, data)


def chart_relative(path, cases, allocators, cells):
    """Time relative to the best in each case, bars grouped by case."""
    data = "case\t" + "\t".join(allocators) + "\n"
    for case in cases:
        values = [median(cells[(case["label"], a)], "time_s") for a in allocators]
        present = [v for v in values if v is not None]
        best = min(present) if present else None
        data += case["label"] + "\t" + "\t".join(
            "NaN" if v is None else f"{v / best:.4f}" for v in values) + "\n"
    width = max(900, 60 * len(cases) * max(1, len(allocators)) // 3)
    script = f"""set terminal pngcairo size {width},500
set output '{path}'
set datafile separator "\\t"
set title 'time relative to the best allocator per case (1 = best; log scale)'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y 2
set yrange [0.9:*]
set grid ytics
set xtics rotate by -30
set key outside right top
plot for [i=2:{len(allocators) + 1}] '$DATA' using i:xtic(1) title columnheader
"""
    return gnuplot(script, data)


# ---- everything ----------------------------------------------------------

def run_time_text(setup):
    """The run's length; a run that went on from a journal says what all its
    runs took and how much of it the last sitting ran."""
    if not setup.get("from_journal"):
        return f"Total run time {setup['elapsed'] / 60:.1f} min."
    fresh = setup["all_runs"] - setup["from_journal"]
    return (f"Its {setup['all_runs']:,} runs took {setup['runs_wall'] / 60:.1f} min of wall "
            f"time over the sittings of its journal; the last sitting ran {fresh:,} of them "
            f"in {setup['elapsed'] / 60:.1f} min.")


def hopeless_text(setup):
    times, seconds, rss = setup.get("hopeless", (None, None, None))
    if times is None or setup["runs"] < 2:
        return ""
    return (f"A peer whose first run of a case took {times} times the fastest first run and "
            f"{seconds} s or more, with a peak RSS {rss} times the leanest or more, ran that "
            "case once (\"1 run\"). ")


def write_all(setup, cases, results):
    """Writes <date><suffix>.md, .csv and the charts; returns the Markdown."""
    allocators = list(setup["allocators"])
    cells = summarise(cases, allocators, results)
    setup["date"] = datetime.date.today().isoformat()
    directory = Path(setup["results_dir"])
    directory.mkdir(parents=True, exist_ok=True)
    stem = setup["date"] + setup["suffix"]

    runs = setup["runs"]
    extra = setup.get("extra_runs", 0)
    more = (f" ({runs + extra} where the first {runs} of some allocator spread over "
            f"{setup['noisy_spread'] * 100:.0f} %)") if extra else ""
    lines = [f"# shoal bench, {setup['date']} ({setup['mode']})", "",
             f"Each cell: the median of {runs} runs{more}, ±the spread ((max − min) / median), and in "
             "brackets the ratio to the best allocator in the row (1.00 = best). "
             "Lower is better everywhere. `time` is each workload's own time_s (bench/README.md "
             "says what it covers); peak RSS is the workload's VmHWM. The geometric mean is taken "
             "over the rows where every allocator succeeded. "
             + hopeless_text(setup) + run_time_text(setup), ""]
    time_lines, shoal_ratios = metric_table("Time (s)", "time_s", 1, cases, allocators, cells)
    rss_lines, _ = metric_table("Peak RSS (MiB)", "peak_rss_kb", MIB_KB, cases, allocators, cells)
    lines += time_lines + [""] + rss_lines + [""]
    both = both_at_once_table(cases, allocators, cells)
    lines += both + [""] if both else []
    lines += extras_table(cases, allocators, cells) + [""]

    failures = [f"- {label} under {a}: {c['status']}: {c['message']}"
                for (label, a), c in cells.items() if c["status"] != "ok"]
    if failures:
        lines += ["## Failed runs", ""] + failures + [""]

    charts = []
    if shutil.which("gnuplot"):
        if chart_scaling(directory / f"{stem}-scaling.png", cases, allocators, cells):
            charts.append(f"![scaling]({stem}-scaling.png)")
        if chart_relative(directory / f"{stem}-relative.png", cases, allocators, cells):
            charts.append(f"![relative time]({stem}-relative.png)")
    else:
        lines += ["(no charts: gnuplot not installed; Debian package gnuplot-nox)", ""]
    if charts:
        lines += ["## Charts", ""] + charts + [""]
    lines += machine_lines(setup)

    text = "\n".join(lines) + "\n"
    (directory / f"{stem}.md").write_text(text)
    write_csv(directory / f"{stem}.csv", setup, cases, allocators, cells)
    return text + f"\n(written to {directory / stem}.md and .csv)\n"
