/* os and lock layers: aligned mappings, purge gives zero pages back, remap
 * keeps contents, alignment and the place within a huge page; the clock,
 * read through the vDSO where there is one, agrees with the C library's;
 * another thread reads as runnable while it spins, with its CPU time
 * counted, and not while it blocks; the lock excludes and wakes sleepers. */
#include "../testhelper.h"
#include "core/internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#ifdef __linux__
#include <sys/auxv.h>
#include <time.h>
#endif

static shoal_lock_t lock = SHOAL_LOCK_INIT;
static long counter;

#ifdef __linux__
static int64_t library_now_ms(void) {
  struct timespec t;
  CHECK(clock_gettime(CLOCK_MONOTONIC_COARSE, &t) == 0);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void test_clock(void) {
  typedef int (*clock_function_t)(clockid_t clock, struct timespec * t);
  clock_function_t direct = (clock_function_t)os_vdso_function("__vdso_clock_gettime");
  CHECK(os_vdso_function("__vdso_no_such_function") == NULL);
  CHECK((direct != NULL) == (getauxval(AT_SYSINFO_EHDR) != 0));
  if (direct != NULL) {
    struct timespec t;
    int64_t before = library_now_ms();
    CHECK(direct(CLOCK_MONOTONIC_COARSE, &t) == 0);
    int64_t at = (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
    CHECK(at >= before && at <= library_now_ms());
  }
  os_init();
  int64_t before = library_now_ms(), now = os_now_ms();
  CHECK(now >= before && now <= library_now_ms());
}
#endif

#ifdef __linux__
typedef struct watched_s {
  _Atomic(int) id;
  _Atomic(int) stop;
  pthread_mutex_t mutex;
  pthread_cond_t wake;
} watched_t;

static void *spin(void *arg) {
  watched_t *watched = arg;
  atomic_store(&watched->id, os_thread_id());
  while (!atomic_load_explicit(&watched->stop, memory_order_relaxed)) {
  }
  return NULL;
}

static void *block(void *arg) {
  watched_t *watched = arg;
  pthread_mutex_lock(&watched->mutex);
  atomic_store(&watched->id, os_thread_id());
  while (!atomic_load(&watched->stop)) pthread_cond_wait(&watched->wake, &watched->mutex);
  pthread_mutex_unlock(&watched->mutex);
  return NULL;
}

/* Polls for up to 20 s (sanitizer builds on a busy machine) until the
 * thread's state says `runnable` and, when spinning, a CPU time of 30 ms. */
static bool thread_reaches(int id, bool runnable) {
  for (int tries = 0; tries < 2000; tries++) {
    os_thread_state_t state;
    CHECK(os_thread_state(id, &state));
    if (state.runnable == runnable && (!runnable || state.cpu_ms >= 30)) return true;
    sleep_ms(10);
  }
  return false;
}

static void test_thread_state(void) {
  os_thread_state_t state;
  CHECK(!os_thread_state(0, &state) && !os_thread_state(-1, &state));
  CHECK(!os_thread_state(0x3ffffff0, &state)); /* beyond any pid_max */
  CHECK(os_thread_state(os_thread_id(), &state) && state.runnable);
  for (int spinning = 0; spinning <= 1; spinning++) {
    watched_t watched = {.mutex = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, spinning ? spin : block, &watched) == 0);
    while (atomic_load(&watched.id) == 0) sched_yield();
    /* A name that holds what the state after it looks like: the state is
     * read after the last parenthesis. */
    CHECK(pthread_setname_np(thread, spinning ? "s) S 1 (" : "b) R 1 (") == 0);
    CHECK_CTX(thread_reaches(atomic_load(&watched.id), spinning), "a %s thread never read as %s",
              spinning ? "spinning" : "blocked",
              spinning ? "runnable with 30 ms of CPU" : "not runnable");
    pthread_mutex_lock(&watched.mutex);
    atomic_store(&watched.stop, 1);
    pthread_cond_signal(&watched.wake);
    pthread_mutex_unlock(&watched.mutex);
    CHECK(pthread_join(thread, NULL) == 0);
  }
}
#endif

static void *contend(void *arg) {
  long rounds = (long)(intptr_t)arg;
  for (long i = 0; i < rounds; i++) {
    lock_acquire(&lock);
    counter++;
    lock_release(&lock);
  }
  return NULL;
}

int main(void) {
  for (size_t alignment = 4096; alignment <= ((size_t)64 << 20); alignment *= 4) {
    uint8_t *p = os_map_aligned(3 * 4096, alignment);
    CHECK(p != NULL && ((uintptr_t)p & (alignment - 1)) == 0);
    CHECK(p[0] == 0 && p[3 * 4096 - 1] == 0);
    memset(p, 0xab, 3 * 4096);
    os_purge(p, 2 * 4096);
    CHECK(p[0] == 0 && p[2 * 4096 - 1] == 0 && p[2 * 4096] == 0xab);
    os_unmap(p, 3 * 4096);
  }
  size_t size = SEGMENT_SIZE;
  uint8_t *p = os_map_aligned(size, SEGMENT_SIZE);
  CHECK(p != NULL);
  for (size_t i = 0; i < size; i += 4096) p[i] = (uint8_t)(i >> 12);
  uint8_t *q = os_remap_aligned(p, size, 8 * size, SEGMENT_SIZE);
  CHECK(q != NULL && ((uintptr_t)q & SEGMENT_MASK) == 0);
  for (size_t i = 0; i < size; i += 4096) CHECK(q[i] == (uint8_t)(i >> 12));
  CHECK(q[8 * size - 1] == 0);
  os_unmap(q, 8 * size);

  /* A mapping that must move keeps its place within a huge page, so that
   * the kernel moves its huge pages whole: 2 MiB at 1 MiB past a huge page,
   * the space after it taken. */
  size_t huge = os_huge_page_size();
  uint8_t *wide = os_map_aligned(4 * huge, huge);
  CHECK(wide != NULL);
  p = wide + huge / 2;
  for (size_t i = 0; i < huge; i += 4096) p[i] = (uint8_t)(i >> 12);
  os_unmap(wide, huge / 2);
  q = os_remap_aligned(p, huge, 3 * huge, SEGMENT_SIZE);
  CHECK(q != NULL && q != p && ((uintptr_t)q & (huge - 1)) == huge / 2);
  for (size_t i = 0; i < huge; i += 4096) CHECK(q[i] == (uint8_t)(i >> 12));
  CHECK(q[3 * huge - 1] == 0);
  os_unmap(q, 3 * huge);
  os_unmap(p + huge, 4 * huge - huge / 2 - huge);
  CHECK(os_now_ms() > 0);
#ifdef __linux__
  test_clock();
  test_thread_state();
#endif
  CHECK(os_random_key() != 0);

  enum { THREADS = 8 };
  long rounds = (long)(100000 * test_scale()) + 1000;
  pthread_t threads[THREADS];
  for (int i = 0; i < THREADS; i++)
    CHECK(pthread_create(&threads[i], NULL, contend, (void *)(intptr_t)rounds) == 0);
  for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
  CHECK(counter == THREADS * rounds);
  CHECK(lock_try_acquire(&lock));
  CHECK(!lock_try_acquire(&lock));
  lock_release(&lock);
  printf("os and lock: all checks hold (%d threads x %ld rounds)\n", THREADS, rounds);
  return 0;
}
