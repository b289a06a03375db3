/* fork() while other threads allocate, and fork() from a signal handler.
 *
 * (a) Worker threads allocate, hand over and free blocks without pause
 *     while the main thread forks FORK_COUNT times. At each fork some worker
 *     is likely inside malloc or free holding whatever shoal locks; the
 *     child (a single thread now) must still allocate, free and realloc at
 *     once, read and free a block the parent made before the fork, and
 *     start a thread of its own that allocates.
 * (b) A worker loops malloc/free of mixed sizes; the main thread interrupts
 *     it with SIGUSR1 and the handler calls fork(). fork runs the atfork
 *     handlers inside that handler, possibly while the interrupted worker is
 *     halfway through malloc, so shoal's fork preparation must not wait for
 *     a lock the same thread holds. The child returns from the handler,
 *     finishes the interrupted call, then allocates, checks and _exit(0)s.
 *     (It does not allocate inside the handler itself: that would re-enter
 *     the interrupted call on the same thread, undefined for any allocator.)
 *
 * A deadlock anywhere becomes a failure: each child arms alarm() so a hung
 * child dies of SIGALRM, and the parent waits with a deadline. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/wait.h>

#include "testhelper.h"

#define KIB ((size_t)1024)
#define MIB (KIB * KIB)

enum { FORK_COUNT = 50, CHILD_ALARM_SECONDS = 10, WAIT_SECONDS = 20 };

/* Waits for `child` up to WAIT_SECONDS and checks it exited with 0. */
static void child_wait_success(pid_t child, const char *what, int round) {
  int status = 0;
  double deadline = now_seconds() + WAIT_SECONDS;
  for (;;) {
    pid_t done = waitpid(child, &status, WNOHANG);
    CHECK(done >= 0);
    if (done == child) break;
    if (now_seconds() > deadline) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      fprintf(stderr, "fork: %s child of round %d hung (killed)\n", what, round);
      CHECK(!"child finished in time");
    }
    sleep_ms(1);
  }
  if (WIFSIGNALED(status))
    fprintf(stderr, "fork: %s child of round %d died of signal %d%s\n", what, round,
            WTERMSIG(status), WTERMSIG(status) == SIGALRM ? " (deadlocked: alarm fired)" : "");
  CHECK_CTX(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s child of round %d: status %#x", what,
            round, status);
}

/* Allocation work a child does: every call must work at once, contents
 * must hold, and a realloc chain must cross small, medium and large. */
static void child_allocate_and_check(void) {
  enum { COUNT = 40 };
  void *blocks[COUNT];
  for (int i = 0; i < COUNT; i++) {
    size_t size = (size_t)1 << (i % 20); /* 1 B .. 512 KiB */
    blocks[i] = malloc(opaque_size(size));
    CHECK(blocks[i] != NULL);
    pattern_fill(blocks[i], size, (uint64_t)i);
  }
  for (int i = 0; i < COUNT; i++) {
    CHECK(pattern_check(blocks[i], (size_t)1 << (i % 20), (uint64_t)i));
    free(blocks[i]);
  }
  size_t size = 10;
  unsigned char *grown = malloc(size);
  CHECK(grown != NULL);
  pattern_fill(grown, size, 99);
  for (size_t next = 100; next <= 6 * MIB; next *= 10) {
    grown = realloc(grown, next);
    CHECK(grown != NULL && pattern_check(grown, size, 99));
    pattern_fill(grown, next, 99);
    size = next;
  }
  free(grown);
}

/* ---- (a) fork while threads allocate ----------------------------------- */
enum { CHURN_THREADS = 4, SHARED_SLOTS = 64 };
static atomic_bool churn_stop;
static _Atomic(void *) shared_slots[SHARED_SLOTS];

/* Allocates blocks of mixed sizes and swaps them into shared slots; whatever
 * comes out of a slot was made by some thread and is freed here. */
static void *churn_run(void *argument) {
  test_rng_t rng = {(uint64_t)(uintptr_t)argument};
  while (!atomic_load(&churn_stop)) {
    size_t size =
        rng_next(&rng) % 100 == 0 ? rng_range(&rng, 256 * KIB, 5 * MIB) : rng_range(&rng, 1, 4096);
    unsigned char *block = malloc(size);
    CHECK(block != NULL);
    block[0] = 1;
    block[size - 1] = 2;
    void *previous = atomic_exchange(&shared_slots[rng_next(&rng) % SHARED_SLOTS], block);
    free(previous);
    if (rng_next(&rng) % 8 == 0) free(realloc(malloc(rng_range(&rng, 1, 300)), 5000));
  }
  return NULL;
}

static void *child_thread_run(void *argument) {
  (void)argument;
  child_allocate_and_check();
  return NULL;
}

static void test_fork_while_threads_allocate(void) {
  pthread_t threads[CHURN_THREADS];
  for (uintptr_t i = 0; i < CHURN_THREADS; i++)
    CHECK(pthread_create(&threads[i], NULL, churn_run, (void *)(i + 1)) == 0);
  for (int round = 0; round < FORK_COUNT; round++) {
    size_t inherited_size = 1000 + (size_t)round * 3000;
    void *inherited = malloc(inherited_size);
    CHECK(inherited != NULL);
    pattern_fill(inherited, inherited_size, (uint64_t)round);
    sleep_ms(2); /* let the workers get deep into their loops */
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
      alarm(CHILD_ALARM_SECONDS);
      child_allocate_and_check();
      CHECK(pattern_check(inherited, inherited_size, (uint64_t)round));
      inherited = realloc(inherited, inherited_size * 3);
      CHECK(inherited != NULL && pattern_check(inherited, inherited_size, (uint64_t)round));
      free(inherited);
      pthread_t thread;
      CHECK(pthread_create(&thread, NULL, child_thread_run, NULL) == 0);
      CHECK(pthread_join(thread, NULL) == 0);
      _exit(0);
    }
    child_wait_success(child, "fork-with-threads", round);
    CHECK(pattern_check(inherited, inherited_size, (uint64_t)round));
    free(inherited);
  }
  atomic_store(&churn_stop, true);
  for (int i = 0; i < CHURN_THREADS; i++) CHECK(pthread_join(threads[i], NULL) == 0);
  for (int i = 0; i < SHARED_SLOTS; i++) free(atomic_exchange(&shared_slots[i], NULL));
}

/* ---- (b) fork from a signal handler ------------------------------------ */
static volatile sig_atomic_t is_forked_child;
static atomic_int forked_pid; /* 0: no fork yet this round; -1: fork failed */
static atomic_bool signal_worker_stop;
static _Atomic(void *) handoff_slot;

static void fork_in_handler(int signal_number) {
  (void)signal_number;
  int saved_errno = errno;
  pid_t child = fork();
  if (child == 0) {
    alarm(CHILD_ALARM_SECONDS);
    is_forked_child = 1;
  } else {
    atomic_store(&forked_pid, child > 0 ? (int)child : -1);
  }
  errno = saved_errno;
}

/* The interrupted thread: malloc/free of mixed sizes (small, page-sized,
 * huge) so the signal lands in every kind of path. In a child it finishes
 * whatever call was interrupted, then proves allocation works and exits. */
static void *signal_worker_run(void *argument) {
  (void)argument;
  test_rng_t rng = {77};
  enum { KEPT = 32 };
  void *kept[KEPT] = {0};
  while (!atomic_load(&signal_worker_stop)) {
    if (is_forked_child) {
      for (int i = 0; i < KEPT; i++) free(kept[i]);
      child_allocate_and_check();
      _exit(0);
    }
    uint64_t kind = rng_next(&rng) % 100;
    size_t size = kind < 80   ? rng_range(&rng, 1, 512)
                  : kind < 98 ? rng_range(&rng, 4096, 512 * KIB)
                              : rng_range(&rng, 4 * MIB, 9 * MIB);
    unsigned slot = (unsigned)(rng_next(&rng) % KEPT);
    free(kept[slot]);
    kept[slot] = malloc(size);
    CHECK(kept[slot] != NULL);
    ((unsigned char *)kept[slot])[size - 1] = 1;
    /* Blocks also come back from the helper thread, freed here remotely. */
    free(atomic_exchange(&handoff_slot, calloc(1, rng_range(&rng, 1, 2000))));
  }
  for (int i = 0; i < KEPT; i++) free(kept[i]);
  return NULL;
}

/* A second thread keeps shoal's cross-thread paths busy during the forks. */
static void *handoff_run(void *argument) {
  (void)argument;
  test_rng_t rng = {78};
  while (!atomic_load(&signal_worker_stop)) {
    free(atomic_exchange(&handoff_slot, malloc(rng_range(&rng, 1, 3000))));
  }
  return NULL;
}

static void test_fork_from_signal_handler(void) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = fork_in_handler;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  CHECK(sigaction(SIGUSR1, &action, NULL) == 0);

  pthread_t worker, helper;
  CHECK(pthread_create(&worker, NULL, signal_worker_run, NULL) == 0);
  CHECK(pthread_create(&helper, NULL, handoff_run, NULL) == 0);
  test_rng_t rng = {79};
  for (int round = 0; round < FORK_COUNT; round++) {
    sleep_ms((long)rng_range(&rng, 1, 4));
    atomic_store(&forked_pid, 0);
    CHECK(pthread_kill(worker, SIGUSR1) == 0);
    double deadline = now_seconds() + WAIT_SECONDS;
    while (atomic_load(&forked_pid) == 0) {
      CHECK_CTX(now_seconds() < deadline,
                "round %d: fork() in the signal handler never returned "
                "in the parent (deadlock in fork preparation?)",
                round);
      sleep_ms(1);
    }
    int child = atomic_load(&forked_pid);
    CHECK_CTX(child > 0, "round %d: fork() in the handler failed", round);
    child_wait_success((pid_t)child, "fork-in-signal-handler", round);
  }
  atomic_store(&signal_worker_stop, true);
  CHECK(pthread_join(worker, NULL) == 0);
  CHECK(pthread_join(helper, NULL) == 0);
  free(atomic_exchange(&handoff_slot, NULL));
}

int main(void) {
  double start = now_seconds();
  test_fork_while_threads_allocate();
  fprintf(stderr, "fork: %d forks beside allocating threads in %.2f s\n", FORK_COUNT,
          now_seconds() - start);
  start = now_seconds();
  test_fork_from_signal_handler();
  fprintf(stderr, "fork: %d forks from a signal handler in %.2f s\n", FORK_COUNT,
          now_seconds() - start);
  printf("fork: all checks passed\n");
  return 0;
}
