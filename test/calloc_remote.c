/* calloc's blocks are zero whatever way they came back to the thread that
 * asks: a medium block of a page made on fresh memory is handed out by
 * calloc with only its link cleared (alloc.c, zero_block), so every route
 * that brings a free block home with more written in it must tell its page.
 *
 *   depot   two producers fill batches of medium blocks, a consumer writes
 *           all over them and frees both batches, interleaved (a thread
 *           that frees for several heaps, blocks of a class it does not
 *           allocate: heap.c, outbox_to_depot). The chains wait in the
 *           class's depot, each group's first block carrying the depot's
 *           own words, until the producers take them back: each calloc
 *           after that must read zero throughout.
 *
 * The shoal_ names are used so TSan runs check shoal, not TSan's allocator. */
#include <pthread.h>
#include <stdatomic.h>

#include "shoal.h"
#include "testhelper.h"

enum {
  PRODUCERS = 2,
  BLOCK_SIZE = 2000, /* a medium class: calloc trusts its page's flag */
  FILL = 0xab,
};

static size_t batch_blocks, rounds;
static unsigned char **batches[PRODUCERS];
static pthread_barrier_t filled, emptied;
static atomic_size_t nonzero_blocks, callocs;

static size_t first_nonzero(const unsigned char *p, size_t size) {
  for (size_t i = 0; i < size; i++)
    if (p[i] != 0) return i;
  return size;
}

static void *producer_run(void *argument) {
  unsigned char **batch = batches[(uintptr_t)argument];
  for (size_t round = 0; round < rounds; round++) {
    for (size_t i = 0; i < batch_blocks; i++) {
      batch[i] = shoal_malloc(BLOCK_SIZE);
      CHECK(batch[i] != NULL);
    }
    pthread_barrier_wait(&filled);
    pthread_barrier_wait(&emptied);
    for (size_t i = 0; i < batch_blocks; i++) {
      unsigned char *p = shoal_calloc(1, BLOCK_SIZE);
      CHECK(p != NULL);
      size_t at = first_nonzero(p, BLOCK_SIZE);
      if (at < BLOCK_SIZE && atomic_fetch_add(&nonzero_blocks, 1) == 0)
        fprintf(stderr, "calloc_remote: block %p reads %u at byte %zu\n", (void *)p, p[at], at);
      atomic_fetch_add(&callocs, 1);
      batch[i] = p;
    }
    for (size_t i = 0; i < batch_blocks; i++) shoal_free(batch[i]);
  }
  return NULL;
}

static void *consumer_run(void *argument) {
  (void)argument;
  for (size_t round = 0; round < rounds; round++) {
    pthread_barrier_wait(&filled);
    for (size_t i = 0; i < batch_blocks; i++)
      for (size_t p = 0; p < PRODUCERS; p++) {
        memset(batches[p][i], FILL, BLOCK_SIZE);
        shoal_free(batches[p][i]);
      }
    pthread_barrier_wait(&emptied);
  }
  return NULL;
}

static void test_depot(void) {
  for (size_t p = 0; p < PRODUCERS; p++) {
    batches[p] = calloc(batch_blocks, sizeof *batches[p]);
    CHECK(batches[p] != NULL);
  }
  CHECK(pthread_barrier_init(&filled, NULL, PRODUCERS + 1) == 0);
  CHECK(pthread_barrier_init(&emptied, NULL, PRODUCERS + 1) == 0);
  pthread_t threads[PRODUCERS + 1];
  for (size_t p = 0; p < PRODUCERS; p++)
    CHECK(pthread_create(&threads[p], NULL, producer_run, (void *)(uintptr_t)p) == 0);
  CHECK(pthread_create(&threads[PRODUCERS], NULL, consumer_run, NULL) == 0);
  for (size_t t = 0; t <= PRODUCERS; t++) CHECK(pthread_join(threads[t], NULL) == 0);
  pthread_barrier_destroy(&filled);
  pthread_barrier_destroy(&emptied);
  for (size_t p = 0; p < PRODUCERS; p++) free(batches[p]);
  size_t bad = atomic_load(&nonzero_blocks), total = atomic_load(&callocs);
  CHECK_CTX(bad == 0, "%zu of %zu callocs after the consumer's frees were not zero", bad, total);
  CHECK(total == PRODUCERS * rounds * batch_blocks);
  printf("calloc_remote: depot, %zu callocs of blocks a consumer freed, all zero\n", total);
}

int main(void) {
  batch_blocks = scaled_count(4096, 4096);
  rounds = scaled_count(12, 6);
  test_depot();
  printf("calloc_remote: all checks passed\n");
  return 0;
}
