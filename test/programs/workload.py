"""A Python workload for programs.sh: json, re, collections, sorting and
big temporary objects, printing results that must not depend on the
allocator."""
import collections
import hashlib
import json
import re


def main():
    records = [{"id": i, "name": "user%05d" % i, "tags": ["t%d" % (i % 7), "g%d" % (i % 11)],
                "score": (i * 7919) % 1000 / 10.0} for i in range(20000)]
    text = json.dumps(records, sort_keys=True)
    decoded = json.loads(text)
    assert decoded == records
    print("json bytes", len(text), "sha256", hashlib.sha256(text.encode()).hexdigest()[:16])

    words = re.findall(r"user(\d+)", text)
    counter = collections.Counter(w[-1] for w in words)
    print("last digits", sorted(counter.items()))
    pattern = re.compile(r'"tags": \["(t\d)", "(g\d+)"\]')
    pairs = collections.Counter(pattern.findall(text))
    print("tag pairs", len(pairs), pairs.most_common(3))

    by_score = sorted(records, key=lambda r: (-r["score"], r["name"]))
    print("top", [r["name"] for r in by_score[:5]])
    groups = collections.defaultdict(list)
    for r in records:
        groups[r["tags"][0]].append(r["score"])
    print("means", {k: round(sum(v) / len(v), 3) for k, v in sorted(groups.items())})

    # Many short-lived objects of many sizes, then a large string churn.
    chunks = [bytes(range(i % 256)) * (i % 40) for i in range(30000)]
    print("chunks", sum(map(len, chunks)))
    deque = collections.deque(maxlen=1000)
    for i in range(200000):
        deque.append(str(i) * (i % 5))
    print("deque", len(deque), deque[-1])
    ordered = collections.OrderedDict((str(i), i * i) for i in range(50000))
    for i in range(0, 50000, 3):
        del ordered[str(i)]
    print("ordered", len(ordered), next(iter(ordered.items())))


if __name__ == "__main__":
    main()
