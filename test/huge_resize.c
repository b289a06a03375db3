/* Huge blocks that move while another thread's block grows in place over
 * the range they left. The kernel orders the two (the range is free only
 * once the move is done), but no lock or atomic of the program does; a
 * sanitizer that misses a move would take the second thread's writes for
 * a race with the first thread's accesses to the block that was there.
 *
 * Each round, the main thread maps two huge blocks, the second placed just
 * below the first (segments are mapped downward), starts a thread that
 * owns the second, then writes the first and grows it past any room it
 * has, which moves it. The thread, told by a relaxed flag (no
 * happens-before), grows its block over the range the first one left and
 * writes all of it. Both blocks keep their contents through each resize.
 *
 * The shoal_ names are used so TSan runs check shoal, not TSan's allocator. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "shoal.h"
#include "testhelper.h"

#define MiB ((size_t)1 << 20)

enum { ROUNDS = 8 };

typedef struct grower_s {
  unsigned char *block; /* 4 MiB, filled with seed */
  uint64_t seed;
  atomic_int *moved;
} grower_t;

static void *grow_after_move(void *argument) {
  grower_t *grower = argument;
  while (!atomic_load_explicit(grower->moved, memory_order_relaxed)) sched_yield();
  unsigned char *grown = shoal_realloc(grower->block, 12 * MiB);
  CHECK(grown != NULL);
  CHECK_CTX(block_check(grown, 4 * MiB, grower->seed), "realloc to 12 MiB lost contents");
  block_fill(grown, 12 * MiB, grower->seed + 1);
  CHECK(block_check(grown, 12 * MiB, grower->seed + 1));
  shoal_free(grown);
  return NULL;
}

int main(void) {
  size_t moves = 0;
  for (uint64_t round = 0; round < ROUNDS; round++) {
    uint64_t seed = round * 1000;
    unsigned char *first = shoal_malloc(4 * MiB);
    unsigned char *second = shoal_malloc(4 * MiB);
    CHECK(first != NULL && second != NULL);
    block_fill(second, 4 * MiB, seed + 2);
    atomic_int moved = 0;
    grower_t grower = {second, seed + 2, &moved};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, grow_after_move, &grower) == 0);
    block_fill(first, 4 * MiB, seed);
    uintptr_t first_at = (uintptr_t)first;
    unsigned char *far = shoal_realloc(first, 100 * MiB);
    CHECK(far != NULL);
    CHECK_CTX(block_check(far, 4 * MiB, seed), "realloc to 100 MiB lost contents");
    atomic_store_explicit(&moved, 1, memory_order_relaxed);
    CHECK(pthread_join(thread, NULL) == 0);
    block_fill(far, 100 * MiB, seed + 3);
    CHECK(block_check(far, 100 * MiB, seed + 3));
    shoal_free(far);
    moves += (uintptr_t)far != first_at;
  }
  printf("huge_resize: %d rounds, %zu of the first blocks moved\n", ROUNDS, moves);
  return 0;
}
