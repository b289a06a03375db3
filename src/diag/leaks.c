/* leaks.c — the table of tracked blocks, sampling, and the leak report.
 *
 * The table maps a block's address to its record (size, call site; in
 * checked mode also state and where it was freed). It is split in shards,
 * each a chained hash table under its own lock, so threads tracking
 * different blocks rarely meet. Its memory comes from the OS, never from
 * malloc, so tracking cannot recurse.
 *
 * SHOAL_LEAKS=1 samples: on average one allocation per SHOAL_LEAKS_SAMPLE
 * bytes gets a record (blocks at least that large always do), weighted by
 * the blocks it stands for. The report's totals come from the core's exact
 * per-heap counters; its call sites from the samples. SHOAL_LEAKS=all (and
 * checked mode) track every block and report exact figures throughout. */
#include "diag/diag.h"

#include <stdlib.h>
#include <string.h>

#define SHARD_COUNT      64
#define RECORD_CHUNK     (64 * 1024)
#define BUCKETS_AT_FIRST 1024
#define REPORT_SITES_MAX 40
#define REPORT_SIZES_MAX 20
#define OUTSIZED         SIZE_MAX /* by-size row of the large and huge blocks */

struct record_shard_s {
  shoal_lock_t lock;
  block_record_t **buckets;
  size_t bucket_count; /* a power of two, or 0 before the first record */
  size_t count;
  block_record_t *spare; /* records to reuse */
} cache_aligned;

static record_shard_t shards[SHARD_COUNT];

static inline uint64_t block_hash(uintptr_t block) {
  return (uint64_t)(block >> 4) * 0x9E3779B97F4A7C15u;
}

/* Which blocks may have a record, read without a lock: per hash slot, the
 * records there (255 sticks). A lock holds signals off, two system calls
 * (lock.c), and sampled tracking frees blocks it never recorded nearly
 * every time: those frees take no lock. A block's record is added before
 * its malloc returns, so whoever frees it sees the count. */
#define HINT_SLOTS ((size_t)1 << 16)
static _Atomic(uint8_t) record_hint[HINT_SLOTS];

static _Atomic(uint8_t) *hint_of(uintptr_t block) {
  return &record_hint[(block_hash(block) >> 32) & (HINT_SLOTS - 1)];
}

static void hint_change(uintptr_t block, int delta) {
  _Atomic(uint8_t) *hint = hint_of(block);
  uint8_t count = atomic_load_explicit(hint, memory_order_relaxed);
  do {
    if (count == UINT8_MAX) return;
  } while (!atomic_compare_exchange_weak_explicit(hint, &count, (uint8_t)(count + delta),
                                                  memory_order_relaxed, memory_order_relaxed));
}

static bool records_may_hold(uintptr_t block) {
  return atomic_load_explicit(hint_of(block), memory_order_relaxed) != 0;
}

record_shard_t *records_lock(uintptr_t block) {
  record_shard_t *shard = &shards[block_hash(block) >> 58];
  diag_lock(&shard->lock);
  return shard;
}

void records_unlock(record_shard_t *shard) {
  diag_unlock(&shard->lock);
}

static inline block_record_t **bucket_of(record_shard_t *shard, uintptr_t block) {
  return &shard->buckets[block_hash(block) & (shard->bucket_count - 1)];
}

block_record_t *records_find(record_shard_t *shard, uintptr_t block) {
  if (shard->count == 0) return NULL;
  for (block_record_t *record = *bucket_of(shard, block); record != NULL; record = record->next)
    if (record->block == block) return record;
  return NULL;
}

static bool grow_buckets(record_shard_t *shard) {
  size_t count = shard->bucket_count == 0 ? BUCKETS_AT_FIRST : shard->bucket_count * 2;
  size_t bytes = count * sizeof(block_record_t *);
  block_record_t **buckets = os_map_aligned(bytes, os_page_size());
  if (buckets == NULL) return false;
  block_record_t **old = shard->buckets;
  size_t old_count = shard->bucket_count;
  shard->buckets = buckets;
  shard->bucket_count = count;
  for (size_t i = 0; i < old_count; i++) {
    while (old[i] != NULL) {
      block_record_t *record = old[i];
      old[i] = record->next;
      block_record_t **bucket = bucket_of(shard, record->block);
      record->next = *bucket;
      *bucket = record;
    }
  }
  if (old != NULL) os_unmap(old, old_count * sizeof(block_record_t *));
  return true;
}

static bool add_spare_records(record_shard_t *shard) {
  block_record_t *chunk = os_map_aligned(RECORD_CHUNK, os_page_size());
  if (chunk == NULL) return false;
  for (size_t i = 0; i < RECORD_CHUNK / sizeof *chunk; i++) {
    chunk[i].next = shard->spare;
    shard->spare = &chunk[i];
  }
  return true;
}

block_record_t *records_add(record_shard_t *shard, uintptr_t block) {
  if (shard->count >= shard->bucket_count && !grow_buckets(shard)) return NULL;
  if (shard->spare == NULL && !add_spare_records(shard)) return NULL;
  block_record_t *record = shard->spare;
  shard->spare = record->next;
  memset(record, 0, sizeof *record);
  record->block = block;
  hint_change(block, +1);
  block_record_t **bucket = bucket_of(shard, block);
  record->next = *bucket;
  *bucket = record;
  shard->count++;
  return record;
}

void records_remove(record_shard_t *shard, block_record_t *record) {
  block_record_t **link = bucket_of(shard, record->block);
  while (*link != record) link = &(*link)->next;
  *link = record->next;
  hint_change(record->block, -1);
  record->next = shard->spare;
  shard->spare = record;
  shard->count--;
}

void records_for_each(void (*visit)(block_record_t *record, void *context), void *context) {
  for (size_t s = 0; s < SHARD_COUNT; s++) {
    record_shard_t *shard = &shards[s];
    diag_lock(&shard->lock);
    for (size_t i = 0; i < shard->bucket_count && shard->count != 0; i++)
      for (block_record_t *record = shard->buckets[i]; record != NULL; record = record->next)
        visit(record, context);
    diag_unlock(&shard->lock);
  }
}

void records_register_for_fork(void) {
  for (size_t s = 0; s < SHARD_COUNT; s++)
    lock_register_for_fork(&shards[s].lock, LOCK_RANK_ABOVE_CORE);
}

/* ---- sampling ---- */

static _Thread_local size_t bytes_before_sample;
static _Thread_local uint64_t sample_random;

/* The next gap: uniform in [rate/2, 3*rate/2), so that allocation patterns
 * with a period cannot hide from the sampler. */
static size_t next_gap(size_t rate) {
  if (sample_random == 0) sample_random = (uint64_t)(uintptr_t)&sample_random | 1;
  sample_random ^= sample_random << 13;
  sample_random ^= sample_random >> 7;
  sample_random ^= sample_random << 17;
  return rate / 2 + (size_t)(sample_random % (rate + 1));
}

bool leaks_sample(size_t size, size_t *weight) {
  size_t rate = (size_t)option(SHOAL_OPTION_LEAKS_SAMPLE);
  *weight = 1;
  if ((diag_mode() & DIAG_LEAKS_ALL) || rate <= 1 || size >= rate) return true;
  if (size == 0) size = 1;
  if (bytes_before_sample == 0) bytes_before_sample = next_gap(rate); /* a thread's first */
  if (bytes_before_sample > size) {
    bytes_before_sample -= size;
    return false;
  }
  bytes_before_sample = next_gap(rate);
  *weight = rate / size;
  return true;
}

void leaks_track(void *block, size_t size, size_t weight, const site_t *site) {
  record_shard_t *shard = records_lock((uintptr_t)block);
  block_record_t *record = records_find(shard, (uintptr_t)block);
  if (record == NULL) record = records_add(shard, (uintptr_t)block);
  if (record != NULL) {
    record->size = size;
    record->weight = weight;
    record->state = RECORD_LIVE;
    record->allocated_at = *site;
  }
  records_unlock(shard);
}

bool leaks_forget(const void *block) {
  if (!records_may_hold((uintptr_t)block)) return false;
  record_shard_t *shard = records_lock((uintptr_t)block);
  block_record_t *record = records_find(shard, (uintptr_t)block);
  if (record != NULL) records_remove(shard, record);
  records_unlock(shard);
  return record != NULL;
}

/* ---- the report ---- */

static _Atomic(shoal_block_namer_t) block_namer;

void leaks_set_namer(shoal_block_namer_t namer) {
  atomic_store_explicit(&block_namer, namer, memory_order_release);
}

typedef struct leak_s {
  site_t site;
  uintptr_t block; /* one of the blocks (the group's first) */
  size_t size;     /* requested bytes, or the block size for a class group */
  size_t blocks;   /* blocks it stands for */
  size_t bytes;
} leak_t;

typedef struct leak_list_s {
  leak_t *items;
  size_t count, capacity;
} leak_list_t;

static void collect_live(block_record_t *record, void *context) {
  leak_list_t *list = context;
  if (record->state != RECORD_LIVE || list->count == list->capacity) return;
  leak_t *leak = &list->items[list->count++];
  leak->site = record->allocated_at;
  leak->block = record->block;
  leak->size = record->size;
  leak->blocks = record->weight;
  leak->bytes = record->weight * record->size;
}

static void count_records(block_record_t *record, void *context) {
  (void)record;
  ++*(size_t *)context;
}

/* Grouped by call stack; a group shows its stack once. */
static int by_site(const void *a, const void *b) {
  return memcmp(&((const leak_t *)a)->site, &((const leak_t *)b)->site, sizeof(site_t));
}

static int by_size(const void *a, const void *b) {
  size_t x = ((const leak_t *)a)->size, y = ((const leak_t *)b)->size;
  return x < y ? -1 : x > y;
}

static int by_bytes_descending(const void *a, const void *b) {
  const leak_t *x = a, *y = b;
  if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
  return x->blocks > y->blocks ? -1 : x->blocks < y->blocks;
}

/* Merge neighbours that compare equal (the list is sorted by `same`). */
static size_t merge_runs(leak_t *items, size_t count, int (*same)(const void *, const void *)) {
  size_t out = 0;
  for (size_t i = 0; i < count; i++) {
    if (out > 0 && same(&items[out - 1], &items[i]) == 0) {
      items[out - 1].blocks += items[i].blocks;
      items[out - 1].bytes += items[i].bytes;
    } else {
      items[out++] = items[i];
    }
  }
  return out;
}

/* The stacks, largest first; with a report file, the first three on stderr. */
static void write_sites(leak_t *items, size_t count, bool estimated) {
  qsort(items, count, sizeof *items, by_site);
  count = merge_runs(items, count, by_site);
  qsort(items, count, sizeof *items, by_bytes_descending);
  output_report_line("%12s %9s  allocated at", estimated ? "~bytes" : "bytes",
                     estimated ? "~blocks" : "blocks");
  char site[1536];
  size_t shown = count < REPORT_SITES_MAX ? count : REPORT_SITES_MAX;
  for (size_t i = 0; i < shown; i++) {
    site_format(&items[i].site, site, sizeof site);
    output_report_line("%12zu %9zu  %s", items[i].bytes, items[i].blocks, site);
    if (i < 3)
      output_summary_line("shoal:   %zu bytes in %zu block%s at %s", items[i].bytes,
                          items[i].blocks, items[i].blocks == 1 ? "" : "s", site);
  }
  if (count > shown) {
    size_t blocks = 0, bytes = 0;
    for (size_t i = shown; i < count; i++) blocks += items[i].blocks, bytes += items[i].bytes;
    output_report_line("%12zu %9zu  (%zu more call stacks)", bytes, blocks, count - shown);
  }
}

static void write_sizes(leak_t *items, size_t count, const char *size_title) {
  qsort(items, count, sizeof *items, by_size);
  count = merge_runs(items, count, by_size);
  qsort(items, count, sizeof *items, by_bytes_descending);
  output_report_line("%12s %9s  %s", "bytes", "blocks", size_title);
  size_t shown = count < REPORT_SIZES_MAX ? count : REPORT_SIZES_MAX;
  for (size_t i = 0; i < shown; i++) {
    if (items[i].size == OUTSIZED)
      output_report_line("%12zu %9zu  over %d KiB", items[i].bytes, items[i].blocks,
                         MEDIUM_MAX >> 10);
    else
      output_report_line("%12zu %9zu  %zu", items[i].bytes, items[i].blocks, items[i].size);
  }
  if (count > shown) output_report_line("%12s %9s  (%zu more sizes)", "", "", count - shown);
}

/* ---- what the leaked blocks are (the program's namer) ----
 * FastMM's summary: per range of sizes, what each block holds, as the
 * program's namer tells ("17 - 32 bytes: TFoo x 2, UnicodeString x 5").
 * Names are interned in a fixed table; past it, blocks count as "other". */

#define KIND_NAMES_MAX 256
#define KIND_NAME_MAX  64

typedef struct kind_count_s {
  size_t low, high; /* the size range: the size class of the request */
  uint32_t name;    /* index in kind_names */
  size_t blocks;
} kind_count_t;

static char kind_names[KIND_NAMES_MAX][KIND_NAME_MAX]; /* at exit, once */
static uint32_t kind_name_count;

static uint32_t kind_intern(const char *name) {
  for (uint32_t i = 0; i < kind_name_count; i++)
    if (strcmp(kind_names[i], name) == 0) return i;
  if (kind_name_count == KIND_NAMES_MAX) return 0; /* "other" */
  size_t length = strlen(name);
  if (length > KIND_NAME_MAX - 1) length = KIND_NAME_MAX - 1;
  memcpy(kind_names[kind_name_count], name, length);
  kind_names[kind_name_count][length] = '\0';
  return kind_name_count++;
}

static void size_range(size_t size, size_t *low, size_t *high) {
  if (size > MEDIUM_MAX) {
    *low = MEDIUM_MAX + 1;
    *high = SIZE_MAX;
    return;
  }
  uint8_t size_class = size_class_of(size);
  *high = class_block_size[size_class];
  *low = size_class == 0 ? 1 : class_block_size[size_class - 1] + 1;
}

static int kind_by_range_then_name(const void *a, const void *b) {
  const kind_count_t *x = a, *y = b;
  if (x->low != y->low) return x->low < y->low ? -1 : 1;
  return x->name < y->name ? -1 : x->name > y->name;
}

static int kind_by_blocks_descending(const void *a, const void *b) {
  const kind_count_t *x = a, *y = b;
  if (x->blocks != y->blocks) return x->blocks > y->blocks ? -1 : 1;
  return strcmp(kind_names[x->name], kind_names[y->name]);
}

/* kinds has room for count entries. */
static void write_kinds(const leak_t *items, size_t count, kind_count_t *kinds, bool estimated,
                        shoal_block_namer_t namer) {
  kind_name_count = 0;
  kind_intern("other");
  for (size_t i = 0; i < count; i++) {
    char name[KIND_NAME_MAX] = "";
    size_t length = namer((const void *)items[i].block, items[i].size, name, sizeof name);
    if (length == 0 || length >= sizeof name) memcpy(name, "other", sizeof "other");
    kinds[i].name = kind_intern(name);
    kinds[i].blocks = items[i].blocks;
    size_range(items[i].size, &kinds[i].low, &kinds[i].high);
  }
  qsort(kinds, count, sizeof *kinds, kind_by_range_then_name);
  size_t merged = 0;
  for (size_t i = 0; i < count; i++) {
    kind_count_t *last = merged > 0 ? &kinds[merged - 1] : NULL;
    if (last != NULL && last->low == kinds[i].low && last->name == kinds[i].name)
      last->blocks += kinds[i].blocks;
    else
      kinds[merged++] = kinds[i];
  }
  output_report_line("%s what the blocks hold, by size%s:", "shoal: leak report:",
                     estimated ? " (from the sampled blocks)" : "");
  for (size_t start = 0; start < merged;) {
    size_t end = start;
    while (end < merged && kinds[end].low == kinds[start].low) end++;
    qsort(kinds + start, end - start, sizeof *kinds, kind_by_blocks_descending);
    char line[1024];
    size_t length = 0;
    if (kinds[start].high == SIZE_MAX)
      length = (size_t)text_format(line, sizeof line, "  over %d KiB:", MEDIUM_MAX >> 10);
    else
      length = (size_t)text_format(line, sizeof line, "  %zu - %zu bytes:", kinds[start].low,
                                   kinds[start].high);
    for (size_t i = start; i < end && length < sizeof line; i++)
      length += (size_t)text_format(line + length, sizeof line - length, "%s %s x %s%zu",
                                    i == start ? "" : ",", kind_names[kinds[i].name],
                                    estimated ? "~" : "", kinds[i].blocks);
    output_report_line("%s", line);
    start = end;
  }
}

/* Blocks the C or C++ runtime or the loader allocated for themselves (a
 * thread's TLS, libstdc++'s emergency exception pool) and keep to the end:
 * not the program's leaks. */
static bool from_c_runtime(const site_t *site) {
  char name[512];
  symbol_name((const uint8_t *)site->frames[0] - 1, name, sizeof name);
  return strstr(name, "(libc.so") != NULL || strstr(name, "(ld-linux") != NULL ||
         strstr(name, "(libstdc++.so") != NULL;
}

/* Move the C runtime's blocks to the end; returns how many are the program's. */
static size_t set_runtime_apart(leak_t *items, size_t count, size_t *blocks, size_t *bytes) {
  size_t kept = 0;
  *blocks = *bytes = 0;
  for (size_t i = 0; i < count; i++) {
    if (from_c_runtime(&items[i].site)) {
      *blocks += items[i].blocks;
      *bytes += items[i].bytes;
      continue;
    }
    leak_t program = items[i];
    items[i] = items[kept];
    items[kept++] = program;
  }
  return kept;
}

/* Sampled mode: the exact live blocks of each size class, summed from the
 * core's counters, stand in for the by-size table. */
static size_t class_leaks(leak_t *items, size_t *blocks, size_t *bytes, size_t *runtime_blocks,
                          size_t *runtime_bytes) {
  static shoal_stats_t stats; /* at exit, once */
  stats_fill(&stats);
  size_t used = 0;
  for (size_t i = 0; i < SHOAL_STATS_SIZE_CLASSES; i++) {
    size_t runtime =
        unwinder_live[i] < stats.classes[i].live ? unwinder_live[i] : stats.classes[i].live;
    *runtime_blocks += runtime;
    *runtime_bytes += runtime * stats.classes[i].block_size;
    if (stats.classes[i].live == runtime) continue;
    memset(&items[used], 0, sizeof items[used]);
    items[used].size = stats.classes[i].block_size;
    items[used].blocks = stats.classes[i].live - runtime;
    items[used].bytes = items[used].blocks * stats.classes[i].block_size;
    used++;
  }
  if (stats.large.live + stats.huge.live != 0) { /* sizes vary: one row for all */
    memset(&items[used], 0, sizeof items[used]);
    items[used].size = OUTSIZED;
    items[used].blocks = stats.large.live + stats.huge.live;
    items[used].bytes = stats.outsized_live_bytes;
    used++;
  }
  *blocks = stats.live_blocks - *runtime_blocks;
  *bytes = stats.live_bytes - *runtime_bytes;
  return used;
}

void leaks_report(void) {
  bool exact = (diag_mode() & (DIAG_LEAKS_ALL | DIAG_CHECK)) != 0;
  size_t records = 0;
  records_for_each(count_records, &records);
  leak_list_t list = {NULL, 0, records + 1};
  /* the records, a copy for the by-size table, the class rows; the kinds
   * table reuses the copy's room (a kind_count_t is smaller than a leak_t) */
  size_t capacity = 2 * (records + 1) + SHOAL_STATS_SIZE_CLASSES + 1;
  size_t map_bytes = (capacity * sizeof(leak_t) + os_page_size() - 1) & ~(os_page_size() - 1);
  list.items = os_map_aligned(map_bytes, os_page_size());
  if (list.items == NULL) {
    message("leak report: out of memory");
    return;
  }
  records_for_each(collect_live, &list);

  size_t blocks = 0, bytes = 0, runtime_blocks = 0, runtime_bytes = 0;
  leak_t *by_class = list.items + list.count; /* sizes: apart, the site table merges in place */
  size_t classes = 0;
  if (exact) {
    list.count = set_runtime_apart(list.items, list.count, &runtime_blocks, &runtime_bytes);
    for (size_t i = 0; i < list.count; i++)
      blocks += list.items[i].blocks, bytes += list.items[i].bytes;
  } else {
    classes = class_leaks(by_class, &blocks, &bytes, &runtime_blocks, &runtime_bytes);
  }
  shoal_block_namer_t namer = atomic_load_explicit(&block_namer, memory_order_acquire);
  if (blocks == 0) {
    output_error_line("shoal: leak report: no leaks, every block was freed");
  } else if (exact) {
    output_error_line("shoal: leak report: %zu block%s (%zu bytes) still allocated at exit%s%s",
                      blocks, blocks == 1 ? "" : "s", bytes,
                      output_to_file() ? "; the report is in " : "",
                      output_to_file() ? output_file_path() : "");
    memcpy(by_class, list.items, list.count * sizeof *by_class);
    if (namer != NULL) write_kinds(list.items, list.count, (kind_count_t *)by_class, false, namer);
    memcpy(by_class, list.items, list.count * sizeof *by_class);
    write_sites(list.items, list.count, false);
    write_sizes(by_class, list.count, "size");
  } else {
    output_error_line(
        "shoal: leak report: %zu block%s (%zu bytes of blocks) still allocated at exit; call "
        "stacks from sampled allocations (SHOAL_LEAKS=all for all)%s%s",
        blocks, blocks == 1 ? "" : "s", bytes, output_to_file() ? "; the report is in " : "",
        output_to_file() ? output_file_path() : "");
    if (list.count > 0) {
      if (namer != NULL) {
        kind_count_t *kinds = (kind_count_t *)(by_class + classes);
        write_kinds(list.items, list.count, kinds, true, namer);
      }
      write_sites(list.items, list.count, true);
    } else {
      output_report_line("  (no sampled allocation is among them)");
    }
    write_sizes(by_class, classes, "block size");
  }
  if (runtime_blocks != 0)
    output_report_line(
        "shoal: leak report: not counted: %zu block%s (%zu bytes) the C/C++ runtime keeps "
        "for itself",
        runtime_blocks, runtime_blocks == 1 ? "" : "s", runtime_bytes);
  site_notes_write();
  os_unmap(list.items, map_bytes);
}
