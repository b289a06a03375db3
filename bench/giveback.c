/* giveback — RSS after a burst: does the allocator give memory back when the
 * program frees what it allocated? Threads together allocate SIZE MiB in
 * small blocks (16..512 bytes), touching each, then each frees its own. The
 * threads stay alive but idle while the main thread reads RSS right after the
 * last free and again 100 ms later (memory held by threads that stopped
 * allocating counts here), then they exit.
 *
 * The workload keeps its own lists of pointers in mmap'd memory that it
 * unmaps before measuring, so the RSS figures are the allocator's.
 *
 * time_s: allocating and freeing, start line to the last free;
 * rss_base_kb: before the burst; rss_freed_kb: right after the last free;
 * rss_100ms_kb: 100 ms later. */
#include "bench.h"

#include <sys/mman.h>

#define MIB ((size_t)1024 * 1024)

static const long SIZES[3] = {16, 256, 1024}; /* MiB in all threads together */

typedef struct worker {
  int index;
  size_t bytes;
} worker_t;

static pthread_barrier_t start_line, freed, measured;

static void *worker_run(void *arg) {
  worker_t *w = arg;
  rng_t rng = rng_make(500 + (uint64_t)w->index);
  size_t capacity = w->bytes / 16 + 1; /* enough pointers at the smallest size */
  void **blocks = mmap(NULL, capacity * sizeof *blocks, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (blocks == MAP_FAILED) bench_fail("mmap of the block list failed");
  uint16_t *sizes = mmap(NULL, capacity * sizeof *sizes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (sizes == MAP_FAILED) bench_fail("mmap of the size list failed");

  pthread_barrier_wait(&start_line);
  size_t count = 0;
  for (size_t total = 0; total < w->bytes; count++) {
    sizes[count] = (uint16_t)rng_range(&rng, 16, 512);
    blocks[count] = bench_malloc(sizes[count]);
    memset(blocks[count], bench_tag(count), sizes[count]);
    total += sizes[count];
  }
  for (size_t i = 0; i < count; i++) {
    block_check(blocks[i], sizes[i], sizes[i], bench_tag(i), "before free");
    free(blocks[i]);
  }
  munmap(blocks, capacity * sizeof *blocks);
  munmap(sizes, capacity * sizeof *sizes);
  pthread_barrier_wait(&freed);
  pthread_barrier_wait(&measured); /* stay alive, idle, while RSS is read */
  return NULL;
}

int main(int argc, char **argv) {
  bench_args_t args = bench_init(argc, argv, "giveback", SIZES, 2);
  worker_t *workers = bench_calloc((size_t)args.threads, sizeof *workers);
  pthread_t *tids = bench_calloc((size_t)args.threads, sizeof *tids);
  unsigned parties = (unsigned)args.threads + 1;
  pthread_barrier_init(&start_line, NULL, parties);
  pthread_barrier_init(&freed, NULL, parties);
  pthread_barrier_init(&measured, NULL, parties);
  for (int i = 0; i < args.threads; i++)
    workers[i] = (worker_t){.index = i, .bytes = (size_t)args.size * MIB / (size_t)args.threads};

  bench_spawn(tids, args.threads, worker_run, workers, sizeof *workers);
  long rss_base = bench_rss_kb();
  pthread_barrier_wait(&start_line);
  double start = bench_now();
  pthread_barrier_wait(&freed);
  double seconds = bench_now() - start;
  long rss_freed = bench_rss_kb();
  bench_sleep_ms(100);
  long rss_later = bench_rss_kb();
  pthread_barrier_wait(&measured);
  bench_join(tids, args.threads);

  bench_report("threads=%d time_s=%.4f rss_base_kb=%ld rss_freed_kb=%ld rss_100ms_kb=%ld mib=%ld",
               args.threads, seconds, rss_base, rss_freed, rss_later, args.size);
  free(workers);
  free(tids);
  return 0;
}
