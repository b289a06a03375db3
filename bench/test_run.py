"""Checks run.py's rules for how often a case runs, without running a
workload: a fake runner, registered as run.py's runners of installed
programs are, hands out preset times and peaks. A case whose first three
runs spread over NOISY_SPREAD under some allocator must get EXTRA_RUNS more
under every allocator, interleaved, and a steady case none; a peer whose
first run is hopeless (HOPELESS_TIMES the fastest, HOPELESS_S seconds, a
peak HOPELESS_RSS the leanest) runs once, shoal and every other peer as
usual. A run that goes on from a journal runs nothing the journal holds,
and its report counts the journal's runs; the report's table of time and
peak RSS at once ranks each allocator by the worse of the two in each row.
Run by ctest (bench_noisy_rule)."""
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report  # noqa: E402
import run  # noqa: E402

TIMES = {  # case -> allocator -> times of successive runs
    "steady": {"a": [1.0, 1.1, 0.95], "b": [2.0, 2.1, 1.9]},
    "noisy": {"a": [1.0, 1.0, 1.0, 1.0, 1.0], "b": [1.0, 2.0, 1.1, 1.2, 1.05]},
    "failing": {"a": [1.0, 1.0, 1.0], "b": [None, None, None]},
    # Peers 40 times as slow: hopeless when also fat, not when lean or quick.
    "hopeless": {"a": [1.0, 1.0, 1.0], "b": [40.0] * 3, "shoal": [40.0] * 3},
    "slow_but_lean": {"a": [1.0, 1.0, 1.0], "b": [40.0] * 3, "shoal": [1.0] * 3},
    "slow_but_short": {"a": [0.5, 0.5, 0.5], "b": [20.0] * 3, "shoal": [0.5] * 3},
}
PEAKS = {  # case -> allocator -> peak RSS of every run (default 1)
    "hopeless": {"a": 100, "b": 200, "shoal": 200},
    "slow_but_lean": {"a": 100, "b": 110, "shoal": 100},
    "slow_but_short": {"a": 100, "b": 200, "shoal": 100},
}
calls = []


def fake_runner(label):
    def runner(allocator, path, size, timeout_s):
        k = sum(1 for c in calls if c == (label, allocator))
        calls.append((label, allocator))
        t = TIMES[label][allocator][k]
        if t is None:
            return {"status": "failed", "message": "no result line", "wall_s": 0.0,
                    "maxrss_kb": 0, "metrics": None}
        peak = PEAKS.get(label, {}).get(allocator, 1)
        return {"status": "ok", "message": "", "wall_s": t, "maxrss_kb": peak,
                "metrics": {"time_s": t, "peak_rss_kb": peak}}
    return runner


def main():
    cases = []
    for label in TIMES:
        run.RUNNERS[label] = fake_runner(label)
        cases.append({"workload": label, "label": label, "threads": None, "args": []})
    results = run.run_all(cases[:3], {"a": None, "b": None}, Path("."), "quick", 3, 1)
    runs = {}
    for r in results:
        runs.setdefault((r["case"]["label"], r["allocator"]), []).append(r["run"])
    assert runs[("steady", "a")] == [1, 2, 3] and runs[("steady", "b")] == [1, 2, 3], runs
    assert runs[("noisy", "a")] == [1, 2, 3, 4, 5], runs  # steady itself, run for the row
    assert runs[("noisy", "b")] == [1, 2, 3, 4, 5], runs
    assert runs[("failing", "b")] == [1, 2, 3], runs  # failed runs are no spread
    order = [c for c in calls if c[0] == "noisy"]
    assert order[6:] == [("noisy", "b"), ("noisy", "a"), ("noisy", "a"), ("noisy", "b")], order
    assert not run.noisy([]) and run.NOISY_SPREAD > 0 and run.EXTRA_RUNS > 0
    # One run is no spread; a single run per case (--tiny) gets no more.
    calls.clear()
    single = run.run_all(cases[1:2], {"a": None, "b": None}, Path("."), "tiny", 1, 1)
    assert [r["run"] for r in single] == [1, 1], single
    # The hopeless peer runs once; shoal, as slow and as fat, and the peers that
    # are slow but lean, or slow but short, run three times.
    calls.clear()
    three = {"a": None, "b": None, "shoal": None}
    results = run.run_all(cases[3:], three, Path("."), "quick", 3, 1)
    runs = {}
    for r in results:
        runs.setdefault((r["case"]["label"], r["allocator"]), []).append(r["run"])
    assert runs[("hopeless", "b")] == [1], runs
    assert runs[("hopeless", "shoal")] == [1, 2, 3] and runs[("hopeless", "a")] == [1, 2, 3], runs
    assert runs[("slow_but_lean", "b")] == [1, 2, 3], runs
    assert runs[("slow_but_short", "b")] == [1, 2, 3], runs
    assert run.HOPELESS_TIMES > 1 and run.HOPELESS_S > 0 and run.HOPELESS_RSS > 1
    # A journal keeps each run; a second sitting runs none of them again, and
    # the report's run time counts every run's wall time, from either sitting.
    with tempfile.TemporaryDirectory() as directory:
        path, two = Path(directory) / "journal", {"a": None, "b": None}
        calls.clear()
        first = run.run_all(cases[:1], two, Path("."), "quick", 3, 1, run.Journal(path, {}))
        assert len(calls) == 6 and not any(r.get("from_journal") for r in first), calls
        calls.clear()
        again = run.run_all(cases[:1], two, Path("."), "quick", 3, 1, run.Journal(path, {}))
        assert calls == [] and all(r.get("from_journal") for r in again), calls
        assert [r["metrics"] for r in again] == [r["metrics"] for r in first]
        text = report.run_time_text({"elapsed": 6.0, "from_journal": 6, "all_runs": 6,
                                     "runs_wall": sum(r["wall_s"] for r in again)})
        assert "6 runs took 0.2 min" in text and "ran 0 of them in 0.1 min" in text, text
        assert report.run_time_text({"elapsed": 90.0}) == "Total run time 1.5 min."
    # The table of both at once: a is faster (1 against 2) and fatter (300 against 100) than b:
    # a's worse is 3, b's 2; only c, as fast as a and as lean as b, is within 1.25.
    both_cases = [{"label": "row"}]
    figures = {"a": (1.0, 300), "b": (2.0, 100), "c": (1.0, 100)}
    cells = {("row", k): {"status": "ok", "values": {"time_s": [t], "peak_rss_kb": [p]}}
             for k, (t, p) in figures.items()}
    table = report.both_at_once_table(both_cases, list(figures), cells)
    assert "| c | 1.00 | 1 of 1 |" in table and "| b | 2.00 | 0 of 1 |" in table, table
    assert table.index("| b | 2.00 | 0 of 1 |") < table.index("| a | 3.00 | 0 of 1 |"), table
    assert report.both_at_once_table(both_cases, ["a"], cells) == []  # nothing to compare
    print("bench_noisy_rule: ok (noisy cases, hopeless peers, journals, both at once)")


if __name__ == "__main__":
    main()
