"""A small unittest module run by programs.sh under LD_PRELOAD=libshoal.so."""
import array
import gc
import unittest


class AllocationHeavyTests(unittest.TestCase):
    def test_big_lists_and_dicts(self):
        table = {i: [i] * (i % 50) for i in range(50000)}
        self.assertEqual(sum(len(v) for v in table.values()), 1225000)
        table.clear()
        gc.collect()

    def test_string_building(self):
        parts = []
        for i in range(100000):
            parts.append("%d:%s" % (i, "z" * (i % 17)))
        joined = ",".join(parts)
        self.assertEqual(joined.count(","), 99999)
        self.assertEqual(len(joined.split(",")), 100000)

    def test_bytearray_growth(self):
        data = bytearray()
        for i in range(20000):
            data += bytes([i % 256]) * (i % 64)
        self.assertEqual(len(data), sum(i % 64 for i in range(20000)))
        self.assertEqual(data[:3], bytes([1, 2, 2]))

    def test_array_resize(self):
        values = array.array("d")
        for i in range(300000):
            values.append(i * 0.5)
        self.assertEqual(values[-1], 149999.5)
        del values[::2]
        self.assertEqual(len(values), 150000)

    def test_cycles_collected(self):
        class Node:
            pass
        for _ in range(20):
            nodes = [Node() for _ in range(5000)]
            for a, b in zip(nodes, nodes[1:] + nodes[:1]):
                a.next = b
            del nodes
            gc.collect()
        self.assertEqual(gc.garbage, [])


if __name__ == "__main__":
    unittest.main()
