-- An SQLite workload for programs.sh: 10,000 rows from a recursive CTE,
-- an index, aggregates, a join and a sort.
CREATE TABLE item(id INTEGER PRIMARY KEY, name TEXT, bucket INTEGER, price REAL);
WITH RECURSIVE counter(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM counter WHERE n < 10000)
INSERT INTO item(id, name, bucket, price)
SELECT n, 'item-' || printf('%05d', n) || substr('abcdefghijklmnopqrstuvwxyz', 1, n % 26),
       n % 17, (n * 7919 % 10000) / 100.0 FROM counter;
CREATE INDEX item_bucket ON item(bucket);
SELECT count(*), sum(price), round(avg(price), 4), min(name), max(name) FROM item;
SELECT bucket, count(*), round(sum(price), 2) FROM item GROUP BY bucket ORDER BY bucket;
CREATE TABLE bucket_name(bucket INTEGER PRIMARY KEY, label TEXT);
INSERT INTO bucket_name SELECT DISTINCT bucket, 'bucket ' || bucket FROM item;
SELECT b.label, count(*) FROM item i JOIN bucket_name b USING (bucket)
  WHERE i.price > 50 GROUP BY b.label ORDER BY count(*) DESC, b.label LIMIT 5;
SELECT name FROM item ORDER BY price DESC, name LIMIT 5;
SELECT group_concat(name, ',') IS NOT NULL, length(group_concat(name, ',')) FROM item;
UPDATE item SET name = name || name WHERE id % 3 = 0;
DELETE FROM item WHERE id % 5 = 0;
VACUUM;
SELECT count(*), sum(length(name)) FROM item;
