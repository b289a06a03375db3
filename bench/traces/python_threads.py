# Three threads in a pipeline for a trace of CPython's allocations from
# several threads (bench/traces): objects made in one thread die in another.
import queue
import random
import threading

ITEMS = 600
raw, parsed = queue.Queue(maxsize=64), queue.Queue(maxsize=64)


def produce():
    rng = random.Random(11)
    for i in range(ITEMS):
        fields = [str(rng.randint(0, 10**6)) for _ in range(rng.randint(2, 12))]
        raw.put(f"{i};" + ",".join(fields) + ";" + "x" * rng.randint(0, 200))
    raw.put(None)


def parse():
    while (line := raw.get()) is not None:
        key, fields, tail = line.split(";")
        parsed.put({"key": int(key), "values": [int(f) for f in fields.split(",")],
                    "tail": tail.upper()})
    parsed.put(None)


threads = [threading.Thread(target=produce), threading.Thread(target=parse)]
for t in threads:
    t.start()
totals, kept = {}, []
while (record := parsed.get()) is not None:
    bucket = record["key"] % 97
    totals[bucket] = totals.get(bucket, 0) + sum(record["values"])
    kept.append(record)
    if len(kept) > 500:
        kept = kept[250:]
for t in threads:
    t.join()
print(len(totals), sum(totals.values()) % 1000003)
