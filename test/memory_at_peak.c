/* The program tools/memory-at-peak.sh watches in its test (memory_at_peak.sh):
 * it holds known amounts, in one small class, one large block and one huge
 * block, all written, long enough for the probe to walk them at the peak;
 * then frees them all and says what it held. */
#include "testhelper.h"

#define SMALL_BLOCK  240 /* a class of its own */
#define SMALL_BYTES  ((size_t)8 << 20)
#define LARGE_BYTES  ((size_t)200 << 10) /* a large block's page of slices */
#define HUGE_BYTES   ((size_t)3 << 20)   /* a mapping of its own */
#define SMALL_BLOCKS (SMALL_BYTES / SMALL_BLOCK)

int main(void) {
  static void *small[SMALL_BLOCKS];
  for (size_t i = 0; i < SMALL_BLOCKS; i++) {
    small[i] = malloc(SMALL_BLOCK);
    CHECK(small[i] != NULL);
    memset(small[i], 0x5a, SMALL_BLOCK);
  }
  uint8_t *large = malloc(LARGE_BYTES), *huge = malloc(HUGE_BYTES);
  CHECK(large != NULL && huge != NULL);
  memset(large, 0x6b, LARGE_BYTES);
  memset(huge, 0x7c, HUGE_BYTES);
  /* The probe samples every 5 ms: time for a walk on a busy machine too. */
  struct timespec hold = {0, 500 * 1000000};
  nanosleep(&hold, NULL);
  for (size_t i = 0; i < SMALL_BLOCKS; i++) free(small[i]);
  free(large);
  free(huge);
  printf("held small_kb=%zu small_block=%d large_kb=%zu huge_kb=%zu\n",
         SMALL_BLOCKS * SMALL_BLOCK >> 10, SMALL_BLOCK, LARGE_BYTES >> 10, HUGE_BYTES >> 10);
  return 0;
}
