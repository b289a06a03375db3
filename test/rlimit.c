/* Running out of address space: failures are clean and leave no lock held.
 *
 * The threads are created first (their stacks need address space), then
 * RLIMIT_AS is set to the current size plus HEADROOM. Eight threads
 * allocate mixed sizes (64 B .. 8 MiB) by every entry point until
 * allocations keep failing; every failure must be NULL with errno ENOMEM
 * (posix_memalign: ENOMEM returned and in errno; realloc: the old block
 * intact), nothing may crash, and an alarm turns a hang into a failure. Then
 * each thread frees everything it holds and, once all have, allocation of
 * every kind must work again in every thread: a lock left held by a failed
 * path would hang here, a leaked reservation would fail here. */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/resource.h>

#include "shoal.h"
#include "testhelper.h"

#define KIB            ((size_t)1024)
#define MIB            (KIB * KIB)
#define HEADROOM       (256 * MIB)
#define ERRNO_SENTINEL EBADF

enum { WORKER_COUNT = 8, FAILURES_TO_STOP = 200, ALARM_SECONDS = 60 };

typedef struct held_block_s {
  struct held_block_s *next;
  size_t size;
} held_block_t;

typedef struct worker_s {
  pthread_t thread;
  unsigned index;
  held_block_t *held; /* every block still held, chained through itself */
  size_t held_bytes;
  size_t failures;
} worker_t;

static worker_t workers[WORKER_COUNT];
static pthread_barrier_t step_barrier;

/* Address space in use now, from /proc/self/statm (first field, pages). */
static size_t address_space_bytes(void) {
  FILE *statm = fopen("/proc/self/statm", "r");
  CHECK(statm != NULL);
  unsigned long pages = 0;
  CHECK(fscanf(statm, "%lu", &pages) == 1);
  fclose(statm);
  return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

static size_t random_size(test_rng_t *rng) {
  uint64_t kind = rng_next(rng) % 100;
  if (kind < 60) return rng_range(rng, 64, 1024);
  if (kind < 90) return rng_range(rng, 1025, 256 * KIB);
  return rng_range(rng, 256 * KIB, 8 * MIB);
}

/* One allocation by an entry point picked at random; NULL means failure,
 * with errno checked here. errno holds a sentinel before each call, so a
 * failure that leaves it alone is caught. */
static held_block_t *allocate_one(test_rng_t *rng, size_t size) {
  void *block = NULL;
  errno = ERRNO_SENTINEL;
  switch (rng_next(rng) % 9) {
  case 0:
    block = malloc(size);
    break;
  case 1:
    block = calloc(1, size);
    break;
  case 2: {
    int error = posix_memalign(&block, 4096, size);
    CHECK_CTX(error == 0 || error == ENOMEM, "posix_memalign(4096, %zu) returned %d", size, error);
    if (error != 0) {
      CHECK_CTX(errno == ENOMEM, "posix_memalign(4096, %zu) failed with errno %d", size, errno);
      CHECK(block == NULL);
      return NULL;
    }
    break;
  }
  case 3:
    block = aligned_alloc(64, size);
    break;
  case 4:
    block = memalign(256 * KIB, size);
    break;
  case 5:
    block = valloc(size);
    break;
  case 6:
    block = pvalloc(size);
    break;
  case 7:
    block = reallocarray(NULL, size / 16 + 1, 16);
    break;
  default: {
    /* realloc growth from a small block; on failure the small one stays. */
    unsigned char *small = malloc(64);
    if (small == NULL) {
      CHECK_CTX(errno == ENOMEM, "malloc(64) failed with errno %d", errno);
      return NULL;
    }
    memset(small, 0xa5, 64);
    errno = ERRNO_SENTINEL;
    block = realloc(small, size);
    if (block == NULL) {
      CHECK_CTX(errno == ENOMEM, "realloc(64 -> %zu) failed with errno %d", size, errno);
      CHECK(small[0] == 0xa5 && small[63] == 0xa5);
      free(small);
      return NULL;
    }
    break;
  }
  }
  if (block == NULL) {
    CHECK_CTX(errno == ENOMEM, "allocating %zu bytes failed with errno %d, not ENOMEM", size,
              errno);
    return NULL;
  }
  held_block_t *held = block;
  held->size = size;
  ((unsigned char *)block)[size - 1] = 0x5a;
  return held;
}

static void *worker_run(void *argument) {
  worker_t *worker = argument;
  test_rng_t rng = {worker->index + 500};
  pthread_barrier_wait(&step_barrier); /* 1: the limit is set */
  while (worker->failures < FAILURES_TO_STOP) {
    size_t size = random_size(&rng);
    held_block_t *block = allocate_one(&rng, size);
    if (block == NULL) {
      worker->failures++;
      continue;
    }
    block->next = worker->held;
    worker->held = block;
    worker->held_bytes += size;
  }
  pthread_barrier_wait(&step_barrier); /* 2: everyone has run out */
  while (worker->held != NULL) {
    held_block_t *next = worker->held->next;
    CHECK(((unsigned char *)worker->held)[worker->held->size - 1] == 0x5a);
    free(worker->held);
    worker->held = next;
  }
  pthread_barrier_wait(&step_barrier); /* 3: everything is freed */
  /* Every kind of allocation works again, in every thread. */
  static const size_t sizes[] = {16, 1000, 64 * KIB, MIB, 6 * MIB};
  for (int round = 0; round < 3; round++) {
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
      void *block = malloc(sizes[i]);
      CHECK_CTX(block != NULL, "thread %u: malloc(%zu) fails after everything was freed",
                worker->index, sizes[i]);
      memset(block, 1, sizes[i]);
      void *grown = realloc(block, sizes[i] * 2);
      CHECK(grown != NULL);
      void *aligned = NULL;
      CHECK(posix_memalign(&aligned, 64 * KIB, sizes[i]) == 0);
      free(aligned);
      free(grown);
    }
  }
  return NULL;
}

int main(void) {
  alarm(ALARM_SECONDS); /* a hang (lock held after a failure) dies of SIGALRM */
  CHECK(pthread_barrier_init(&step_barrier, NULL, WORKER_COUNT + 1) == 0);
  for (unsigned i = 0; i < WORKER_COUNT; i++) {
    workers[i].index = i;
    CHECK(pthread_create(&workers[i].thread, NULL, worker_run, &workers[i]) == 0);
  }
  /* Let shoal make its first structures before measuring. */
  free(malloc(100));
  size_t in_use = address_space_bytes();
  struct rlimit limit = {in_use + HEADROOM, in_use + HEADROOM};
  CHECK(setrlimit(RLIMIT_AS, &limit) == 0);
  double start = now_seconds();
  pthread_barrier_wait(&step_barrier); /* 1 */
  pthread_barrier_wait(&step_barrier); /* 2 */
  size_t held_bytes = 0, failures = 0;
  for (unsigned i = 0; i < WORKER_COUNT; i++) {
    held_bytes += workers[i].held_bytes;
    failures += workers[i].failures;
  }
  /* The limit was reached by allocation, not by something else going wrong:
   * most of the headroom went into blocks. */
  fprintf(stderr, "rlimit: %.1f MiB held at exhaustion (headroom %zu MiB), %zu failures\n",
          (double)held_bytes / MIB, HEADROOM / MIB, failures);
  CHECK_CTX(held_bytes > HEADROOM / 4, "only %.1f MiB could be allocated under the limit",
            (double)held_bytes / MIB);
  pthread_barrier_wait(&step_barrier); /* 3 */
  for (unsigned i = 0; i < WORKER_COUNT; i++) CHECK(pthread_join(workers[i].thread, NULL) == 0);

  void *big = malloc(8 * MIB);
  CHECK(big != NULL);
  free(big);
  fprintf(stderr, "rlimit: %.2f s\n", now_seconds() - start);
  printf("rlimit: all checks passed\n");
  return 0;
}
