#!/usr/bin/env python3
"""Reads the bench's results (the .csv that bench/run.py writes beside each
.md) and answers the two questions a session keeps asking of them.

One file: where shoal stands against the bar. For every row, shoal's time
and peak RSS over the best other allocator of that row; their geometric
means; the rows over a limit (1.25, the issue's); each allocator's
geometric mean against the best of all six in each row; and for each
allocator the worse of its two ratios in each row (the per-row clause,
both within the limit at once), their mean and how many rows pass.
--markdown prints the two-column table that README.md's "Where shoal
stands" shows.

    tools/compare-results.py bench/results/2026-12-07-full-session46.csv
    tools/compare-results.py --markdown bench/results/2026-12-07-full-session46.csv

Two files: what changed between two runs of one allocator (shoal against
itself, before and after a change: run `python3 bench/run.py --alloc shoal
--shoal-lib LIB --results-dir DIR` once for each library, alternating
them if the machine's speed wanders). For every row the second run's time
and peak RSS over the first's, rows that moved more than --flag (5 %)
marked, and the geometric means.

    tools/compare-results.py OLD.csv NEW.csv [--allocator shoal]

A row counts where both figures are there and the run's status is ok. The
geometric means are over the rows that have the figure, as report.py's are
over the rows where every allocator succeeded: they agree when none failed.
"""
import argparse
import csv
import signal
import sys
from collections import OrderedDict, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from report import geomean, rank_both_at_once  # noqa: E402 (as report.py writes each results file)

METRICS = ("time_s", "peak_rss_kb")


def load(path):
    """case -> metric -> allocator -> median, in the file's order of cases."""
    rows = OrderedDict()
    with open(path, newline="") as handle:
        for record in csv.DictReader(handle):
            if record["metric"] not in METRICS or record["status"] != "ok":
                continue
            rows.setdefault(record["case"], {}).setdefault(record["metric"], {})[
                record["allocator"]] = float(record["median"])
    if not rows:
        sys.exit(f"compare-results: {path} holds no time_s or peak_rss_kb rows")
    return rows


def shoal_over_best_other(figures):
    if "shoal" not in figures:
        return None
    others = [value for allocator, value in figures.items() if allocator != "shoal"]
    return figures["shoal"] / min(others) if others and min(others) > 0 else None


def show(ratio, bold_from=None):
    if ratio is None:
        return "—"
    text = f"{ratio:.2f}"
    return f"**{text}**" if bold_from is not None and ratio <= bold_from else text


def bar(path, limit, markdown):
    rows = load(path)
    table = [(case, shoal_over_best_other(figures.get("time_s", {})),
              shoal_over_best_other(figures.get("peak_rss_kb", {})))
             for case, figures in rows.items()]
    time_mean = geomean([t for _, t, _ in table])
    memory_mean = geomean([m for _, _, m in table])
    if time_mean is None or memory_mean is None:
        sys.exit(f"compare-results: {path} has no row where shoal and another allocator both ran")
    if markdown:
        half = (len(table) + 1) // 2
        print("| workload | time | peak RSS | | workload | time | peak RSS |")
        print("|---|---:|---:|---|---|---:|---:|")
        for left, right in zip(table[:half], table[half:] + [None]):
            line = f"| {left[0]} | {show(left[1], 1.0)} | {show(left[2], 1.0)} | |"
            line += (f" {right[0]} | {show(right[1], 1.0)} | {show(right[2], 1.0)} |"
                     if right else " | | |")
            print(line)
        print(f"| **geometric mean** | {show(time_mean, 1.0)} | {show(memory_mean, 1.0)} "
              "| | | | |")
        return
    print(f"{path}: {len(table)} rows, shoal over the best other allocator of each")
    print(f"  geometric means: time {time_mean:.3f}, peak RSS {memory_mean:.3f}")
    for name, column in (("time", 1), ("peak RSS", 2)):
        over = [(row[0], row[column]) for row in table
                if row[column] is not None and row[column] > limit]
        listed = ", ".join(f"{case} {ratio:.2f}" for case, ratio in over) or "none"
        print(f"  {name} over {limit:.2f} ({len(over)}): {listed}")
    for metric, name in (("time_s", "time"), ("peak_rss_kb", "peak RSS")):
        against_best = defaultdict(list)
        for figures in rows.values():
            values = figures.get(metric, {})
            if len(values) < 2 or min(values.values()) <= 0:
                continue
            best = min(values.values())
            for allocator, value in values.items():
                against_best[allocator].append(value / best)
        means = sorted((geomean(ratios), allocator) for allocator, ratios in against_best.items())
        print(f"  {name}, each against the best of all in its row: " +
              ", ".join(f"{allocator} {mean:.2f}" for mean, allocator in means))
    print_both_at_once(rows, limit)


def print_both_at_once(rows, limit):
    """The bar's per-row clause asked of every allocator (report.rank_both_at_once)."""
    ranked = rank_both_at_once(((figures.get("time_s", {}), figures.get("peak_rss_kb", {}))
                                for figures in rows.values()), limit)
    print(f"  time and peak RSS at once, the worse of the two against the best other of its row "
          f"(rows within {limit:.2f}): " +
          ", ".join(f"{allocator} {mean:.2f} ({within} of {count})"
                    for mean, allocator, within, count in ranked))


def ab(old_path, new_path, allocator, flag):
    old, new = load(old_path), load(new_path)
    ratios = {metric: [] for metric in METRICS}
    print(f"{allocator}: {new_path} over {old_path}")
    print(f"  {'case':30s} {'time':>6s} {'peak RSS':>9s}")
    for case in new:
        if case not in old:
            continue
        line = []
        for metric in METRICS:
            before = old[case].get(metric, {}).get(allocator)
            after = new[case].get(metric, {}).get(allocator)
            ratio = after / before if before and after else None
            if ratio is not None:
                ratios[metric].append(ratio)
            line.append(ratio)
        moved = any(r is not None and abs(r - 1) > flag for r in line)
        print(f"  {case:30s} {show(line[0]):>6s} {show(line[1]):>9s}" + ("  <-" if moved else ""))
    time_mean, memory_mean = geomean(ratios["time_s"]), geomean(ratios["peak_rss_kb"])
    print(f"  geometric means over {len(ratios['time_s'])} rows: time {time_mean:.3f}, "
          f"peak RSS {memory_mean:.3f}")


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends it quietly
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="one results .csv, or two to compare")
    parser.add_argument("--limit", type=float, default=1.25,
                        help="list the rows over this ratio (one file; default 1.25)")
    parser.add_argument("--markdown", action="store_true",
                        help="print README.md's two-column table (one file)")
    parser.add_argument("--allocator", default="shoal",
                        help="whose runs to compare (two files; default shoal)")
    parser.add_argument("--flag", type=float, default=0.05,
                        help="mark rows that moved more than this (two files; default 0.05)")
    args = parser.parse_args()
    if len(args.results) == 1:
        bar(args.results[0], args.limit, args.markdown)
    elif len(args.results) == 2:
        ab(args.results[0], args.results[1], args.allocator, args.flag)
    else:
        parser.error("one results file, or two to compare")


if __name__ == "__main__":
    main()
