/* The program tools/memory-at-peak.sh watches in its test (memory_at_peak.sh):
 * it holds known amounts, in one small class, one large block and one huge
 * block, all written, and blocks of another class that a thread freed
 * (left on their pages' lists: this thread collects none), beside the free
 * slices of a large block freed, has the probe
 * walk them (memory_at_peak_now); then frees them all and says what it
 * held. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>

#include "testhelper.h"

#define SMALL_BLOCK   240 /* a class of its own */
#define SMALL_BYTES   ((size_t)8 << 20)
#define LARGE_BYTES   ((size_t)200 << 10) /* a large block's page of slices */
#define HUGE_BYTES    ((size_t)3 << 20)   /* a mapping of its own */
#define SMALL_BLOCKS  (SMALL_BYTES / SMALL_BLOCK)
#define REMOTE_BLOCK  512 /* another class */
#define REMOTE_BYTES  ((size_t)1 << 20)
#define REMOTE_BLOCKS (REMOTE_BYTES / REMOTE_BLOCK)

static void *remote[REMOTE_BLOCKS];

/* Seven blocks of eight: each page keeps live blocks, and no free empties
 * one (an emptied page would go back to its segment). */
static bool freed_remotely(size_t i) {
  return i % 8 != 0;
}

static void *free_them(void *unused) {
  (void)unused;
  for (size_t i = 0; i < REMOTE_BLOCKS; i++)
    if (freed_remotely(i)) free(remote[i]);
  return NULL;
}

int main(void) {
  static void *small[SMALL_BLOCKS];
  for (size_t i = 0; i < SMALL_BLOCKS; i++) {
    small[i] = malloc(SMALL_BLOCK);
    CHECK(small[i] != NULL);
    memset(small[i], 0x5a, SMALL_BLOCK);
  }
  for (size_t i = 0; i < REMOTE_BLOCKS; i++) {
    remote[i] = malloc(REMOTE_BLOCK);
    CHECK(remote[i] != NULL);
    memset(remote[i], 0x4d, REMOTE_BLOCK);
  }
  uint8_t *large = malloc(LARGE_BYTES), *huge = malloc(HUGE_BYTES);
  CHECK(large != NULL && huge != NULL);
  memset(large, 0x6b, LARGE_BYTES);
  memset(huge, 0x7c, HUGE_BYTES);
  /* Freed: its slices wait, resident, for their purge (the test sets the
   * delay far off), in the rows of free slices, as the large blocks'. */
  uint8_t *freed_large = malloc(LARGE_BYTES);
  CHECK(freed_large != NULL);
  memset(freed_large, 0x3e, LARGE_BYTES);
  free(freed_large);
  /* Last: a malloc slow path of this thread would collect them. */
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, free_them, NULL) == 0);
  CHECK(pthread_join(thread, NULL) == 0);
  /* The probe's walk of this moment: its watcher, sampling every 5 ms,
   * may not run now on a loaded machine, or may walk again during the
   * frees below at a peak a few pages higher. Without the probe: none. */
  void (*walk_now)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "memory_at_peak_now");
  if (walk_now != NULL) walk_now();
  for (size_t i = 0; i < SMALL_BLOCKS; i++) free(small[i]);
  for (size_t i = 0; i < REMOTE_BLOCKS; i++)
    if (!freed_remotely(i)) free(remote[i]);
  free(large);
  free(huge);
  printf("held small_kb=%zu small_block=%d large_kb=%zu huge_kb=%zu remote_kb=%zu "
         "freed_large_kb=%zu\n",
         SMALL_BLOCKS * SMALL_BLOCK >> 10, SMALL_BLOCK, LARGE_BYTES >> 10, HUGE_BYTES >> 10,
         REMOTE_BYTES / 8 * 7 >> 10, LARGE_BYTES >> 10);
  return 0;
}
