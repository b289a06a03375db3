/* lock.c — shoal's locks (the arena's, the
 * diagnostics'), and fork's hold on all of them.
 *
 * Waiting follows seed 002 (FastMM4-AVX) and seed 004: spin with `pause` a
 * bounded number of times, then yield the processor a few times, then sleep
 * on a futex until the holder wakes us. Never a fixed-time sleep: a waiter
 * runs again as soon as the lock is free.
 *
 * The word is 0 (free), 1 (held) or 2 (held, someone may sleep on it), the
 * classic three-state futex mutex.
 *
 * Asynchronous signals wait while a thread takes, holds or gives back a
 * lock (os_signals_hold), so no signal handler ever runs in a thread that
 * holds one. fork() may be called from a handler (POSIX allows it, glibc's
 * tst-mallocfork2 does it), and fork must hold every lock so that the child
 * finds whole structures. Had the handler interrupted a holder, fork would
 * wait on its own thread; two threads each interrupted holding a lock and
 * forking would wait on each other. Neither can happen now: every holder is
 * running code of ours that ends. The price is two system calls per lock
 * taken, and locks are taken only off the fast paths (segments, thread
 * start and exit, the diagnostics' tables). The cache of huge blocks,
 * whose two calls were 13 % of a program replacing big buffers (largemix),
 * takes no lock (large.c). */
#include "core/internal.h"

enum { SPIN_ROUNDS = 100, YIELD_ROUNDS = 8, BRIEF_SPIN_ROUNDS = 64, BRIEF_YIELD_ROUNDS = 4 };

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  atomic_signal_fence(memory_order_seq_cst);
#endif
}

static bool try_take(shoal_lock_t *lock) {
  int expected = LOCK_FREE;
  return atomic_compare_exchange_strong_explicit(&lock->word, &expected, LOCK_HELD,
                                                 memory_order_acquire, memory_order_relaxed);
}

bool lock_try_acquire(shoal_lock_t *lock) {
  os_signals_hold();
  if (try_take(lock)) return true;
  os_signals_release();
  return false;
}

bool lock_try_acquire_plain(shoal_lock_t *lock) {
  return try_take(lock);
}

bool lock_try_acquire_briefly(shoal_lock_t *lock) {
  for (int round = 0; round < BRIEF_SPIN_ROUNDS + BRIEF_YIELD_ROUNDS; round++) {
    if (atomic_load_explicit(&lock->word, memory_order_relaxed) == LOCK_FREE && try_take(lock))
      return true;
    if (round < BRIEF_SPIN_ROUNDS)
      cpu_relax();
    else
      os_yield(); /* the holder was preempted: let it run */
  }
  return false;
}

_Thread_local size_t lock_waits;

static slow_path void lock_wait(shoal_lock_t *lock) {
  lock_waits++;
  for (int round = 0; round < SPIN_ROUNDS + YIELD_ROUNDS; round++) {
    if (atomic_load_explicit(&lock->word, memory_order_relaxed) == LOCK_FREE && try_take(lock))
      return;
    if (round < SPIN_ROUNDS) {
      for (int i = 0; i < 1 + round / 4; i++) cpu_relax();
    } else {
      os_yield();
    }
  }
  /* Sleep until woken; mark the lock contended so the holder wakes us. */
  while (atomic_exchange_explicit(&lock->word, LOCK_CONTENDED, memory_order_acquire) != LOCK_FREE)
    os_futex_wait(&lock->word, LOCK_CONTENDED);
}

void lock_acquire_plain(shoal_lock_t *lock) {
  if (likely(try_take(lock))) return;
  lock_wait(lock);
}

void lock_release_plain(shoal_lock_t *lock) {
  if (atomic_exchange_explicit(&lock->word, LOCK_FREE, memory_order_release) == LOCK_CONTENDED)
    os_futex_wake_one(&lock->word);
}

void lock_acquire(shoal_lock_t *lock) {
  os_signals_hold();
  lock_acquire_plain(lock);
}

void lock_release(shoal_lock_t *lock) {
  lock_release_plain(lock);
  os_signals_release();
}

/* In a fork child only, for a lock fork does not hold (the trace's). */
void lock_reset(shoal_lock_t *lock) {
  atomic_store_explicit(&lock->word, LOCK_FREE, memory_order_relaxed);
}

/* ---- fork: every registered lock held across it ----
 * Registered at start-up, kept in rank order (internal.h: the order code
 * takes them in), and taken in that order, with signals held from the
 * first: a handler forking again cannot run between this prepare and the
 * parent's or child's handler. The child, where only the forking thread
 * lives, sets them free. */
enum { FORK_LOCKS_MAX = 96 };
static shoal_lock_t *fork_locks[FORK_LOCKS_MAX];
static lock_rank_t fork_lock_ranks[FORK_LOCKS_MAX];
static size_t fork_lock_count;

void lock_register_for_fork(shoal_lock_t *lock, lock_rank_t rank) {
  if (fork_lock_count == FORK_LOCKS_MAX) return;
  size_t at = fork_lock_count++;
  for (; at > 0 && fork_lock_ranks[at - 1] > rank; at--) { /* after the ones of its rank */
    fork_locks[at] = fork_locks[at - 1];
    fork_lock_ranks[at] = fork_lock_ranks[at - 1];
  }
  fork_locks[at] = lock;
  fork_lock_ranks[at] = rank;
}

void lock_fork_prepare(void) {
  os_signals_hold();
  for (size_t i = 0; i < fork_lock_count; i++) lock_acquire_plain(fork_locks[i]);
}

void lock_fork_parent(void) {
  for (size_t i = fork_lock_count; i-- > 0;) lock_release_plain(fork_locks[i]);
  os_signals_release();
}

void lock_fork_child(void) {
  for (size_t i = 0; i < fork_lock_count; i++) lock_reset(fork_locks[i]);
  os_signals_release();
}
