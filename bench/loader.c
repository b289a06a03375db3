/* loader — seed 004, the blog post "How default settings can slow down
 * FastMM": a loader deserialising tile data into objects took 3.3 s because
 * a background thread that was loading other data at the same time made
 * FastMM's frees contend, and a contended FastMM called Sleep. Here one
 * thread loads generated records while, in the second run, a neighbour
 * thread allocates and frees as fast as it can.
 *
 * Loading a record: format its text ("id=..;name=..;layer=..;flags=..;
 * tags=a,b,.."), split it into fields, copying each key and value into a
 * temporary string that is freed after use (the post's "strings created and
 * disposed of quite unnecessarily"), build the object with its own name and
 * tag strings and a tag array grown by realloc, and append it to a list.
 * At the end every object is checked against its record, then all are freed.
 * The neighbour replaces random blocks (16..512 bytes) in its own pool.
 *
 * SIZE is the number of records. An untimed load warms the heap first.
 * time_s: the loader's time with the busy neighbour; alone_s: without it;
 * slowdown: time_s / alone_s; neighbour_mops: the neighbour's million
 * replacements per second. */
#include "bench.h"

#include <stdatomic.h>

#define NEIGHBOUR_SLOTS 4096
#define MAX_TAGS        8

static const long SIZES[3] = {5000, 200000, 1000000};

typedef struct tile {
  long id;
  int layer;
  unsigned flags;
  char *name;
  char **tags;
  int tag_count;
} tile_t;

static atomic_int neighbour_stop;

static int record_format(char *buf, size_t len, long id) {
  int tags = (int)(id % MAX_TAGS);
  int n = snprintf(buf, len, "id=%ld;name=tileset_%05ld_%s;layer=%ld;flags=%lx;tags=", id, id,
                   id % 3 == 0 ? "forest" : "dungeon", id % 7, (unsigned long)(id * 2654435761u));
  for (int t = 0; t < tags; t++)
    n += snprintf(buf + n, len - (size_t)n, "%stag%ld", t > 0 ? "," : "", (id + t) % 97);
  return n;
}

static void tile_field(tile_t *tile, const char *key, const char *value) {
  if (strcmp(key, "id") == 0)
    tile->id = strtol(value, NULL, 10);
  else if (strcmp(key, "name") == 0)
    tile->name = strdup(value);
  else if (strcmp(key, "layer") == 0)
    tile->layer = (int)strtol(value, NULL, 10);
  else if (strcmp(key, "flags") == 0)
    tile->flags = (unsigned)strtoul(value, NULL, 16);
  else if (strcmp(key, "tags") == 0) {
    for (const char *p = value; *p != '\0';) {
      size_t len = strcspn(p, ",");
      tile->tags = bench_realloc(tile->tags, (size_t)(tile->tag_count + 1) * sizeof *tile->tags);
      tile->tags[tile->tag_count++] = strndup(p, len);
      p += len + (p[len] == ',');
    }
  }
}

static tile_t *tile_load(const char *record) {
  tile_t *tile = bench_calloc(1, sizeof *tile);
  for (const char *p = record; *p != '\0';) {
    size_t len = strcspn(p, ";");
    size_t key_len = strcspn(p, "=");
    char *key = strndup(p, key_len);
    char *value = strndup(p + key_len + 1, len - key_len - 1);
    if (key == NULL || value == NULL) bench_fail("strndup returned NULL");
    tile_field(tile, key, value);
    free(key);
    free(value);
    p += len + (p[len] == ';');
  }
  return tile;
}

static void tile_check(const tile_t *tile, long id) {
  char buf[256];
  snprintf(buf, sizeof buf, "tileset_%05ld_%s", id, id % 3 == 0 ? "forest" : "dungeon");
  if (tile->id != id || tile->layer != id % 7 || tile->name == NULL || strcmp(tile->name, buf) != 0)
    bench_fail("tile %ld loaded wrong", id);
  if (tile->tag_count != id % MAX_TAGS) bench_fail("tile %ld has %d tags", id, tile->tag_count);
  for (int t = 0; t < tile->tag_count; t++) {
    snprintf(buf, sizeof buf, "tag%ld", (id + t) % 97);
    if (strcmp(tile->tags[t], buf) != 0) bench_fail("tile %ld tag %d is wrong", id, t);
  }
}

/* Loads `records` records, checks and frees them; returns the loading time. */
static double load(long records) {
  double start = bench_now();
  tile_t **tiles = NULL;
  size_t capacity = 0;
  char record[256];
  for (long i = 0; i < records; i++) {
    if ((size_t)i == capacity) {
      capacity = capacity == 0 ? 64 : capacity * 2;
      tiles = bench_realloc(tiles, capacity * sizeof *tiles);
    }
    record_format(record, sizeof record, i);
    tiles[i] = tile_load(record);
  }
  double seconds = bench_now() - start;
  for (long i = 0; i < records; i++) {
    tile_check(tiles[i], i);
    for (int t = 0; t < tiles[i]->tag_count; t++) free(tiles[i]->tags[t]);
    free(tiles[i]->tags);
    free(tiles[i]->name);
    free(tiles[i]);
  }
  free(tiles);
  return seconds;
}

static void *neighbour_run(void *arg) {
  long *ops = arg;
  rng_t rng = rng_make(99);
  void *slots[NEIGHBOUR_SLOTS] = {NULL};
  size_t sizes[NEIGHBOUR_SLOTS] = {0};
  long done = 0;
  while (!atomic_load_explicit(&neighbour_stop, memory_order_relaxed)) {
    size_t k = (size_t)rng_below(&rng, NEIGHBOUR_SLOTS);
    if (slots[k] != NULL) block_check(slots[k], sizes[k], sizes[k], bench_tag(k), "neighbour");
    free(slots[k]);
    sizes[k] = rng_range(&rng, 16, 512);
    slots[k] = bench_malloc(sizes[k]);
    block_stamp(slots[k], sizes[k], bench_tag(k));
    done++;
  }
  for (size_t k = 0; k < NEIGHBOUR_SLOTS; k++) free(slots[k]);
  *ops = done;
  return NULL;
}

int main(int argc, char **argv) {
  bench_args_t args = bench_init(argc, argv, "loader", SIZES, 1);
  load(args.size); /* warm-up, so that both timed loads find a warm heap */
  double alone = load(args.size);

  long neighbour_ops = 0;
  pthread_t neighbour;
  double start = bench_now();
  bench_spawn(&neighbour, 1, neighbour_run, &neighbour_ops, 0);
  double busy = load(args.size);
  atomic_store(&neighbour_stop, 1);
  bench_join(&neighbour, 1);
  double span = bench_now() - start;

  bench_report("time_s=%.4f alone_s=%.4f slowdown=%.3f neighbour_mops=%.3f records=%ld", busy,
               alone, busy / alone, (double)neighbour_ops / span * 1e-6, args.size);
  return 0;
}
