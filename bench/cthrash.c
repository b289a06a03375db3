/* cthrash — false sharing caused by the allocator, after Hoard's cache-thrash
 * and cache-scratch benchmarks (Berger et al., "Hoard: a scalable memory
 * allocator for multithreaded applications", ASPLOS 2000). Objects are 8
 * bytes, so many fit on one cache line; if the allocator hands objects on
 * one line to different threads, every write bounces the line between cores.
 *
 *   thrash_s   active false sharing: each thread repeatedly allocates an
 *              object, writes it WRITES times, frees it. An allocator that
 *              serves threads from a shared pool puts their objects side by side.
 *   scratch_s  passive false sharing: the main thread allocates one object
 *              per thread, back to back as its first allocations (this phase
 *              runs first), and hands them out; each thread frees
 *              its object, then runs the same loop. An allocator that reuses a
 *              freed block in the freeing thread gives each thread a
 *              neighbour's line.
 *
 * SIZE counts the objects allocated per phase, split evenly among the
 * THREADS threads. Every object is checked after its writes.
 *
 * time_s: the sum of the two phases (start line to last join, each). */
#include "bench.h"

#define WRITES      1000
#define OBJECT_SIZE 8
#define MAX_THREADS 1024

static const long SIZES[3] = {4000, 200000, 1000000};

typedef struct worker {
  int index;
  long objects;
  void *handed; /* scratch: the object from the main thread, or NULL */
} worker_t;

static pthread_barrier_t start_line;

static void object_work(volatile uint8_t *object, uint8_t seed) {
  for (int k = 0; k < OBJECT_SIZE; k++) object[k] = seed;
  for (int j = 0; j < WRITES; j++) object[j % OBJECT_SIZE]++;
  for (int k = 0; k < OBJECT_SIZE; k++)
    if (object[k] != (uint8_t)(seed + WRITES / OBJECT_SIZE))
      bench_fail("object %p byte %d is %u", (void *)object, k, object[k]);
}

static void *worker_run(void *arg) {
  worker_t *w = arg;
  pthread_barrier_wait(&start_line);
  free(w->handed);
  for (long i = 0; i < w->objects; i++) {
    uint8_t *object = bench_malloc(OBJECT_SIZE);
    object_work(object, (uint8_t)(i + w->index));
    free(object);
  }
  return NULL;
}

/* Runs one phase; with `scratch`, each thread starts from a handed-out object. */
static double phase(bench_args_t args, int scratch) {
  void *handed[MAX_THREADS] = {NULL};
  for (int i = 0; scratch && i < args.threads; i++) handed[i] = bench_malloc(OBJECT_SIZE);
  worker_t *workers = bench_calloc((size_t)args.threads, sizeof *workers);
  for (int i = 0; i < args.threads; i++)
    workers[i] = (worker_t){.index = i, .objects = args.size / args.threads, .handed = handed[i]};
  double seconds = bench_run_timed(&start_line, args.threads, worker_run, workers, sizeof *workers);
  free(workers);
  return seconds;
}

int main(int argc, char **argv) {
  bench_args_t args = bench_init(argc, argv, "cthrash", SIZES, 2);
  double scratch = phase(args, 1); /* first: its objects are the process's first */
  double thrash = phase(args, 0);
  bench_report("threads=%d time_s=%.4f thrash_s=%.4f scratch_s=%.4f", args.threads,
               thrash + scratch, thrash, scratch);
  return 0;
}
