/* Which requests the medium pool serves, under each SHOAL_MEDIUM_POOL value
 * (the test reads the one in force; CMake runs it under 0, 1 and the
 * default 2). A pool block's usable size is its request rounded up to 16
 * bytes; a class block's is its class's size, so the usable size of a
 * request that no class has tells where the block came from:
 *   9000 bytes: pool 9008, class 9216;   3000 bytes: pool 3008, class 3072.
 * Checked, in order:
 *   1. the main thread's blocks: 3000 from the pool under 1 only, 9000
 *      under 1 and 2, 8192 and 40000 never; each keeps its contents;
 *   2. realloc moving a block to 9000 bytes never takes it from the pool
 *      (a huge block's: a large one shrinks in place);
 *   3. another thread frees one of the main thread's pool blocks: under 2
 *      the main thread's next 9000 come from the class, under 1 still from
 *      the pool; its other pool blocks keep their contents and free well;
 *   4. a new thread (its own heap) starts with the pool again under 2.
 * The shoal_ names are used so TSan runs check shoal, not TSan's allocator. */
#include <pthread.h>
#include <stdbool.h>

#include "shoal.h"
#include "testhelper.h"

enum { UPPER = 9000, LOWER = 3000, KEPT = 8 };

static long mode;

static size_t usable_of(size_t request, bool pooled) {
  if (pooled) return (request + 15) & ~(size_t)15;
  return request == UPPER ? 9216 : request == LOWER ? 3072 : 0;
}

static bool pooled_in_mode(size_t request) {
  return request == UPPER ? mode != 0 : request == LOWER ? mode == 1 : false;
}

static void fill(void *p, size_t size, int tag) {
  memset(p, tag, size);
}

static bool holds(const void *p, size_t size, int tag) {
  const unsigned char *bytes = p;
  for (size_t i = 0; i < size; i++)
    if (bytes[i] != (unsigned char)tag) return false;
  return true;
}

/* A block of `request` bytes, filled, whose usable size says it came from
 * the pool (`pooled`) or from its class. */
static void *take(size_t request, bool pooled, int tag) {
  void *p = shoal_malloc(request);
  CHECK(p != NULL);
  CHECK(((uintptr_t)p & 15) == 0);
  CHECK(shoal_block_size(p) == usable_of(request, pooled));
  fill(p, request, tag);
  return p;
}

static void *free_elsewhere(void *p) {
  shoal_free(p);
  return NULL;
}

static void *new_thread_takes(void *arg) {
  (void)arg;
  void *p = take(UPPER, mode != 0, 0x5a);
  CHECK(holds(p, UPPER, 0x5a));
  shoal_free(p);
  return NULL;
}

int main(void) {
  mode = shoal_option_get(SHOAL_OPTION_MEDIUM_POOL);
  CHECK(mode >= 0 && mode <= 2);
  if (getenv("SHOAL_MEDIUM_POOL") == NULL) CHECK(mode == 2);

  /* 1. */
  void *kept[KEPT];
  for (int i = 0; i < KEPT; i++) kept[i] = take(UPPER, pooled_in_mode(UPPER), i + 1);
  void *lower = take(LOWER, pooled_in_mode(LOWER), 0x33);
  void *edge = shoal_malloc(8192);
  CHECK(edge != NULL && shoal_block_size(edge) == 8192); /* a class of its own size */
  void *large = shoal_malloc(40000);
  CHECK(large != NULL && shoal_block_size(large) >= 40000);
  fill(large, 40000, 0x44);
  CHECK(holds(lower, LOWER, 0x33));
  shoal_free(lower);
  shoal_free(edge);

  /* 2. Shrunk to under half its size, the large block stays where it is;
   * a huge block moves, into a class block. */
  void *shrunk = shoal_realloc(large, UPPER);
  CHECK(shrunk == large && holds(shrunk, UPPER, 0x44));
  shoal_free(shrunk);
  void *huge = shoal_malloc(2 << 20);
  CHECK(huge != NULL);
  fill(huge, UPPER, 0x55);
  void *moved = shoal_realloc(huge, UPPER);
  CHECK(moved != NULL && moved != huge);
  CHECK(shoal_block_size(moved) == usable_of(UPPER, false));
  CHECK(holds(moved, UPPER, 0x55));
  shoal_free(moved);

  /* 3. */
  pthread_t thread;
  void *given = take(UPPER, pooled_in_mode(UPPER), 0x66);
  CHECK(pthread_create(&thread, NULL, free_elsewhere, given) == 0);
  CHECK(pthread_join(thread, NULL) == 0);
  void *after = take(UPPER, mode == 1, 0x77);
  for (int i = 0; i < KEPT; i++) {
    CHECK(holds(kept[i], UPPER, i + 1));
    shoal_free(kept[i]);
  }
  CHECK(holds(after, UPPER, 0x77));
  shoal_free(after);

  /* 4. */
  CHECK(pthread_create(&thread, NULL, new_thread_takes, NULL) == 0);
  CHECK(pthread_join(thread, NULL) == 0);

  printf("medium_pool (SHOAL_MEDIUM_POOL=%ld): all checks passed\n", mode);
  return 0;
}
