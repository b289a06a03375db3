/* largeblk — large blocks, where allocators go to the kernel: mmap and munmap
 * churn, realloc by mremap or by copying, and calloc's zeroing.
 *
 * Phase "grow" (grow_s): SLOTS slots and SIZE operations. An operation picks
 * a random slot; an empty slot gets a block of 64 KiB..32 MiB (log-uniform);
 * a full one is grown by realloc to 1.25..2 times its size (at most 32 MiB)
 * with probability 1/2, shrunk to half (at least 64 KiB) with 1/8, freed otherwise. Every new
 * or grown block is stamped on each page (so it is touched) and checked
 * after every realloc and before its free.
 *
 * Phase "calloc" (calloc_s): SIZE / 4 rounds of free + calloc of one block of
 * 5..25 MiB, checked for zeros on every page and then stamped, so a
 * recycled block that calloc did not clear is caught.
 *
 * time_s: the sum of the two phases. */
#include "bench.h"

#define SLOTS    16
#define KIB      ((size_t)1024)
#define MIB      (KIB * KIB)
#define MIN_SIZE (64 * KIB)
#define MAX_SIZE (32 * MIB)

static const long SIZES[3] = {40, 600, 4000};

typedef struct slot {
  uint8_t *block;
  size_t size;
  uint8_t tag;
} slot_t;

/* Log-uniform in [MIN_SIZE, MAX_SIZE]: as many blocks near 64 KiB as near 32 MiB. */
static size_t large_size(rng_t *rng) {
  size_t size = MIN_SIZE << rng_below(rng, 9); /* 64 KiB .. 16 MiB */
  return size + (size_t)rng_below(rng, size);  /* .. < 2 * size */
}

static double phase_grow(long ops) {
  slot_t slots[SLOTS] = {{0}};
  rng_t rng = rng_make(11);
  double start = bench_now();
  for (long i = 0; i < ops; i++) {
    slot_t *s = &slots[rng_below(&rng, SLOTS)];
    uint8_t tag = bench_tag((uint64_t)i);
    uint64_t action = rng_below(&rng, 8);
    if (s->block == NULL) {
      s->size = large_size(&rng);
      s->block = bench_malloc(s->size);
    } else if (action < 5) { /* 0..3 grow, 4 shrink */
      size_t grown = s->size + s->size / 4 + (size_t)rng_below(&rng, s->size * 3 / 4 + 1);
      size_t shrunk = s->size / 2 > MIN_SIZE ? s->size / 2 : MIN_SIZE;
      size_t size = action == 4 ? shrunk : (grown < MAX_SIZE ? grown : MAX_SIZE);
      s->block = bench_realloc(s->block, size);
      block_check(s->block, s->size, size < s->size ? size : s->size, s->tag, "realloc");
      s->size = size;
    } else {
      block_check(s->block, s->size, s->size, s->tag, "before free");
      free(s->block);
      s->block = NULL;
      continue;
    }
    s->tag = tag;
    block_stamp(s->block, s->size, tag);
  }
  for (int k = 0; k < SLOTS; k++) {
    if (slots[k].block == NULL) continue;
    block_check(slots[k].block, slots[k].size, slots[k].size, slots[k].tag, "final");
    free(slots[k].block);
  }
  return bench_now() - start;
}

static double phase_calloc(long rounds) {
  rng_t rng = rng_make(12);
  uint8_t *block = NULL;
  double start = bench_now();
  for (long i = 0; i < rounds; i++) {
    free(block);
    size_t size = rng_range(&rng, 5 * MIB, 25 * MIB);
    block = bench_calloc(1, size);
    block_check(block, size, size, 0, "calloc");
    block_stamp(block, size, bench_tag((uint64_t)i));
  }
  free(block);
  return bench_now() - start;
}

int main(int argc, char **argv) {
  bench_args_t args = bench_init(argc, argv, "largeblk", SIZES, 1);
  double grow = phase_grow(args.size);
  double zeroed = phase_calloc(args.size / 4);
  bench_report("time_s=%.4f grow_s=%.4f calloc_s=%.4f ops=%ld", grow + zeroed, grow, zeroed,
               args.size);
  return 0;
}
