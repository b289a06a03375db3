/* replay — a real program's malloc/free/realloc calls, replayed under
 * whatever allocator is preloaded: the NexusDB replay idea of the FastCode
 * MM challenge (seed 002), with traces we record ourselves
 * (SHOAL_TRACE=path; the format is src/trace_format.h, the committed traces
 * and how each was made are in bench/traces/README.md).
 *
 *   usage: replay [SIZE [THREADS]] [--threads N] TRACE
 *     SIZE     tiny: the trace once; quick, full: as many rounds as it takes
 *              to replay 10 M, 50 M ops (MIN_OPS); a number: that many
 *              rounds. Each round replays the whole trace, then frees what
 *              the trace left live.
 *     THREADS  1: every call in one thread, in the order the program made
 *              them. The trace's own thread count (the default): one replay
 *              thread per traced thread, each making its own calls in
 *              order; a call on a block another thread allocated waits
 *              (spins, then yields) until that allocation has been replayed,
 *              so cross-thread frees stay cross-thread.
 *     TRACE    plain, or gzip-compressed when the name ends in .gz (read
 *              through `gzip -dc` while loading)
 *
 * Loading (untimed): the records are read, sorted by sequence and turned
 * into ops on dense block ids. An address is reused once freed, so each
 * allocation's result starts a new id and a free or realloc of an address
 * means the id live there at that moment. A free of an address never seen
 * allocated (allocated before tracing began) is skipped; a realloc of one is
 * replayed as a malloc of the new size ("adopted"); a failed call is
 * skipped. calloc is recorded, and replayed, as malloc. The bookkeeping
 * lives in memory mapped directly, not in the allocator under test, and the
 * peak RSS is reset (/proc/self/clear_refs) after loading, so peak_rss_kb is
 * the replay's: base_rss_kb (the bookkeeping, the program) plus heap_peak_kb.
 *
 * Every allocated block gets its id's tag in its first and last byte, so
 * its memory is really used; a free or realloc checks the tag first.
 *
 * time_s: the replay of all rounds (multi-threaded: from the start line to
 * the last join), without loading and without freeing what the trace left
 * live. */
#include "bench.h"

#include "../src/diag/trace_format.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <unistd.h>

/* Ops replayed in all for SIZE tiny, quick, full: the trace is replayed in
 * as many rounds as it takes (tiny: once). */
static const long MIN_OPS[3] = {0, 10000000, 50000000};

#define NO_BLOCK     UINT32_MAX
#define MAX_THREADS  4096
#define RADIX_BITS   11
#define SPINS_BEFORE 64 /* pauses before a waiting replayer starts to yield */

typedef enum op_kind_e { OP_MALLOC, OP_ALIGNED, OP_REALLOC, OP_FREE } op_kind_t;

/* One call to replay, 12 bytes. old_id: the block freed or reallocated
 * (NO_BLOCK for free(NULL)); new_id: the block allocated (NO_BLOCK for a
 * free), whose size is block_sizes[new_id]. */
typedef struct op_s {
  uint32_t old_id;
  uint32_t new_id;
  uint16_t thread; /* dense replay thread, 0.. */
  uint8_t kind;    /* op_kind_t */
  uint8_t alignment_log2;
} op_t;

/* The loaded trace: ops in call order, or grouped by thread. */
typedef struct trace_s {
  op_t *ops;
  size_t op_count;
  uint32_t block_count;
  uint64_t *block_sizes; /* by id: bytes asked for */
  uint32_t *live_end;    /* ids the trace never frees */
  size_t live_end_count;
  size_t thread_count;                  /* traced threads that made a replayed call */
  size_t thread_first[MAX_THREADS + 1]; /* grouped: thread t's ops from here */
  size_t skipped, adopted, cross, records;
} trace_t;

static _Atomic(void *) *block_ptrs; /* by id: the block, once allocated */
static uint64_t *block_sizes;
static pthread_barrier_t start_line;

/* ---- bookkeeping memory, outside the allocator under test ------------- */

static void *map_array(size_t count, size_t size) {
  size_t bytes = (count > 0 ? count : 1) * size;
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) bench_fail("mmap of %zu bytes failed", bytes);
  return p;
}

static void unmap_array(void *p, size_t count, size_t size) {
  munmap(p, (count > 0 ? count : 1) * size);
}

/* ---- reading the file ------------------------------------------------- */

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

static FILE *trace_open(const char *path, bool *piped) {
  *piped = ends_with(path, ".gz");
  if (!*piped || access(path, R_OK) != 0) return fopen(path, "rb");
  char command[4200] = "gzip -dc -- '"; /* the name quoted for sh: ' as '\'' */
  size_t n = strlen(command);
  for (const char *c = path; *c != '\0'; c++) {
    if (n + 6 >= sizeof command) bench_fail("%s: name too long", path);
    if (*c == '\'') {
      memcpy(command + n, "'\\''", 4);
      n += 4;
    } else {
      command[n++] = *c;
    }
  }
  command[n++] = '\'';
  command[n] = '\0';
  return popen(command, "r");
}

/* Returns the records, in file order, in mapped memory of `*capacity` bytes. */
static shoal_trace_record_t *trace_read(const char *path, size_t *count, size_t *capacity) {
  bool piped;
  FILE *f = trace_open(path, &piped);
  if (f == NULL) bench_fail("%s: %s", path, strerror(errno));
  shoal_trace_header_t header;
  if (fread(&header, sizeof header, 1, f) != 1)
    bench_fail("%s: not a shoal trace (shorter than its header)", path);
  if (memcmp(header.magic, SHOAL_TRACE_MAGIC, sizeof header.magic) != 0)
    bench_fail("%s: not a shoal trace (bad magic)", path);
  if (header.version != SHOAL_TRACE_VERSION)
    bench_fail("%s: trace format version %u, this replay reads version %d", path, header.version,
               SHOAL_TRACE_VERSION);
  if (header.record_size != sizeof(shoal_trace_record_t))
    bench_fail("%s: records of %u bytes, this replay reads %zu-byte records", path,
               header.record_size, sizeof(shoal_trace_record_t));
  size_t length = 0, size = (size_t)1 << 24;
  uint8_t *bytes = map_array(size, 1);
  for (;;) {
    if (length == size) {
      void *grown = mremap(bytes, size, 2 * size, MREMAP_MAYMOVE);
      if (grown == MAP_FAILED) bench_fail("%s: no memory for %zu bytes of records", path, 2 * size);
      bytes = grown;
      size *= 2;
    }
    size_t got = fread(bytes + length, 1, size - length, f);
    if (got == 0) break;
    length += got;
  }
  if (ferror(f)) bench_fail("%s: read error", path);
  if (piped ? pclose(f) != 0 : fclose(f) != 0) bench_fail("%s: gzip -dc failed", path);
  if (length % sizeof(shoal_trace_record_t) != 0)
    fprintf(stderr, "replay: note: %s ends in a partial record, ignored\n", path);
  *count = length / sizeof(shoal_trace_record_t);
  *capacity = size;
  return (shoal_trace_record_t *)bytes;
}

/* LSD radix sort by sequence; returns the sorted array (the other is unmapped). */
static shoal_trace_record_t *records_sort(shoal_trace_record_t *records, size_t count) {
  uint64_t lo = UINT64_MAX, hi = 0;
  bool sorted = true;
  for (size_t i = 0; i < count; i++) {
    uint64_t s = records[i].sequence;
    if (s < lo) lo = s;
    if (s > hi) hi = s;
    if (i > 0 && s < records[i - 1].sequence) sorted = false;
  }
  if (sorted) return records;
  shoal_trace_record_t *from = records, *to = map_array(count, sizeof *to);
  size_t *position = map_array(1 << RADIX_BITS, sizeof *position);
  for (unsigned shift = 0; shift < 64 && ((hi - lo) >> shift) != 0; shift += RADIX_BITS) {
    memset(position, 0, sizeof *position << RADIX_BITS);
    for (size_t i = 0; i < count; i++)
      position[((from[i].sequence - lo) >> shift) & ((1 << RADIX_BITS) - 1)]++;
    size_t sum = 0;
    for (size_t d = 0; d < (1 << RADIX_BITS); d++) {
      size_t n = position[d];
      position[d] = sum;
      sum += n;
    }
    for (size_t i = 0; i < count; i++)
      to[position[((from[i].sequence - lo) >> shift) & ((1 << RADIX_BITS) - 1)]++] = from[i];
    shoal_trace_record_t *t = from;
    from = to;
    to = t;
  }
  unmap_array(position, 1 << RADIX_BITS, sizeof *position);
  unmap_array(to, count, sizeof *to);
  return from;
}

/* ---- address -> live block id: linear probing, backward-shift deletion -- */

typedef struct address_map_s {
  uint64_t *keys; /* 0: empty */
  uint32_t *ids;
  size_t mask;
} address_map_t;

static size_t address_slot(const address_map_t *m, uint64_t address) {
  return (size_t)((address >> 4) * 0x9E3779B97F4A7C15ull >> 20) & m->mask;
}

/* The slot holding `address`, or the empty slot where it would go. */
static size_t address_find(const address_map_t *m, uint64_t address) {
  size_t i = address_slot(m, address);
  while (m->keys[i] != 0 && m->keys[i] != address) i = (i + 1) & m->mask;
  return i;
}

static void address_remove(address_map_t *m, size_t hole) {
  m->keys[hole] = 0;
  for (size_t i = (hole + 1) & m->mask; m->keys[i] != 0; i = (i + 1) & m->mask) {
    size_t home = address_slot(m, m->keys[i]);
    if (((i - home) & m->mask) >= ((i - hole) & m->mask)) { /* home not in (hole, i] */
      m->keys[hole] = m->keys[i];
      m->ids[hole] = m->ids[i];
      m->keys[i] = 0;
      hole = i;
    }
  }
}

/* ---- records -> ops ---------------------------------------------------- */

typedef struct loader_s {
  trace_t *trace;
  address_map_t map;
  uint32_t *block_owner;   /* by id: the traced thread that allocated it */
  uint8_t *block_consumed; /* by id: freed or reallocated by some op */
  int32_t *thread_index;   /* trace thread number -> dense index, or -1 */
  uint32_t thread_limit;
} loader_t;

static uint16_t loader_thread(loader_t *l, uint32_t traced, const char *path) {
  if (traced >= l->thread_limit) bench_fail("%s: thread number %u out of range", path, traced);
  if (l->thread_index[traced] < 0) {
    if (l->trace->thread_count == MAX_THREADS)
      bench_fail("%s: more than %d threads", path, MAX_THREADS);
    l->thread_index[traced] = (int32_t)l->trace->thread_count++;
  }
  return (uint16_t)l->thread_index[traced];
}

/* The live id at `address` (removed from the map), or NO_BLOCK. */
static uint32_t loader_take(loader_t *l, uint64_t address, uint32_t thread) {
  size_t slot = address_find(&l->map, address);
  if (l->map.keys[slot] == 0) return NO_BLOCK;
  uint32_t id = l->map.ids[slot];
  address_remove(&l->map, slot);
  l->block_consumed[id] = 1;
  if (l->block_owner[id] != thread) l->trace->cross++;
  return id;
}

/* A new id for the block at `address`; a stale id left there (a free the
 * trace missed) stays live to the end. */
static uint32_t loader_give(loader_t *l, uint64_t address, uint64_t size, uint32_t thread) {
  trace_t *t = l->trace;
  uint32_t id = t->block_count++;
  size_t slot = address_find(&l->map, address);
  l->map.keys[slot] = address;
  l->map.ids[slot] = id;
  t->block_sizes[id] = size;
  l->block_owner[id] = thread;
  return id;
}

static void trace_load(trace_t *t, const char *path) {
  size_t count, capacity;
  shoal_trace_record_t *records = trace_read(path, &count, &capacity);
  shoal_trace_record_t *sorted = records_sort(records, count);
  if (count > UINT32_MAX / 2) bench_fail("%s: too many records (%zu)", path, count);
  uint32_t max_thread = 0;
  for (size_t i = 0; i < count; i++)
    if (sorted[i].thread > max_thread) max_thread = sorted[i].thread;
  if (max_thread >= (1u << 24)) bench_fail("%s: thread number %u out of range", path, max_thread);
  size_t map_size = 2;
  while (map_size < 2 * count) map_size *= 2;
  loader_t l = {.trace = t,
                .map = {.keys = map_array(map_size, sizeof(uint64_t)),
                        .ids = map_array(map_size, sizeof(uint32_t)),
                        .mask = map_size - 1},
                .block_owner = map_array(count, sizeof(uint32_t)),
                .block_consumed = map_array(count, 1),
                .thread_index = map_array((size_t)max_thread + 1, sizeof(int32_t)),
                .thread_limit = max_thread + 1};
  memset(l.thread_index, 0xff, ((size_t)max_thread + 1) * sizeof(int32_t));
  t->records = count;
  t->ops = map_array(count, sizeof *t->ops);
  t->block_sizes = map_array(count, sizeof *t->block_sizes);
  for (size_t i = 0; i < count; i++) {
    const shoal_trace_record_t *r = &sorted[i];
    if (i > 0 && r->sequence == sorted[i - 1].sequence)
      bench_fail("%s: sequence %llu appears twice", path, (unsigned long long)r->sequence);
    uint32_t thread = r->thread;
    op_t op = {.old_id = NO_BLOCK, .new_id = NO_BLOCK};
    switch (r->op) {
    case SHOAL_TRACE_MALLOC:
    case SHOAL_TRACE_ALIGNED:
      if (r->block == 0) goto skip; /* it failed */
      op.kind = r->op == SHOAL_TRACE_MALLOC ? OP_MALLOC : OP_ALIGNED;
      op.alignment_log2 = (uint8_t)r->alignment_log2;
      if (op.kind == OP_ALIGNED && r->alignment_log2 >= 48)
        bench_fail("%s: alignment 2^%u", path, r->alignment_log2);
      op.new_id = loader_give(&l, r->block, r->size, thread);
      break;
    case SHOAL_TRACE_FREE:
      op.kind = OP_FREE;
      if (r->block != 0) {
        op.old_id = loader_take(&l, r->block, thread);
        if (op.old_id == NO_BLOCK) goto skip; /* allocated before tracing */
      }
      break;
    case SHOAL_TRACE_REALLOC:
      if (r->result == 0 && (r->block == 0 || r->size != 0)) goto skip; /* it failed */
      op.kind = OP_REALLOC;
      if (r->block != 0) {
        size_t slot = address_find(&l.map, r->block);
        if (l.map.keys[slot] != 0 || r->result == 0) {
          op.old_id = loader_take(&l, r->block, thread);
          if (op.old_id == NO_BLOCK) goto skip; /* realloc(p, 0) of an unknown p */
        } else {
          op.kind = OP_MALLOC; /* a block from before tracing: its new self */
          t->adopted++;
        }
      }
      if (r->result == 0)
        op.kind = OP_FREE; /* realloc(p, 0) freed p */
      else
        op.new_id = loader_give(&l, r->result, r->size, thread);
      break;
    default:
      bench_fail("%s: record %llu has unknown op %u", path, (unsigned long long)r->sequence, r->op);
    }
    op.thread = loader_thread(&l, thread, path);
    t->ops[t->op_count++] = op;
    continue;
  skip:
    t->skipped++;
  }
  unmap_array(sorted, capacity / sizeof *sorted, sizeof *sorted);
  t->live_end = map_array(t->block_count, sizeof *t->live_end);
  for (uint32_t id = 0; id < t->block_count; id++)
    if (!l.block_consumed[id]) t->live_end[t->live_end_count++] = id;
  unmap_array(l.map.keys, map_size, sizeof(uint64_t));
  unmap_array(l.map.ids, map_size, sizeof(uint32_t));
  unmap_array(l.block_owner, count, sizeof(uint32_t));
  unmap_array(l.block_consumed, count, 1);
  unmap_array(l.thread_index, (size_t)max_thread + 1, sizeof(int32_t));
}

/* Regroups the ops by thread, each thread's in call order. */
static void trace_group_by_thread(trace_t *t) {
  size_t *next = t->thread_first;
  memset(next, 0, sizeof t->thread_first);
  for (size_t i = 0; i < t->op_count; i++) next[t->ops[i].thread + 1]++;
  for (size_t k = 1; k <= t->thread_count; k++) next[k] += next[k - 1];
  op_t *grouped = map_array(t->records, sizeof *grouped);
  size_t position[MAX_THREADS];
  memcpy(position, next, t->thread_count * sizeof *position);
  for (size_t i = 0; i < t->op_count; i++) grouped[position[t->ops[i].thread]++] = t->ops[i];
  unmap_array(t->ops, t->records, sizeof *t->ops);
  t->ops = grouped;
}

/* ---- the replay -------------------------------------------------------- */

static inline void cpu_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

/* The block `id`; when another thread allocates it, waits until it has. */
static void *block_wait(uint32_t id) {
  for (int spins = 0;; spins++) {
    void *p = atomic_load_explicit(&block_ptrs[id], memory_order_acquire);
    if (p != NULL) return p;
    if (spins < SPINS_BEFORE)
      cpu_pause();
    else
      sched_yield();
  }
}

static inline void *block_take(uint32_t id) {
  void *p = atomic_load_explicit(&block_ptrs[id], memory_order_acquire);
  return p != NULL ? p : block_wait(id);
}

static inline void block_stamp_ends(uint8_t *p, uint64_t size, uint32_t id) {
  if (size == 0) return;
  p[0] = bench_tag(id);
  p[size - 1] = bench_tag(id);
}

/* Checks the tag at offsets 0 and `last` (when below `upto`). */
static void block_verify(const uint8_t *p, uint64_t last, uint64_t upto, uint32_t id,
                         const char *what) {
  if (upto > 0 && (p[0] != bench_tag(id) || (last < upto && p[last] != bench_tag(id))))
    bench_fail("%s of block %u (%p, %llu bytes) found its stamp overwritten", what, id,
               (const void *)p, (unsigned long long)block_sizes[id]);
}

static void op_run(const op_t *op) {
  uint8_t *old = NULL, *p = NULL;
  if (op->old_id != NO_BLOCK) {
    old = block_take(op->old_id);
    uint64_t n = block_sizes[op->old_id];
    block_verify(old, n - 1, n, op->old_id, op->kind == OP_FREE ? "free" : "realloc");
  }
  if (op->kind == OP_FREE) {
    free(old);
    return;
  }
  size_t size = (size_t)block_sizes[op->new_id];
  if (op->kind == OP_MALLOC || (op->kind == OP_ALIGNED && op->alignment_log2 <= 3)) {
    p = malloc(size);
  } else if (op->kind == OP_ALIGNED) {
    if (posix_memalign((void **)&p, (size_t)1 << op->alignment_log2, size) != 0) p = NULL;
  } else {
    p = realloc(old, size);
    if (p != NULL && old != NULL) {
      uint64_t n = block_sizes[op->old_id];
      block_verify(p, n - 1, n < size ? n : size, op->old_id, "realloc");
    }
  }
  if (p == NULL) bench_fail("allocation of %zu bytes returned NULL", size);
  block_stamp_ends(p, size, op->new_id);
  atomic_store_explicit(&block_ptrs[op->new_id], p, memory_order_release);
}

typedef struct replayer_s {
  const op_t *ops;
  size_t count;
} replayer_t;

static void *replayer_run(void *arg) {
  replayer_t *r = arg;
  pthread_barrier_wait(&start_line);
  for (size_t i = 0; i < r->count; i++) op_run(&r->ops[i]);
  return NULL;
}

/* One round; returns its time. */
static double trace_replay(const trace_t *t, bool one_thread) {
  memset((void *)block_ptrs, 0, (t->block_count > 0 ? t->block_count : 1) * sizeof *block_ptrs);
  double seconds;
  if (one_thread) {
    double start = bench_now();
    for (size_t i = 0; i < t->op_count; i++) op_run(&t->ops[i]);
    seconds = bench_now() - start;
  } else {
    replayer_t replayers[MAX_THREADS];
    for (size_t k = 0; k < t->thread_count; k++)
      replayers[k] = (replayer_t){.ops = t->ops + t->thread_first[k],
                                  .count = t->thread_first[k + 1] - t->thread_first[k]};
    seconds = bench_run_timed(&start_line, (int)t->thread_count, replayer_run, replayers,
                              sizeof *replayers);
  }
  for (size_t i = 0; i < t->live_end_count; i++)
    free(atomic_load_explicit(&block_ptrs[t->live_end[i]], memory_order_relaxed));
  return seconds;
}

/* Makes VmHWM start again from the present RSS (Linux 4.0 on); false if not. */
static bool peak_rss_reset(void) {
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (f == NULL) return false;
  bool ok = fputs("5", f) >= 0;
  return fclose(f) == 0 && ok;
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash != NULL ? slash + 1 : path;
}

static void usage(void) {
  fprintf(stderr, "usage: replay [tiny|quick|full|ROUNDS [THREADS]] [--threads N] TRACE\n");
  exit(2);
}

typedef struct options_s {
  const char *path;
  long rounds;  /* 0: from min_ops */
  long min_ops; /* SIZE: at least this many ops in all */
  long threads; /* 0: the trace's own */
} options_t;

static long number_argument(const char *text, const char *what) {
  char *end;
  long n = strtol(text, &end, 10);
  if (*end != '\0' || n <= 0) bench_fail("bad %s '%s'", what, text);
  return n;
}

static options_t options_parse(int argc, char **argv) {
  static const char *sizes[3] = {"tiny", "quick", "full"};
  options_t o = {.min_ops = MIN_OPS[0]};
  const char *positional[3];
  int n = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      o.threads = number_argument(argv[++i], "thread count");
    else if (n < 3)
      positional[n++] = argv[i];
    else
      usage();
  }
  if (n == 0) usage();
  o.path = positional[n - 1];
  if (n == 3) o.threads = number_argument(positional[1], "thread count");
  if (n >= 2) {
    o.min_ops = -1;
    for (int k = 0; k < 3; k++)
      if (strcmp(positional[0], sizes[k]) == 0) o.min_ops = MIN_OPS[k];
    if (o.min_ops < 0) o.rounds = number_argument(positional[0], "size");
  }
  return o;
}

int main(int argc, char **argv) {
  static trace_t trace;
  bench_name = "replay";
  options_t o = options_parse(argc, argv);

  double load_start = bench_now();
  trace_load(&trace, o.path);
  if (o.threads == 0) o.threads = (long)trace.thread_count;
  if (o.threads != 1 && o.threads != (long)trace.thread_count)
    bench_fail("%s has %zu threads: THREADS is 1 or %zu", o.path, trace.thread_count,
               trace.thread_count);
  bool one_thread = o.threads == 1;
  if (!one_thread) trace_group_by_thread(&trace);
  block_sizes = trace.block_sizes;
  block_ptrs = map_array(trace.block_count, sizeof *block_ptrs);
  double load_seconds = bench_now() - load_start;
  if (o.rounds == 0)
    o.rounds =
        trace.op_count == 0 ? 1 : (o.min_ops + (long)trace.op_count - 1) / (long)trace.op_count;
  if (o.rounds == 0) o.rounds = 1;
  if (!peak_rss_reset()) fprintf(stderr, "replay: note: peak RSS includes the loading\n");
  long base_rss = bench_rss_kb();

  double seconds = 0;
  for (long r = 0; r < o.rounds; r++) seconds += trace_replay(&trace, one_thread);
  long peak = bench_status_kb("VmHWM");
  bench_report("trace=%s threads=%ld traced_threads=%zu rounds=%ld time_s=%.4f ops=%zu "
               "skipped=%zu adopted=%zu cross=%zu blocks=%u live_end=%zu load_s=%.3f "
               "base_rss_kb=%ld heap_peak_kb=%ld",
               base_name(o.path), o.threads, trace.thread_count, o.rounds, seconds, trace.op_count,
               trace.skipped, trace.adopted, trace.cross, trace.block_count, trace.live_end_count,
               load_seconds, base_rss, peak - base_rss);
  return 0;
}
