"""Checks tools/compare-results.py on results files made up here, whose
answers are worked out by hand: shoal's ratio to the best other allocator
of each row, the geometric means, the rows over the limit, each
allocator's mean against the best of all, the worse of time and memory
at once, the README table, and the change between two runs of one
allocator. Run by ctest (compare_results)."""
import csv
import math
import subprocess
import sys
import tempfile
from pathlib import Path

TOOL = Path(__file__).resolve().parent / "compare-results.py"
FIELDS = ["date", "mode", "workload", "case", "threads", "allocator", "metric", "median", "min",
          "max", "spread_pct", "runs_ok", "runs", "status"]


def write(path, figures):
    """figures: case -> allocator -> (time_s, peak_rss_kb); a None figure is a failed run."""
    with open(path, "w", newline="") as handle:
        out = csv.DictWriter(handle, FIELDS)
        out.writeheader()
        for case, by_allocator in figures.items():
            for allocator, (time_s, peak) in by_allocator.items():
                for metric, value in (("time_s", time_s), ("peak_rss_kb", peak),
                                      ("threads", 2)):
                    out.writerow({"date": "2026-12-07", "mode": "quick", "workload": case,
                                  "case": case, "threads": 2, "allocator": allocator,
                                  "metric": metric, "median": value if value else 0,
                                  "min": value, "max": value, "spread_pct": 0, "runs_ok": 3,
                                  "runs": 3, "status": "ok" if value else "failed"})


def run(*args):
    done = subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        sys.exit(f"compare-results {' '.join(map(str, args))} failed:\n{done.stderr}")
    return done.stdout


def check(condition, what, output):
    if not condition:
        sys.exit(f"FAIL: {what}\n--- output ---\n{output}")


def main():
    work = Path(tempfile.mkdtemp())
    first = {
        # shoal 1.5 / 1.0 of the best other (time: system 2, other 1 -> 1.5; memory 100 / 100)
        "alpha": {"system": (2.0, 100), "other": (1.0, 300), "shoal": (1.5, 100)},
        # shoal 0.5 / 2.0 (its memory over 1.25)
        "beta": {"system": (4.0, 50), "other": (2.0, 80), "shoal": (1.0, 100)},
        # shoal's peak RSS failed: the row counts for time only
        "gamma": {"system": (1.0, 10), "other": (1.0, 10), "shoal": (1.0, None)},
    }
    one = work / "one.csv"
    write(one, first)
    out = run(one)
    check("3 rows" in out, "the rows counted", out)
    time_mean = (1.5 * 0.5 * 1.0) ** (1 / 3)
    check(f"time {time_mean:.3f}" in out, f"time mean {time_mean:.3f}", out)
    check(f"peak RSS {math.sqrt(1.0 * 2.0):.3f}" in out, "memory mean over two rows", out)
    check("time over 1.25 (1): alpha 1.50" in out, "alpha's time listed", out)
    check("peak RSS over 1.25 (1): beta 2.00" in out, "beta's memory listed", out)
    check("over 2.00 (0): none" in run(one, "--limit", 2), "a limit none passes", out)
    # Each against the best of all: time shoal (1.5, 1, 1) -> 1.145, other (1, 2, 1) -> 1.26.
    check("time, each against the best of all in its row: shoal 1.14, other 1.26, system 2.00"
          in out, "allocators ranked by their means", out)
    # Both at once, the worse of the two against the best other: alpha shoal 1.5, system 2,
    # other 3; beta shoal 2, system 4, other 2; gamma (shoal's peak failed) system 1, other 1.
    check("(rows within 1.25): shoal 1.73 (0 of 2), other 1.82 (1 of 3), system 2.00 (1 of 3)"
          in out, "the per-row clause for every allocator", out)
    table = run(one, "--markdown")
    check("| alpha | 1.50 | **1.00** | | gamma | **1.00** | — |" in table, "the table's row",
          table)
    check("| beta | **0.50** | 2.00 | | | | |" in table, "an odd row count", table)

    second = {case: dict(by) for case, by in first.items()}
    second["alpha"]["shoal"] = (1.2, 110)  # 0.8 and 1.1 of the first run
    second["delta"] = {"shoal": (1.0, 1)}  # in one run only: left out
    two = work / "two.csv"
    write(two, second)
    out = run(one, two)
    check("alpha" in out and "0.80" in out and "1.10" in out and "<-" in out,
          "alpha's change, marked", out)
    check("delta" not in out, "a row only one run has", out)
    beta = next(line for line in out.splitlines() if "beta" in line)
    check("1.00" in beta and "<-" not in beta, "beta unchanged, unmarked", out)
    check(f"over 3 rows: time {(0.8 * 1 * 1) ** (1 / 3):.3f}, peak RSS {1.1 ** 0.5:.3f}" in out,
          "the change's means", out)
    other = run(one, two, "--allocator", "other")
    check(f"time {1.0:.3f}, peak RSS {1.0:.3f}" in other, "another allocator's runs", other)
    alone = work / "alone.csv"
    write(alone, {"alpha": {"system": (1.0, 1), "other": (1.0, 1)}})
    done = subprocess.run([sys.executable, str(TOOL), str(alone)], capture_output=True, text=True)
    check(done.returncode != 0 and "no row where shoal" in done.stderr,
          "a file without shoal's runs refused with a message", done.stderr)
    print("compare-results: all checks passed")


if __name__ == "__main__":
    main()
