/* fork() from a signal handler that any thread may take, several at once.
 *
 * glibc's tst-mallocfork2 with threads: a signaller thread sends SIGUSR1 to
 * the whole process in a tight loop, so the kernel hands it to whichever
 * worker runs (several may be inside the handler at once), and the handler
 * calls fork(). The handler may so interrupt a worker anywhere: inside
 * malloc, free or realloc, holding one of shoal's locks or waiting for it,
 * while other workers' handlers are forking too. The child returns from the
 * handler, finishes the interrupted call, checks every block its thread
 * held or found on its way, allocates, and _exit(0)s; the parent goes on.
 *
 * Phases (each with a fresh set of workers; blocks move between them through
 * shared slots, so frees are often cross-thread):
 *   mixed         4 workers: malloc/calloc/realloc/free of small, medium
 *                 (8 KiB-512 KiB) and huge (4-9 MiB) blocks
 *   realloc       2 workers: only realloc, growing to 6 MiB and back
 *   memalign      2 workers: only posix_memalign/aligned_alloc, 4 KiB and
 *                 64 KiB alignment, up to 6 MiB
 *   huge          2 workers: only malloc/realloc/free of 4-9 MiB blocks
 * and, in a process of its own that never starts a thread,
 *   single        the main thread does the mixed work and calls fork()
 *                 itself now and then, while another process signals it:
 *                 tst-mallocfork2 exactly. The signal lands inside fork's
 *                 own atfork handlers too, and the handler's fork nests in
 *                 the interrupted one. (Not with threads: there glibc 2.36
 *                 holds its atfork lock from the last prepare handler to the
 *                 first parent handler, and a fork in a handler that
 *                 interrupted that stretch waits on glibc's own lock.)
 * glibc's own malloc passes the single run only: with threads, its fork
 * takes every arena lock, and a handler that interrupted a thread holding
 * one waits for ever. shoal promises more, and is held to it here.
 *
 * The program runs itself (execve, see main) with each of: nothing, with
 * SHOAL_LEAKS=all and with SHOAL_CHECK=1, whose interposition takes locks of
 * its own on every call. `test_fork_signal MODE` runs one of plain, leaks,
 * check; `test_fork_signal run NAME [PHASE]` is one run in this environment
 * (PHASE single: the single-threaded one).
 *
 * Nothing here may hang. Children arm alarm(); the run watches each worker's
 * progress and the last children with deadlines. A hung run prints what hung
 * and stops itself (SIGSTOP), and the top level then prints each thread's
 * state from /proc (with SHOAL_TEST_GDB=1 also every thread's stack, from
 * gdb), kills the run's process group and fails. Run alone, a stopped run
 * waits for a debugger. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "testhelper.h"

#define KIB           ((size_t)1024)
#define MIB           (KIB * KIB)
#define PHASE_SECONDS 0.4 /* each phase, times SHOAL_TEST_SCALE */

enum {
  MAX_WORKERS = 4,
  KEPT = 16,                /* blocks each worker holds */
  HANDOFF_SLOTS = 8,        /* blocks on their way between workers */
  MAX_OUTSTANDING = 8,      /* children alive at once; no fork beyond */
  CHILD_ALARM_SECONDS = 30, /* a hung child dies; a hang is reported before */
  STALL_SECONDS = 5,        /* a worker without progress this long is hung */
  CHILD_WAIT_SECONDS = 10,  /* at a phase's end, for its last children */
  RUN_SECONDS = 60,         /* the top level, for a run with threads, beyond its phases */
  SINGLE_SECONDS = 20,      /* and for the single-threaded one, which cannot watch itself */
  MIN_FORKS = 20,           /* a phase goes on (to the stall limit) until then */
};

/* ---- checks that hold in a forked child as well ----
 * A child's one thread may have been forked while another held stdio's
 * lock, so failures are written with write(2) and end in _exit(1). */
__attribute__((noreturn)) static void test_failed(int line, const char *expr) {
  char text[300];
  int length = snprintf(text, sizeof text, "fork_signal.c:%d: %s %d: CHECK failed: %s\n", line,
                        getpid() == getpgrp() ? "run" : "process", (int)getpid(), expr);
  if (length > 0) {
    ssize_t written = write(2, text, (size_t)length < sizeof text ? (size_t)length : sizeof text);
    (void)written;
  }
  _exit(1);
}

#define TCHECK(expr)                                                                               \
  do {                                                                                             \
    if (!(expr)) test_failed(__LINE__, #expr);                                                     \
  } while (0)

/* ---- stamped blocks ----
 * Every block starts with its size and seed, then the pattern of the seed
 * over up to 4 KiB, and blocks of 8 KiB and more end with 64 bytes of
 * pattern: any thread, or a child, can check a block it did not make. */
typedef struct stamp_s {
  size_t size;
  uint64_t seed;
} stamp_t;

#define STAMP_MIN ((size_t)32)

static size_t stamp_prefix(size_t size) {
  size_t rest = size - sizeof(stamp_t);
  return rest < 4096 - sizeof(stamp_t) ? rest : 4096 - sizeof(stamp_t);
}

static void stamp(void *block, size_t size, uint64_t seed) {
  unsigned char *bytes = block;
  stamp_t header = {size, seed};
  __builtin_memcpy(bytes, &header, sizeof header);
  pattern_fill(bytes + sizeof header, stamp_prefix(size), seed);
  if (size >= 8 * KIB) pattern_fill(bytes + size - 64, 64, seed + 1);
}

static stamp_t stamp_of(const void *block) {
  stamp_t header;
  __builtin_memcpy(&header, block, sizeof header);
  return header;
}

static bool stamp_intact(const void *block) {
  const unsigned char *bytes = block;
  stamp_t header = stamp_of(block);
  if (header.size < STAMP_MIN || header.size > 16 * MIB) return false;
  if (!pattern_check(bytes + sizeof header, stamp_prefix(header.size), header.seed)) return false;
  return header.size < 8 * KIB || pattern_check(bytes + header.size - 64, 64, header.seed + 1);
}

/* After realloc from `old` (a copy of its stamp) to `size`: the common
 * prefix must have come along. */
static bool stamp_moved(const void *block, stamp_t old, size_t size) {
  stamp_t header = stamp_of(block);
  size_t prefix = stamp_prefix(old.size < size ? old.size : size);
  return header.size == old.size && header.seed == old.seed &&
         pattern_check((const unsigned char *)block + sizeof header, prefix, old.seed);
}

static void release(void *block) {
  if (block == NULL) return;
  TCHECK(stamp_intact(block));
  free(block);
}

static void *fresh(size_t size, uint64_t seed) {
  void *block = malloc(size);
  TCHECK(block != NULL);
  stamp(block, size, seed);
  return block;
}

static size_t mixed_size(test_rng_t *rng) {
  uint64_t kind = rng_next(rng) % 100;
  if (kind < 70) return rng_range(rng, STAMP_MIN, 1024);
  if (kind < 97) return rng_range(rng, 8 * KIB, 512 * KIB);
  return rng_range(rng, 4 * MIB, 9 * MIB);
}

/* ---- state shared with the handler ---- */
static volatile sig_atomic_t in_child; /* set by the handler in a child */
static atomic_bool forks_off;          /* the handler and workers stop forking */
static atomic_int outstanding;         /* forked and not yet reaped (about) */
static atomic_int handler_forks, direct_forks, fork_failures;

static void fork_in_handler(int signal_number) {
  (void)signal_number;
  int saved_errno = errno;
  if (!in_child && !atomic_load(&forks_off) && atomic_load(&outstanding) < MAX_OUTSTANDING) {
    atomic_fetch_add(&outstanding, 1);
    pid_t child = fork();
    if (child == 0) {
      alarm(CHILD_ALARM_SECONDS);
      in_child = 1;
    } else if (child > 0) {
      atomic_fetch_add(&handler_forks, 1);
    } else {
      atomic_fetch_sub(&outstanding, 1);
      atomic_fetch_add(&fork_failures, 1);
    }
  }
  errno = saved_errno;
}

/* ---- workers ---- */
typedef struct worker_s worker_t;
typedef void (*work_fn)(worker_t *worker, test_rng_t *rng);

struct worker_s {
  pthread_t thread;
  unsigned index;
  work_fn step;      /* one step of this phase's work */
  bool direct_forks; /* also calls fork() itself */
  void *kept[KEPT];  /* stamped blocks, or NULL */
  _Atomic(size_t) progress;
  atomic_bool done;
};

static atomic_bool workers_stop;
static _Atomic(void *) handoff[HANDOFF_SLOTS];

/* Hands a stamped block over and releases whatever some worker left. */
static void hand_over(test_rng_t *rng, void *block) {
  release(atomic_exchange(&handoff[rng_next(rng) % HANDOFF_SLOTS], block));
}

/* What a child checks: allocation of every kind works at once. */
static void allocate_and_check(uint64_t seed) {
  enum { COUNT = 24 };
  void *blocks[COUNT];
  for (int i = 0; i < COUNT; i++) {
    size_t size = STAMP_MIN << (i % 16); /* 32 B .. 1 MiB */
    blocks[i] = fresh(size, seed + (uint64_t)i);
  }
  void *aligned = NULL;
  TCHECK(posix_memalign(&aligned, 65536, 100 * KIB) == 0 && is_aligned(aligned, 65536));
  stamp(aligned, 100 * KIB, seed);
  for (int i = 0; i < COUNT; i++) release(blocks[i]);
  release(aligned);
  static const size_t chain[] = {100, 1000, 10 * KIB, 100 * KIB, MIB, 6 * MIB, 200 * KIB, 64};
  unsigned char *resized = fresh(STAMP_MIN, seed);
  for (size_t i = 0; i < sizeof chain / sizeof chain[0]; i++) {
    stamp_t old = stamp_of(resized);
    resized = realloc(resized, chain[i]);
    TCHECK(resized != NULL && stamp_moved(resized, old, chain[i]));
    stamp(resized, chain[i], seed + i);
  }
  release(resized);
}

static void *child_thread_run(void *argument) {
  allocate_and_check((uint64_t)(uintptr_t)argument);
  return NULL;
}

/* The child's one thread, once the interrupted call is finished: every
 * block it held or found on the way is intact and can be freed (including
 * blocks of threads that did not survive the fork), and allocation works,
 * also in a thread of its own now and then. */
__attribute__((noreturn)) static void child_finish(worker_t *worker) {
  for (int i = 0; i < KEPT; i++) release(worker->kept[i]);
  for (int i = 0; i < HANDOFF_SLOTS; i++) release(atomic_exchange(&handoff[i], NULL));
  allocate_and_check((uint64_t)getpid());
  if (getpid() % 4 == 0) {
    pthread_t thread;
    TCHECK(pthread_create(&thread, NULL, child_thread_run, (void *)(uintptr_t)getpid()) == 0);
    TCHECK(pthread_join(thread, NULL) == 0);
  }
  _exit(0);
}

static void maybe_fork_directly(worker_t *worker, test_rng_t *rng) {
  if (!worker->direct_forks || rng_next(rng) % 16 != 0 || atomic_load(&forks_off) ||
      atomic_load(&outstanding) >= MAX_OUTSTANDING)
    return;
  atomic_fetch_add(&outstanding, 1);
  pid_t child = fork(); /* the signal may land in here */
  if (child == 0) {
    alarm(CHILD_ALARM_SECONDS);
    child_finish(worker);
  }
  if (child > 0) {
    atomic_fetch_add(&direct_forks, 1);
  } else {
    atomic_fetch_sub(&outstanding, 1);
    atomic_fetch_add(&fork_failures, 1);
  }
}

/* Replace, resize or hand over blocks of all sizes. */
static void mixed_step(worker_t *worker, test_rng_t *rng) {
  unsigned slot = (unsigned)(rng_next(rng) % KEPT);
  uint64_t kind = rng_next(rng) % 100;
  size_t size = mixed_size(rng);
  uint64_t seed = rng_next(rng);
  if (kind < 45) {
    release(worker->kept[slot]);
    worker->kept[slot] = NULL;
    worker->kept[slot] = fresh(size, seed);
  } else if (kind < 65 && worker->kept[slot] != NULL) {
    stamp_t old = stamp_of(worker->kept[slot]);
    TCHECK(stamp_intact(worker->kept[slot]));
    void *moved = realloc(worker->kept[slot], size);
    TCHECK(moved != NULL && stamp_moved(moved, old, size));
    stamp(moved, size, seed);
    worker->kept[slot] = moved;
  } else if (kind < 75) {
    unsigned char *zeroed = calloc(1, size);
    TCHECK(zeroed != NULL);
    for (size_t i = 0; i < 64 && i < size; i++) TCHECK(zeroed[i] == 0 && zeroed[size - 1 - i] == 0);
    stamp(zeroed, size, seed);
    hand_over(rng, zeroed);
  } else {
    hand_over(rng, fresh(size, seed));
  }
  maybe_fork_directly(worker, rng);
}

/* Four blocks, each grown by 2-4 times up to 6 MiB, then shrunk back to
 * 32 bytes: small, medium, large and huge, each way. */
static void realloc_step(worker_t *worker, test_rng_t *rng) {
  unsigned slot = (unsigned)(rng_next(rng) % 4);
  if (worker->kept[slot] == NULL) worker->kept[slot] = fresh(STAMP_MIN, rng_next(rng));
  stamp_t old = stamp_of(worker->kept[slot]);
  bool shrinking = (old.seed & 1) != 0; /* the direction rides in the seed */
  size_t factor = rng_range(rng, 2, 4), size;
  if (!shrinking && old.size * factor > 6 * MIB) shrinking = true;
  if (shrinking && old.size / factor < STAMP_MIN) shrinking = false;
  size = shrinking ? old.size / factor : old.size * factor;
  TCHECK(stamp_intact(worker->kept[slot]));
  void *moved = realloc(worker->kept[slot], size);
  TCHECK(moved != NULL && stamp_moved(moved, old, size));
  stamp(moved, size, (rng_next(rng) & ~(uint64_t)1) | (shrinking ? 1 : 0));
  worker->kept[slot] = moved;
}

/* Aligned blocks only: posix_memalign, now and then aligned_alloc. */
static void memalign_step(worker_t *worker, test_rng_t *rng) {
  size_t alignment = rng_next(rng) % 2 ? 4096 : 65536;
  uint64_t kind = rng_next(rng) % 100;
  size_t size = kind < 50   ? rng_range(rng, STAMP_MIN, 16 * KIB)
                : kind < 95 ? rng_range(rng, 16 * KIB, MIB)
                            : rng_range(rng, 4 * MIB, 6 * MIB);
  void *block = NULL;
  if (kind % 8 == 0) {
    size = (size + alignment - 1) & ~(alignment - 1);
    block = aligned_alloc(alignment, size);
  } else {
    TCHECK(posix_memalign(&block, alignment, size) == 0);
  }
  TCHECK(block != NULL && is_aligned(block, alignment));
  stamp(block, size, rng_next(rng));
  if (rng_next(rng) % 2) {
    hand_over(rng, block);
  } else {
    unsigned slot = (unsigned)(rng_next(rng) % KEPT);
    release(worker->kept[slot]);
    worker->kept[slot] = block;
  }
}

/* Huge blocks only: malloc, realloc within huge sizes, cross-thread free. */
static void huge_step(worker_t *worker, test_rng_t *rng) {
  unsigned slot = (unsigned)(rng_next(rng) % 4);
  size_t size = rng_range(rng, 4 * MIB, 9 * MIB);
  uint64_t kind = rng_next(rng) % 100;
  if (kind < 30 && worker->kept[slot] != NULL) {
    stamp_t old = stamp_of(worker->kept[slot]);
    TCHECK(stamp_intact(worker->kept[slot]));
    void *moved = realloc(worker->kept[slot], size);
    TCHECK(moved != NULL && stamp_moved(moved, old, size));
    stamp(moved, size, rng_next(rng));
    worker->kept[slot] = moved;
  } else if (kind < 60) {
    release(worker->kept[slot]);
    worker->kept[slot] = NULL;
    worker->kept[slot] = fresh(size, rng_next(rng));
  } else {
    hand_over(rng, fresh(size, rng_next(rng)));
  }
}

static void *worker_run(void *argument) {
  worker_t *worker = argument;
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  TCHECK(pthread_sigmask(SIG_UNBLOCK, &usr1, NULL) == 0); /* only workers take it */
  test_rng_t rng = {0x5eed0000u + worker->index};
  while (!atomic_load(&workers_stop)) {
    if (in_child) child_finish(worker);
    worker->step(worker, &rng);
    atomic_fetch_add_explicit(&worker->progress, 1, memory_order_relaxed);
  }
  for (int i = 0; i < KEPT; i++) {
    void *block = worker->kept[i];
    worker->kept[i] = NULL;
    release(block);
  }
  if (in_child) child_finish(worker);
  atomic_store(&worker->done, true);
  return NULL;
}

static atomic_bool signaller_stop;
static pid_t run_pid;

/* SIGUSR1 to the whole process, without pause: any worker may take it. */
static void *signaller_run(void *argument) {
  (void)argument;
  while (!atomic_load(&signaller_stop)) {
    TCHECK(kill(run_pid, SIGUSR1) == 0);
    sched_yield();
  }
  return NULL;
}

/* ---- one run: every phase, watched by the main thread ---- */
typedef struct phase_s {
  const char *name;
  work_fn step;
  unsigned workers;
} phase_t;

static const phase_t phases[] = {
    {"mixed", mixed_step, 4},
    {"realloc", realloc_step, 2},
    {"memalign", memalign_step, 2},
    {"huge", huge_step, 2},
};

static const char *run_name;
static worker_t workers[MAX_WORKERS];

/* Stop here for the top level (or a person) to look at the hung threads. */
__attribute__((noreturn)) static void hang(const char *phase, const char *what) {
  fprintf(stderr, "fork_signal [%s] %s: HANG: %s\n", run_name, phase, what);
  fprintf(
      stderr,
      "fork_signal: process %d stops for a debugger: gdb -p %d -batch -ex 'thread apply all bt'\n",
      (int)getpid(), (int)getpid());
  raise(SIGSTOP);
  _exit(1);
}

/* Reaps every child that has ended; a child that did not exit 0 fails the
 * run. False when there are no children left at all. */
static bool reap_children(const char *phase) {
  for (;;) {
    int status = 0;
    pid_t child = waitpid(-1, &status, WNOHANG);
    if (child == 0) return true;
    if (child < 0) {
      CHECK(errno == ECHILD);
      return false;
    }
    atomic_fetch_sub(&outstanding, 1);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    if (WIFSIGNALED(status))
      fprintf(stderr, "fork_signal [%s] %s: child %d died of signal %d%s\n", run_name, phase,
              (int)child, WTERMSIG(status),
              WTERMSIG(status) == SIGALRM ? " (hung: its alarm fired)" : "");
    else
      fprintf(stderr, "fork_signal [%s] %s: child %d exited with %d\n", run_name, phase, (int)child,
              WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    CHECK(!"every child exits 0");
  }
}

/* After the work: the last children must end, all with 0. */
static void phase_end(const char *phase, double start, double stop_at) {
  for (int i = 0; i < HANDOFF_SLOTS; i++) release(atomic_exchange(&handoff[i], NULL));
  double deadline = now_seconds() + CHILD_WAIT_SECONDS;
  while (reap_children(phase)) {
    if (now_seconds() > deadline) {
      char what[120];
      snprintf(what, sizeof what, "%d children still running %d s after the phase ended",
               atomic_load(&outstanding), CHILD_WAIT_SECONDS);
      hang(phase, what);
    }
    sleep_ms(1);
  }
  atomic_store(&outstanding, 0);
  fprintf(stderr,
          "fork_signal [%s] %-9s %5d forks in handlers, %4d direct, %d failed, %.2f s "
          "(stopping %.2f s)\n",
          run_name, phase, atomic_load(&handler_forks), atomic_load(&direct_forks),
          atomic_load(&fork_failures), now_seconds() - start, now_seconds() - stop_at);
  CHECK(atomic_load(&fork_failures) == 0);
  atomic_store(&handler_forks, 0);
  atomic_store(&direct_forks, 0);
}

static void run_phase(const phase_t *phase, double seconds, int fork_target) {
  atomic_store(&workers_stop, false);
  atomic_store(&signaller_stop, false);
  atomic_store(&forks_off, false);
  double start = now_seconds(), last_change[MAX_WORKERS];
  size_t last_progress[MAX_WORKERS];
  for (unsigned i = 0; i < phase->workers; i++) {
    worker_t *worker = &workers[i];
    memset(worker->kept, 0, sizeof worker->kept);
    worker->index = i + 16 * (unsigned)(phase - phases);
    worker->step = phase->step;
    worker->direct_forks = false;
    atomic_store(&worker->progress, 0);
    atomic_store(&worker->done, false);
    last_progress[i] = 0;
    last_change[i] = start;
    CHECK(pthread_create(&worker->thread, NULL, worker_run, worker) == 0);
  }
  pthread_t signaller;
  CHECK(pthread_create(&signaller, NULL, signaller_run, NULL) == 0);

  /* Watch: reap, and fail when a worker stops moving. */
  bool stopping = false;
  double stop_at = 0;
  char what[200];
  for (;;) {
    reap_children(phase->name);
    double now = now_seconds();
    unsigned done = 0;
    for (unsigned i = 0; i < phase->workers; i++) {
      size_t progress = atomic_load_explicit(&workers[i].progress, memory_order_relaxed);
      if (atomic_load(&workers[i].done)) {
        done++;
      } else if (progress != last_progress[i]) {
        last_progress[i] = progress;
        last_change[i] = now;
      } else if (now - last_change[i] > STALL_SECONDS) {
        snprintf(what, sizeof what,
                 "worker %u made no progress for %d s (after %zu steps; %d forks in handlers, "
                 "%d direct, %d children unreaped)",
                 i, STALL_SECONDS, progress, atomic_load(&handler_forks),
                 atomic_load(&direct_forks), atomic_load(&outstanding));
        hang(phase->name, what);
      }
    }
    int forks = atomic_load(&handler_forks) + atomic_load(&direct_forks);
    if (!stopping && ((now - start >= seconds && forks >= MIN_FORKS) || forks >= fork_target)) {
      stopping = true;
      stop_at = now;
      atomic_store(&forks_off, true);
      atomic_store(&signaller_stop, true);
      atomic_store(&workers_stop, true);
    }
    if (!stopping && now - start > seconds + STALL_SECONDS) {
      snprintf(what, sizeof what, "only %d forks in %.1f s (signals not reaching the workers?)",
               forks, now - start);
      hang(phase->name, what);
    }
    if (stopping && done == phase->workers) break;
    sleep_ms(1);
  }
  CHECK(pthread_join(signaller, NULL) == 0);
  for (unsigned i = 0; i < phase->workers; i++) CHECK(pthread_join(workers[i].thread, NULL) == 0);
  phase_end(phase->name, start, stop_at);
}

/* The single-threaded run: this thread works and forks, another process
 * signals it. No thread watches; the top level's deadline does. */
static void run_single(double seconds, int fork_target) {
  pid_t sender = fork();
  CHECK(sender >= 0);
  if (sender == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != run_pid) _exit(0);
    for (;;) {
      if (kill(run_pid, SIGUSR1) != 0) _exit(1);
      sched_yield();
    }
  }
  worker_t *worker = &workers[0];
  memset(worker->kept, 0, sizeof worker->kept);
  worker->direct_forks = true;
  test_rng_t rng = {0x5eed5eedu};
  double start = now_seconds();
  for (size_t steps = 0;; steps++) {
    if (in_child) child_finish(worker);
    mixed_step(worker, &rng);
    if (in_child) child_finish(worker);
    if (steps % 8 == 0) {
      int forks = atomic_load(&handler_forks) + atomic_load(&direct_forks);
      if ((now_seconds() - start >= seconds && forks >= MIN_FORKS) || forks >= fork_target) break;
      /* A child may be the sender: a dead sender is a failure too. */
      reap_children("single");
    }
  }
  atomic_store(&forks_off, true);
  kill(sender, SIGKILL);
  while (waitpid(sender, NULL, 0) < 0) CHECK(errno == EINTR);
  double stop_at = now_seconds();
  for (int i = 0; i < KEPT; i++) {
    release(worker->kept[i]);
    worker->kept[i] = NULL;
  }
  if (in_child) child_finish(worker);
  phase_end("single", start, stop_at);
}

static int run(const char *name, const char *only_phase) {
  run_name = name;
  run_pid = getpid();
  /* Children of children (nested forks) come back here to be reaped. */
  CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  bool single = only_phase != NULL && strcmp(only_phase, "single") == 0;
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  if (!single) /* inherited by every thread but the workers */
    CHECK(pthread_sigmask(SIG_BLOCK, &usr1, NULL) == 0);
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = fork_in_handler;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  CHECK(sigaction(SIGUSR1, &action, NULL) == 0);

  double seconds = PHASE_SECONDS * test_scale();
  int fork_target = (int)scaled_count(2000, MIN_FORKS);
  double start = now_seconds();
  if (single) {
    run_single(seconds, fork_target);
  } else {
    for (size_t i = 0; i < sizeof phases / sizeof phases[0]; i++)
      if (only_phase == NULL || strcmp(only_phase, phases[i].name) == 0)
        run_phase(&phases[i], seconds, fork_target);
  }
  CHECK(pthread_sigmask(SIG_BLOCK, &usr1, NULL) == 0);
  signal(SIGUSR1, SIG_IGN);
  fprintf(stderr, "fork_signal [%s] done in %.2f s\n", name, now_seconds() - start);
  return 0;
}

/* ---- the top level: each run in its own process group, watched ---- */

/* The state and wait channel of each thread of pid, then its children's. */
static void describe_process(pid_t pid, int depth) {
  char path[320], text[512]; /* a task name (d_name) may take 255 */
  snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
  DIR *tasks = opendir(path);
  if (tasks == NULL) return;
  fprintf(stderr, "fork_signal: %*sprocess %d:\n", depth * 2, "", (int)pid);
  struct dirent *entry;
  while ((entry = readdir(tasks)) != NULL) {
    if (entry->d_name[0] == '.') continue;
    char state = '?', wchan[64] = "";
    snprintf(path, sizeof path, "/proc/%d/task/%s/stat", (int)pid, entry->d_name);
    FILE *file = fopen(path, "r");
    if (file != NULL) {
      if (fgets(text, sizeof text, file) != NULL) {
        char *close = strrchr(text, ')');
        if (close != NULL && close[1] == ' ') state = close[2];
      }
      fclose(file);
    }
    snprintf(path, sizeof path, "/proc/%d/task/%s/wchan", (int)pid, entry->d_name);
    file = fopen(path, "r");
    if (file != NULL) {
      if (fgets(wchan, sizeof wchan, file) == NULL) wchan[0] = '\0';
      fclose(file);
    }
    fprintf(stderr, "fork_signal: %*s  thread %s: state %c, waiting in %s\n", depth * 2, "",
            entry->d_name, state, wchan[0] != '\0' ? wchan : "-");
    if (depth < 3) {
      snprintf(path, sizeof path, "/proc/%d/task/%s/children", (int)pid, entry->d_name);
      file = fopen(path, "r");
      int child;
      if (file != NULL) {
        while (fscanf(file, "%d", &child) == 1) describe_process((pid_t)child, depth + 1);
        fclose(file);
      }
    }
  }
  closedir(tasks);
}

/* With SHOAL_TEST_GDB=1: every thread's stack of pid and of its live
 * children (a few), from gdb. */
static void gdb_stacks(pid_t pid, int *budget) {
  if (*budget <= 0) return;
  char path[320], text[512]; /* a task name (d_name) may take 255 */
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *file = fopen(path, "r");
  if (file == NULL) return;
  char *close = fgets(text, sizeof text, file) != NULL ? strrchr(text, ')') : NULL;
  fclose(file);
  if (close == NULL || close[2] == 'Z') return;
  (*budget)--;
  fprintf(stderr, "fork_signal: ---- stacks of process %d ----\n", (int)pid);
  char number[16];
  snprintf(number, sizeof number, "%d", (int)pid);
  pid_t gdb = fork();
  if (gdb == 0) {
    dup2(2, 1);
    execlp("gdb", "gdb", "-q", "-nx", "-p", number, "-batch", "-ex", "thread apply all bt", NULL);
    _exit(127);
  }
  if (gdb > 0) waitpid(gdb, NULL, 0);
  snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
  file = fopen(path, "r");
  if (file == NULL) return;
  int child;
  while (fscanf(file, "%d", &child) == 1) gdb_stacks((pid_t)child, budget);
  fclose(file);
}

static void report_hung(pid_t pid) {
  describe_process(pid, 0);
  const char *gdb = getenv("SHOAL_TEST_GDB");
  if (gdb != NULL && *gdb != '\0' && strcmp(gdb, "0") != 0) {
    int budget = 6;
    gdb_stacks(pid, &budget);
  } else {
    fprintf(stderr, "fork_signal: (SHOAL_TEST_GDB=1 prints every thread's stack)\n");
  }
}

/* Runs this program as "run NAME" with variable=value added; true when
 * the run passed. */
static bool run_watched(const char *self, const char *name, const char *variable, const char *value,
                        bool single) {
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    setpgid(0, 0);
    if (variable != NULL) setenv(variable, value, 1);
    execl(self, self, "run", name, single ? "single" : (char *)NULL, (char *)NULL);
    fprintf(stderr, "fork_signal: cannot run %s: %s\n", self, strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid); /* whichever of the two comes first */
  double count = single ? 1 : (double)(sizeof phases / sizeof phases[0]);
  int limit = (single ? SINGLE_SECONDS : RUN_SECONDS) + (int)(count * PHASE_SECONDS * test_scale());
  double deadline = now_seconds() + limit;
  int status = 0;
  bool passed = false;
  for (;;) {
    pid_t done = waitpid(pid, &status, WNOHANG | WUNTRACED);
    CHECK(done >= 0);
    if (done == pid && WIFSTOPPED(status)) { /* it found a hang and waits */
      report_hung(pid);
      break;
    }
    if (done == pid) {
      passed = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!passed)
        fprintf(stderr, "fork_signal [%s]: the run %s %d\n", name,
                WIFSIGNALED(status) ? "died of signal" : "exited with",
                WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
      break;
    }
    if (now_seconds() > deadline) {
      fprintf(stderr, "fork_signal [%s%s]: HANG: the run did not end in %d s\n", name,
              single ? " single" : "", limit);
      report_hung(pid);
      break;
    }
    sleep_ms(5);
  }
  kill(-pid, SIGKILL); /* the run if it is still there, and any child left */
  if (!passed) waitpid(pid, &status, 0);
  return passed;
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "run") == 0) return run(argv[2], argc >= 4 ? argv[3] : NULL);
  static const struct {
    const char *name, *variable, *value;
  } modes[] = {
      {"plain", NULL, NULL}, {"leaks", "SHOAL_LEAKS", "all"}, {"check", "SHOAL_CHECK", "1"}};
  char self[4096];
  ssize_t length = readlink("/proc/self/exe", self, sizeof self - 1);
  CHECK(length > 0);
  self[length] = '\0';
  double start = now_seconds();
  int failed = 0;
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
    if (argc >= 2 && strcmp(argv[1], modes[i].name) != 0) continue;
    for (int single = 0; single < 2; single++)
      if (!run_watched(self, modes[i].name, modes[i].variable, modes[i].value, single)) failed++;
  }
  CHECK_CTX(failed == 0, "fork_signal: %d of the runs failed", failed);
  printf("fork_signal: all checks passed in %.2f s\n", now_seconds() - start);
  return 0;
}
