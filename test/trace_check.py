"""Check a SHOAL_TRACE file of test_diag_contention: the header, a dense
sequence, and the program's known calls (4 rounds of 20000 48-byte blocks
allocated by one producer thread and freed by two others)."""
import struct
import sys
from collections import Counter

data = open(sys.argv[1], "rb").read()
magic, version, record_size = struct.unpack_from("<8sII", data, 0)
assert magic == b"SHOALTRC" and version == 1 and record_size == 40, (magic, version, record_size)
assert (len(data) - 16) % 40 == 0, "a torn record"
records = sorted(struct.iter_unpack("<QQQQIHH", data[16:]))
sequences = [r[0] for r in records]
assert sequences == list(range(1, len(records) + 1)), "sequence numbers are not 1..n"
live = {}
remote = 0
sized48 = Counter()
for sequence, block, result, size, thread, op, alignment_log2 in records:
    if op in (1, 4):
        assert block not in live, f"#{sequence}: {block:#x} allocated twice"
        live[block] = thread
        if size == 48:
            sized48[thread] += 1
    elif op == 2:
        owner = live.pop(block, None)
        if owner is not None and owner != thread:
            remote += 1
    elif op == 3:
        live.pop(block, None)
        if result:
            live[result] = thread
    else:
        raise AssertionError(f"#{sequence}: unknown op {op}")
assert sum(sized48.values()) == 80000, sized48
assert len(sized48) == 1, f"48-byte blocks came from {len(sized48)} threads, not the producer"
assert remote >= 80000, f"only {remote} frees of other threads' blocks"
print(f"trace: {len(records)} calls, {len(set(r[4] for r in records))} threads, {remote} remote frees")
