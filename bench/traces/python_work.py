# A dict/list/str workload for a trace of CPython's allocations (bench/traces).
import random

random.seed(7)
words = ["".join(random.choice("abcdefghij") for _ in range(random.randint(3, 12)))
         for _ in range(2000)]
index = {}
for round_ in range(2):
    text = " ".join(random.choice(words) for _ in range(2500))
    for position, word in enumerate(text.split()):
        index.setdefault(word, []).append(position + round_)
    counts = {w: len(p) for w, p in index.items()}
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:50]
    report = "\n".join(f"{w}: {n}" for w, n in top)
    for w in list(index)[::3]:
        del index[w]
print(len(report), len(index))
