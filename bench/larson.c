/* larson — a server simulation after Larson and Krishnan ("Memory allocation
 * for long-running server applications", ISMM 1998): threads keep replacing
 * random blocks of a shared pool with new blocks of random size, so the pool
 * churns for as long as the server runs and most frees release a block that
 * another thread allocated.
 *
 * The pool holds POOL_SLOTS blocks, filled by the main thread before the
 * clock starts. A replacement: allocate a block (10..500
 * bytes, one in 64 up to 8000), stamp it, swap it into a random slot with one
 * atomic exchange, check the stamp of the block it took out and free that.
 * SIZE counts replacements in all, split evenly among the threads, so the
 * work is the same at every thread count.
 *
 * A third argument "sized" (larson SIZE THREADS sized) runs the same work
 * through C++'s operator new and sized operator delete(void *, size_t), as
 * mimalloc-bench's larson-sized does, so an allocator with a fast path for a
 * free that is told the size is measured on it. Both are looked up at run
 * time (dlsym of the mangled names _Znwm and _ZdlPvm): the preloaded
 * allocator's own if it has them, else libstdc++'s (loaded for this), whose
 * sized delete calls free; if neither is found it is malloc and free.
 *
 * time_s: the threads' run, from the start line to the last join;
 * mops: million replacements per second over all threads; sized runs add
 * sized (1 if the operators were found) and sized_own (1 when the sized
 * delete is the allocator's own, in the object that defines free; 0 when it
 * is libstdc++'s or absent). */
#include "bench.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdbool.h>

#define POOL_SLOTS 32768

static const long SIZES[3] = {40000, 3000000, 20000000};

typedef struct block_header {
  uint32_t size;
  uint32_t id;
} block_header_t;

typedef struct worker {
  int index;
  long ops;
} worker_t;

static _Atomic(block_header_t *) pool[POOL_SLOTS];
static pthread_barrier_t start_line;

/* The sized variant: operator new(size_t) and operator delete(void *, size_t),
 * asked for on the command line, used if found. */
static bool sized_asked, sized;
static void *(*operator_new)(size_t);
static void (*operator_delete_sized)(void *, size_t);

/* Finds the C++ operators; false if there are none to call. */
static bool find_sized_delete(void) {
  for (int attempt = 0; attempt < 2; attempt++) {
    operator_new = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "_Znwm");
    operator_delete_sized = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "_ZdlPvm");
    if (operator_new != NULL && operator_delete_sized != NULL) return true;
    /* Not preloaded: libstdc++'s, as a C++ program would have (it stays). */
    if (attempt == 0 && dlopen("libstdc++.so.6", RTLD_NOW | RTLD_GLOBAL) == NULL) break;
  }
  return false;
}

/* Whether the sized delete is defined in the same object as free. */
static bool sized_delete_is_own(void) {
  Dl_info delete_info, free_info;
  void *free_address = dlsym(RTLD_DEFAULT, "free");
  if (dladdr((void *)operator_delete_sized, &delete_info) == 0 || free_address == NULL ||
      dladdr(free_address, &free_info) == 0)
    return false;
  return strcmp(delete_info.dli_fname, free_info.dli_fname) == 0;
}

static size_t block_size(rng_t *rng) {
  if (rng_below(rng, 64) == 0) return rng_range(rng, 501, 8000);
  return rng_range(rng, 10, 500);
}

/* The header fills 8 bytes; the stamp covers the rest (at least 2 bytes). */
static block_header_t *block_new(rng_t *rng, uint32_t id) {
  size_t size = block_size(rng);
  block_header_t *b = sized ? operator_new(size) : bench_malloc(size);
  b->size = (uint32_t)size;
  b->id = id;
  block_stamp(b + 1, size - sizeof *b, bench_tag(id));
  return b;
}

static void block_free(block_header_t *b, const char *what) {
  size_t body = b->size - sizeof *b;
  block_check(b + 1, body, body, bench_tag(b->id), what);
  if (sized)
    operator_delete_sized(b, b->size);
  else
    free(b);
}

static void *worker_run(void *arg) {
  worker_t *w = arg;
  rng_t rng = rng_make(7000 + (uint64_t)w->index);
  uint32_t id = (uint32_t)w->index << 24;
  pthread_barrier_wait(&start_line);
  for (long i = 0; i < w->ops; i++) {
    block_header_t *b = block_new(&rng, id++);
    size_t slot = (size_t)rng_below(&rng, POOL_SLOTS);
    block_free(atomic_exchange_explicit(&pool[slot], b, memory_order_acq_rel), "replaced");
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc == 4) {
    if (strcmp(argv[3], "sized") != 0) {
      fprintf(stderr, "usage: larson tiny|quick|full|COUNT [THREADS [sized]]\n");
      return 2;
    }
    argc = 3;
    sized_asked = true;
    sized = find_sized_delete();
  }
  bench_args_t args = bench_init(argc, argv, "larson", SIZES, 2);
  rng_t rng = rng_make(7);
  for (size_t i = 0; i < POOL_SLOTS; i++) atomic_init(&pool[i], block_new(&rng, (uint32_t)i));
  worker_t *workers = bench_calloc((size_t)args.threads, sizeof *workers);
  for (int i = 0; i < args.threads; i++)
    workers[i] = (worker_t){.index = i, .ops = args.size / args.threads};
  double seconds = bench_run_timed(&start_line, args.threads, worker_run, workers, sizeof *workers);

  for (size_t i = 0; i < POOL_SLOTS; i++) block_free(atomic_load(&pool[i]), "final");
  double total = (double)(args.size / args.threads) * args.threads;
  if (sized_asked)
    bench_report("threads=%d time_s=%.4f mops=%.3f sized=%d sized_own=%d", args.threads, seconds,
                 total / seconds * 1e-6, sized, sized && sized_delete_is_own());
  else
    bench_report("threads=%d time_s=%.4f mops=%.3f", args.threads, seconds, total / seconds * 1e-6);
  free(workers);
  return 0;
}
