/* Randomized multi-threaded stress against a shadow model.
 *
 * WORKER_COUNT threads run long deterministic sequences of allocate
 * (malloc, calloc, posix_memalign, aligned_alloc, realloc(NULL)), realloc,
 * reallocarray and free with random sizes: mostly small, some up to 256 KiB,
 * a few up to 8 MiB. Each thread keeps a shadow table of its live blocks
 * (pointer, size, seed); every block holds the pattern of its seed, checked
 * before each realloc and free and at the end, so any overlap, lost write or
 * block handed out twice breaks a pattern. Blocks also move between threads
 * through a mutex-protected exchange, so a large share of frees and reallocs
 * are cross-thread (and some hit heaps whose thread already exited).
 *
 * The shoal_ names are used so that under TSan (which intercepts the
 * standard names with its own allocator) this still exercises shoal.
 *
 * At the end, with every worker joined and shoal_collect(true) done, the
 * live figures of shoal_stats_get must be back at the baseline. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include "shoal.h"
#include "testhelper.h"

#define KIB ((size_t)1024)
#define MIB (KIB * KIB)

enum { WORKER_COUNT = 6, SLOTS_PER_WORKER = 512, EXCHANGE_SLOTS = 256 };

/* A live block as the model sees it. */
typedef struct block_s {
  unsigned char *pointer;
  size_t size;
  uint64_t seed;
} block_t;

typedef struct worker_s {
  pthread_t thread;
  unsigned index;
  size_t operations;
  block_t slots[SLOTS_PER_WORKER];
  size_t handed_out, taken_in;
} worker_t;

static worker_t workers[WORKER_COUNT];

/* The exchange: a pool any thread may drop a block into or take one from. */
static pthread_mutex_t exchange_lock = PTHREAD_MUTEX_INITIALIZER;
static block_t exchange[EXCHANGE_SLOTS];

/* Log-uniform in [2^low_bits, 2^high_bits]: every size class is hit about
 * as often, not just the biggest ones. */
static size_t random_size_log(test_rng_t *rng, unsigned low_bits, unsigned high_bits) {
  unsigned bits = (unsigned)rng_range(rng, low_bits, high_bits - 1);
  return rng_range(rng, (size_t)1 << bits, (size_t)2 << bits);
}

/* 90 % small (0..1 KiB), 9.5 % medium (1..256 KiB), 0.5 % large (to 8 MiB). */
static size_t random_size(test_rng_t *rng) {
  uint64_t kind = rng_next(rng) % 1000;
  if (kind < 900) return rng_range(rng, 0, 1024);
  if (kind < 995) return random_size_log(rng, 10, 18);
  return random_size_log(rng, 18, 23);
}

static void block_verify(const block_t *block, const char *before) {
  CHECK_CTX(block_check(block->pointer, block->size, block->seed),
            "block %p of %zu bytes (seed %#llx) was corrupted before %s", (void *)block->pointer,
            block->size, (unsigned long long)block->seed, before);
}

/* A fresh block by one of the allocation functions, checked and filled. */
static block_t block_allocate(test_rng_t *rng, uint64_t seed) {
  block_t block = {NULL, random_size(rng), seed};
  size_t alignment = 16;
  switch (rng_next(rng) % 6) {
  case 0:
  case 1:
    block.pointer = shoal_malloc(block.size);
    break;
  case 2: {
    block.pointer = shoal_calloc(1, block.size);
    CHECK_CTX(block.pointer != NULL, "calloc(1, %zu) failed", block.size);
    /* Every byte of small blocks, one per 512 of big ones. */
    size_t stride = block.size <= 64 * KIB ? 1 : 512;
    for (size_t i = 0; i < block.size; i += stride)
      CHECK_CTX(block.pointer[i] == 0, "calloc(1, %zu): byte %zu not zero", block.size, i);
    break;
  }
  case 3: {
    alignment = (size_t)16 << rng_range(rng, 0, 8); /* 16 .. 4096 */
    if (rng_next(rng) % 50 == 0) alignment = 64 * KIB;
    void *result = NULL;
    CHECK(shoal_posix_memalign(&result, alignment, block.size) == 0);
    block.pointer = result;
    break;
  }
  case 4:
    alignment = (size_t)16 << rng_range(rng, 0, 8);
    block.pointer = shoal_aligned_alloc(alignment, block.size);
    break;
  default:
    block.pointer = shoal_realloc(NULL, block.size);
    break;
  }
  CHECK_CTX(block.pointer != NULL, "allocating %zu bytes failed (errno %d)", block.size, errno);
  CHECK_CTX(is_aligned(block.pointer, block.size >= 16 || alignment > 16 ? alignment : 8),
            "%p is not aligned to %zu", (void *)block.pointer, alignment);
  CHECK(shoal_malloc_usable_size(block.pointer) >= block.size);
  block_fill(block.pointer, block.size, block.seed);
  return block;
}

static void block_resize(test_rng_t *rng, block_t *block) {
  block_verify(block, "realloc");
  size_t new_size = random_size(rng);
  if (new_size == 0) new_size = 1; /* realloc(p, 0) frees; that is api.c's business */
  unsigned char *moved;
  if (rng_next(rng) % 4 == 0 && new_size % 8 == 0)
    moved = shoal_reallocarray(block->pointer, new_size / 8, 8);
  else
    moved = shoal_realloc(block->pointer, new_size);
  CHECK_CTX(moved != NULL, "realloc(%zu -> %zu) failed", block->size, new_size);
  CHECK(shoal_malloc_usable_size(moved) >= new_size);
  /* block_fill is prefix-stable only up to PATTERN_FULL_LIMIT, so check the
   * kept bytes against the old pattern where it is dense. */
  size_t kept = block->size < new_size ? block->size : new_size;
  if (block->size <= PATTERN_FULL_LIMIT)
    CHECK_CTX(pattern_check(moved, kept, block->seed), "realloc(%zu -> %zu) lost contents",
              block->size, new_size);
  else
    CHECK_CTX(pattern_check(moved, kept < 4096 ? kept : 4096, block->seed),
              "realloc(%zu -> %zu) lost contents", block->size, new_size);
  block->pointer = moved;
  block->size = new_size;
  block->seed ^= 0x5bd1e995u;
  block_fill(moved, new_size, block->seed);
}

static void block_release(block_t *block) {
  block_verify(block, "free");
  shoal_free(block->pointer);
  block->pointer = NULL;
}

/* Swaps the block in `slot` with a random exchange entry: ours goes out, a
 * block from some other thread (or nothing) comes in. */
static void exchange_swap(worker_t *worker, test_rng_t *rng, block_t *slot) {
  size_t index = rng_range(rng, 0, EXCHANGE_SLOTS - 1);
  pthread_mutex_lock(&exchange_lock);
  block_t incoming = exchange[index];
  exchange[index] = *slot;
  pthread_mutex_unlock(&exchange_lock);
  if (slot->pointer != NULL) worker->handed_out++;
  if (incoming.pointer != NULL) {
    worker->taken_in++;
    block_verify(&incoming, "a cross-thread handoff");
  }
  *slot = incoming;
}

static void *worker_run(void *argument) {
  worker_t *worker = argument;
  test_rng_t rng = {0x1234567ull * (worker->index + 1)};
  uint64_t next_seed = (uint64_t)(worker->index + 1) << 40;
  for (size_t op = 0; op < worker->operations; op++) {
    block_t *slot = &worker->slots[rng_next(&rng) % SLOTS_PER_WORKER];
    uint64_t action = rng_next(&rng) % 100;
    if (slot->pointer == NULL) {
      if (action < 85)
        *slot = block_allocate(&rng, next_seed++);
      else
        exchange_swap(worker, &rng, slot);
    } else if (action < 45) {
      block_release(slot);
    } else if (action < 70) {
      block_resize(&rng, slot);
    } else if (action < 95) {
      exchange_swap(worker, &rng, slot);
    } else {
      block_verify(slot, "a spot check");
    }
  }
  /* Free half of what is left here; the rest is freed by the main thread
   * after this thread has exited (frees into an abandoned heap). */
  for (size_t i = 0; i < SLOTS_PER_WORKER; i += 2)
    if (worker->slots[i].pointer != NULL) block_release(&worker->slots[i]);
  return NULL;
}

static void *warm_up_run(void *argument) {
  (void)argument;
  shoal_free(shoal_malloc(100));
  return NULL;
}

/* Threads get small stacks so glibc keeps every one in its stack cache:
 * the thread control blocks it allocates are then the same in the warm-up
 * round and the real one, and do not disturb the live-block count. */
static void threads_run(void *(*run)(void *)) {
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setstacksize(&attributes, 256 * KIB);
  for (unsigned i = 0; i < WORKER_COUNT; i++)
    CHECK(pthread_create(&workers[i].thread, &attributes, run, &workers[i]) == 0);
  for (unsigned i = 0; i < WORKER_COUNT; i++) CHECK(pthread_join(workers[i].thread, NULL) == 0);
  pthread_attr_destroy(&attributes);
}

int main(void) {
  size_t operations = scaled_count(150000, 4000);
  printf("stress: %d threads x %zu operations\n", WORKER_COUNT, operations);
  fflush(stdout);
  threads_run(warm_up_run);
  shoal_collect(true);
  shoal_stats_t before;
  shoal_stats_get(&before);

  double start = now_seconds();
  for (unsigned i = 0; i < WORKER_COUNT; i++) {
    workers[i].index = i;
    workers[i].operations = operations;
  }
  threads_run(worker_run);
  size_t handed = 0, taken = 0;
  for (unsigned i = 0; i < WORKER_COUNT; i++) {
    handed += workers[i].handed_out;
    taken += workers[i].taken_in;
    for (size_t k = 0; k < SLOTS_PER_WORKER; k++)
      if (workers[i].slots[k].pointer != NULL) block_release(&workers[i].slots[k]);
  }
  for (size_t k = 0; k < EXCHANGE_SLOTS; k++)
    if (exchange[k].pointer != NULL) block_release(&exchange[k]);
  CHECK(taken > operations / 50); /* the handoff really happened */

  shoal_collect(true);
  shoal_stats_t after;
  shoal_stats_get(&after);
  fprintf(stderr,
          "stress: %.2f s, %zu blocks handed out, %zu taken in; live blocks %zu -> %zu, "
          "live bytes %zu -> %zu, remote frees %zu -> %zu, heaps %zu, abandoned %zu\n",
          now_seconds() - start, handed, taken, before.live_blocks, after.live_blocks,
          before.live_bytes, after.live_bytes, before.remote_frees, after.remote_frees, after.heaps,
          after.heaps_abandoned);
  CHECK(after.live_blocks >= before.live_blocks && after.live_bytes >= before.live_bytes);
  CHECK(after.live_blocks - before.live_blocks <= WORKER_COUNT * THREAD_LIBRARY_BLOCKS_PER_THREAD);
  CHECK(after.live_bytes - before.live_bytes <=
        WORKER_COUNT * THREAD_LIBRARY_BLOCKS_PER_THREAD * 64);
  CHECK(after.remote_frees > before.remote_frees);
  printf("stress: all checks passed\n");
  return 0;
}
