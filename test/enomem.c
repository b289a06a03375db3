/* Out of memory, entry point by entry point, alone and in threads: NULL
 * with errno ENOMEM, as glibc's malloc does, and nothing lost.
 *
 * glibc sets errno to ENOMEM whenever an allocation fails for want of
 * memory, posix_memalign included (which returns ENOMEM as well), and
 * programs read it (glibc's own tst-malloc-thread-fail does). Here
 * RLIMIT_AS is set, after the worker threads exist and have allocated once,
 * to what is in use plus HEADROOM. Each thread holds ballast, part of the
 * headroom, so the failures come with the address space partly used, and
 * asks every entry point for what cannot fit:
 *   - sizes beyond the whole headroom: headroom + 64 MiB, 1 GiB, 1 TiB and
 *     just under PTRDIFF_MAX, sizes a program could mean that the kernel
 *     refuses; and absurd ones (PTRDIFF_MAX + 1, SIZE_MAX - 4095, SIZE_MAX);
 *   - count * size products that overflow (calloc, reallocarray);
 *   - at alignments of 16 bytes to 8 MiB, and memalign's rounded-up 48;
 *   - at alignments no block can have (2^62, 2^63), whatever the size.
 * errno holds a sentinel before each call, so a path that fails without
 * setting it is caught. posix_memalign must return ENOMEM, set errno to it
 * and leave *result alone. realloc and reallocarray of a small, a medium, a
 * large and a huge block must leave the block as it was (contents, usable
 * size), and it must still grow once the request fits.
 *
 * The main thread runs the battery alone, then WORKER_COUNT threads run it
 * at once. Then every thread frees what it holds, and every thread takes
 * its ballast again and allocates a block of every kind: a failed path that
 * kept a mapping or a lock fails or hangs here (an alarm ends a hang).
 *
 * The program uses no shoal_ name: built without libshoal, it checks the
 * same expectations against glibc's malloc. */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "testhelper.h"

#define KIB      ((size_t)1024)
#define MIB      (KIB * KIB)
#define HEADROOM (256 * MIB)
/* What a thread holds while it fails: 3/8 of the headroom for the main
 * thread alone, shared among the workers after it. */
#define BALLAST_BYTES (HEADROOM / 8 * 3)
#define SENTINEL      EBADF

enum { WORKER_COUNT = 4, ROUNDS = 3, BALLAST_SLOTS = 64, OLD_BLOCK_COUNT = 4, ALARM_SECONDS = 60 };

/* Blocks of the size kinds a program holds: small, medium, large, huge. */
static const size_t old_block_sizes[OLD_BLOCK_COUNT] = {24, 5000, 300 * KIB, 3 * MIB};

static const size_t alignments[] = {16, 64, 4 * KIB, 64 * KIB, 2 * MIB, 8 * MIB};

/* count * size overflows size_t. */
static const size_t overflowing[][2] = {{SIZE_MAX / 2 + 1, 2},
                                        {((size_t)1 << 32) + 1, (size_t)1 << 32},
                                        {SIZE_MAX, SIZE_MAX},
                                        {3, SIZE_MAX / 3 + 1}};

static size_t too_big[9]; /* set with the limit: sizes that cannot fit */

typedef struct ballast_s {
  void *blocks[BALLAST_SLOTS];
  size_t sizes[BALLAST_SLOTS];
  size_t count;
} ballast_t;

typedef struct worker_s {
  pthread_t thread;
  unsigned index;
  ballast_t ballast;
} worker_t;

static worker_t workers[WORKER_COUNT];
static pthread_barrier_t step_barrier;

/* The call must fail with NULL and errno ENOMEM. */
#define CHECK_ENOMEM(who, size, call)                                                              \
  do {                                                                                             \
    errno = SENTINEL;                                                                              \
    void *result_ = (call);                                                                        \
    int error_ = errno;                                                                            \
    CHECK_CTX(result_ == NULL && error_ == ENOMEM, "%s: %s with size %zu gave %p, errno %d", who,  \
              #call, (size_t)(size), result_, error_);                                             \
  } while (0)

/* Address space in use now, from /proc/self/statm (first field, pages). */
static size_t address_space_bytes(void) {
  FILE *statm = fopen("/proc/self/statm", "r");
  CHECK(statm != NULL);
  unsigned long pages = 0;
  CHECK(fscanf(statm, "%lu", &pages) == 1);
  fclose(statm);
  return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* Large (1 MiB) and huge (3 MiB) blocks, bytes in all, each filled. */
static void ballast_take(ballast_t *ballast, size_t bytes, const char *who) {
  size_t taken = 0;
  ballast->count = 0;
  while (taken < bytes && ballast->count < BALLAST_SLOTS) {
    size_t size = ballast->count % 2 == 0 ? MIB : 3 * MIB;
    void *block = malloc(opaque_size(size));
    CHECK_CTX(block != NULL, "%s: ballast block %zu of %zu bytes failed, errno %d", who,
              ballast->count, size, errno);
    block_fill(block, size, (uint64_t)(uintptr_t)ballast + ballast->count);
    ballast->blocks[ballast->count] = block;
    ballast->sizes[ballast->count++] = size;
    taken += size;
  }
}

static void ballast_release(ballast_t *ballast, const char *who) {
  for (size_t i = 0; i < ballast->count; i++) {
    CHECK_CTX(block_check(ballast->blocks[i], ballast->sizes[i], (uint64_t)(uintptr_t)ballast + i),
              "%s: ballast block %zu was damaged", who, i);
    free(ballast->blocks[i]);
  }
  ballast->count = 0;
}

static void check_aligned_family(const char *who, size_t size) {
  for (size_t i = 0; i < sizeof alignments / sizeof *alignments; i++) {
    size_t alignment = opaque_size(alignments[i]);
    void *untouched = (void *)&untouched;
    errno = SENTINEL;
    int error = posix_memalign(&untouched, alignment, size);
    int errno_after = errno;
    CHECK_CTX(error == ENOMEM && errno_after == ENOMEM && untouched == (void *)&untouched,
              "%s: posix_memalign(%zu, %zu) returned %d, errno %d, result %s", who, alignment, size,
              error, errno_after, untouched == (void *)&untouched ? "untouched" : "changed");
    CHECK_ENOMEM(who, size, aligned_alloc(alignment, size));
    CHECK_ENOMEM(who, size, memalign(alignment, size));
  }
  CHECK_ENOMEM(who, size, memalign(opaque_size(48), size)); /* rounded up to 64 */
  CHECK_ENOMEM(who, size, valloc(size));
  CHECK_ENOMEM(who, size, pvalloc(size));
}

/* Alignments no block can have, whatever its size: 2^62 lies beyond the
 * address space, 2^63 beyond PTRDIFF_MAX, and memalign rounds 2^62 + 1 up
 * to 2^63. glibc says ENOMEM for each; EINVAL only to memalign beyond 2^63,
 * where no power of two is left to round up to. */
static void check_impossible_alignments(const char *who) {
  static const size_t impossible[] = {(size_t)1 << 62, (size_t)1 << 63};
  size_t size = opaque_size(16);
  for (size_t i = 0; i < sizeof impossible / sizeof *impossible; i++) {
    size_t alignment = opaque_size(impossible[i]);
    void *untouched = (void *)&untouched;
    errno = SENTINEL;
    int error = posix_memalign(&untouched, alignment, size);
    int errno_after = errno;
    CHECK_CTX(error == ENOMEM && errno_after == ENOMEM && untouched == (void *)&untouched,
              "%s: posix_memalign(%zu, 16) returned %d, errno %d", who, alignment, error,
              errno_after);
    CHECK_ENOMEM(who, alignment, aligned_alloc(alignment, size));
    CHECK_ENOMEM(who, alignment, memalign(alignment, size));
  }
  CHECK_ENOMEM(who, 16, memalign(opaque_size(((size_t)1 << 62) + 1), size));
  CHECK_ENOMEM(who, 16, memalign(opaque_size(((size_t)1 << 63) - 4096), size));
  errno = SENTINEL;
  void *none = memalign(opaque_size(((size_t)1 << 63) + 1), size);
  CHECK_CTX(none == NULL && errno == EINVAL, "%s: memalign(2^63 + 1, 16) gave %p, errno %d", who,
            none, errno);
}

/* Blocks of every kind that realloc must keep intact when growing fails. */
typedef struct old_block_s {
  void *block;
  size_t size;
  size_t usable;
  uint64_t seed;
} old_block_t;

static void check_old_block(const char *who, const old_block_t *old, size_t size) {
  CHECK_CTX(block_check(old->block, old->size, old->seed),
            "%s: a failed realloc to %zu damaged the block of %zu bytes", who, size, old->size);
  CHECK_CTX(malloc_usable_size(old->block) == old->usable,
            "%s: a failed realloc to %zu changed the usable size of a %zu-byte block", who, size,
            old->size);
}

static void check_realloc_family(const char *who, old_block_t *olds, size_t size) {
  CHECK_ENOMEM(who, size, realloc(NULL, size));
  CHECK_ENOMEM(who, size, reallocarray(NULL, 1, size));
  CHECK_ENOMEM(who, size, reallocarray(NULL, opaque_size(size / 64 + 1), opaque_size(64)));
  for (size_t k = 0; k < OLD_BLOCK_COUNT; k++) {
    CHECK_ENOMEM(who, size, realloc(olds[k].block, size));
    check_old_block(who, &olds[k], size);
    CHECK_ENOMEM(who, size, reallocarray(olds[k].block, 1, size));
    CHECK_ENOMEM(who, size, reallocarray(olds[k].block, opaque_size(size / 8 + 1), opaque_size(8)));
    check_old_block(who, &olds[k], size);
  }
}

/* Every entry point, every size that cannot fit. */
static void fail_everything(const char *who, unsigned seed) {
  old_block_t olds[OLD_BLOCK_COUNT];
  for (size_t k = 0; k < OLD_BLOCK_COUNT; k++) {
    olds[k].size = old_block_sizes[k];
    olds[k].seed = (uint64_t)seed * 16 + k;
    olds[k].block = malloc(opaque_size(olds[k].size));
    CHECK_CTX(olds[k].block != NULL, "%s: malloc(%zu) failed", who, olds[k].size);
    block_fill(olds[k].block, olds[k].size, olds[k].seed);
    olds[k].usable = malloc_usable_size(olds[k].block);
  }
  for (size_t i = 0; i < sizeof too_big / sizeof *too_big; i++) {
    size_t size = opaque_size(too_big[i]);
    CHECK_ENOMEM(who, size, malloc(size));
    CHECK_ENOMEM(who, size, calloc(1, size));
    CHECK_ENOMEM(who, size, calloc(size, opaque_size(1)));
    CHECK_ENOMEM(who, size, calloc(opaque_size(size / 64 + 1), opaque_size(64)));
    check_realloc_family(who, olds, size);
    check_aligned_family(who, size);
  }
  for (size_t i = 0; i < sizeof overflowing / sizeof *overflowing; i++) {
    size_t count = opaque_size(overflowing[i][0]), size = opaque_size(overflowing[i][1]);
    CHECK_ENOMEM(who, count, calloc(count, size));
    CHECK_ENOMEM(who, count, reallocarray(NULL, count, size));
    for (size_t k = 0; k < OLD_BLOCK_COUNT; k++) {
      CHECK_ENOMEM(who, count, reallocarray(olds[k].block, count, size));
      check_old_block(who, &olds[k], count);
    }
  }
  check_impossible_alignments(who);
  /* Each block still grows once the request fits, keeping its contents. */
  for (size_t k = 0; k < OLD_BLOCK_COUNT; k++) {
    errno = SENTINEL;
    void *grown = realloc(olds[k].block, olds[k].size * 2);
    CHECK_CTX(grown != NULL, "%s: realloc(%zu -> %zu) failed after the failures, errno %d", who,
              olds[k].size, olds[k].size * 2, errno);
    CHECK_CTX(block_check(grown, olds[k].size, olds[k].seed),
              "%s: realloc(%zu -> %zu) lost the contents", who, olds[k].size, olds[k].size * 2);
    free(grown);
  }
}

/* A block of every size kind by every entry point, each written and freed
 * before the next is taken. */
static void allocate_everything(const char *who) {
  static const size_t sizes[] = {16, 1000, 5000, 64 * KIB, 300 * KIB, MIB, 3 * MIB, 6 * MIB};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    size_t size = opaque_size(sizes[i]);
    for (int kind = 0; kind < 9; kind++) {
      void *block = NULL;
      switch (kind) {
      case 0:
        block = malloc(size);
        break;
      case 1:
        block = calloc(size / 8, 8);
        break;
      case 2:
        block = realloc(NULL, size);
        break;
      case 3:
        block = reallocarray(NULL, size / 4, 4);
        break;
      case 4:
        if (posix_memalign(&block, 4 * KIB, size) != 0) block = NULL;
        break;
      case 5:
        block = aligned_alloc(64 * KIB, size);
        break;
      case 6:
        block = memalign(2 * MIB, size);
        break;
      case 7:
        block = valloc(size);
        break;
      default:
        block = pvalloc(size);
        break;
      }
      CHECK_CTX(block != NULL, "%s: allocation kind %d of %zu bytes fails after the failures", who,
                kind, size);
      block_fill(block, size, (uint64_t)kind);
      void *grown = realloc(block, size * 2);
      CHECK_CTX(grown != NULL, "%s: realloc to %zu fails after the failures", who, size * 2);
      CHECK(block_check(grown, size, (uint64_t)kind));
      free(grown);
    }
  }
}

static void *worker_run(void *argument) {
  worker_t *worker = argument;
  char who[32];
  snprintf(who, sizeof who, "thread %u", worker->index);
  free(malloc(100));                   /* the thread's own structures, before the limit */
  pthread_barrier_wait(&step_barrier); /* 0: every thread has allocated */
  pthread_barrier_wait(&step_barrier); /* 1: the limit is set, the main thread is done */
  ballast_take(&worker->ballast, BALLAST_BYTES / WORKER_COUNT, who);
  pthread_barrier_wait(&step_barrier); /* 2: every thread holds its ballast: fail at once */
  for (unsigned round = 0; round < ROUNDS; round++) fail_everything(who, worker->index + round);
  pthread_barrier_wait(&step_barrier); /* 3: everyone has failed */
  ballast_release(&worker->ballast, who);
  pthread_barrier_wait(&step_barrier); /* 4: everything is freed */
  ballast_take(&worker->ballast, BALLAST_BYTES / WORKER_COUNT, who);
  allocate_everything(who);
  ballast_release(&worker->ballast, who);
  return NULL;
}

int main(void) {
  alarm(ALARM_SECONDS); /* a hang (lock held after a failure) dies of SIGALRM */
  CHECK(pthread_barrier_init(&step_barrier, NULL, WORKER_COUNT + 1) == 0);
  for (unsigned i = 0; i < WORKER_COUNT; i++) {
    workers[i].index = i;
    CHECK(pthread_create(&workers[i].thread, NULL, worker_run, &workers[i]) == 0);
  }
  free(malloc(100));
  pthread_barrier_wait(&step_barrier); /* 0 */
  size_t in_use = address_space_bytes();
  struct rlimit limit = {in_use + HEADROOM, in_use + HEADROOM};
  CHECK(setrlimit(RLIMIT_AS, &limit) == 0);
  size_t sizes[] = {HEADROOM + 64 * MIB,
                    (size_t)1 << 30,
                    (size_t)1 << 40,
                    (size_t)PTRDIFF_MAX - 64 * MIB,
                    (size_t)PTRDIFF_MAX,
                    (size_t)PTRDIFF_MAX + 1,
                    SIZE_MAX - 4095,
                    SIZE_MAX - 1,
                    SIZE_MAX};
  _Static_assert(sizeof sizes == sizeof too_big, "one size per slot");
  memcpy(too_big, sizes, sizeof sizes);
  double start = now_seconds();

  /* Alone. */
  ballast_t ballast;
  ballast_take(&ballast, BALLAST_BYTES, "main thread");
  fail_everything("main thread", 1000);
  ballast_release(&ballast, "main thread");
  double alone_seconds = now_seconds() - start;

  /* In threads, all at once. */
  pthread_barrier_wait(&step_barrier); /* 1 */
  pthread_barrier_wait(&step_barrier); /* 2 */
  pthread_barrier_wait(&step_barrier); /* 3 */
  pthread_barrier_wait(&step_barrier); /* 4 */
  for (unsigned i = 0; i < WORKER_COUNT; i++) CHECK(pthread_join(workers[i].thread, NULL) == 0);

  /* And the main thread takes all of its ballast again. */
  ballast_take(&ballast, BALLAST_BYTES, "main thread");
  allocate_everything("main thread");
  ballast_release(&ballast, "main thread");
  fprintf(stderr, "enomem: %.3f s alone, %.3f s in all\n", alone_seconds, now_seconds() - start);
  printf("enomem: all checks passed\n");
  return 0;
}
