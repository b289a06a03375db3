/* lock.c — the one lock shoal has, used by the arena only.
 *
 * Waiting follows seed 002 (FastMM4-AVX) and seed 004: spin with `pause` a
 * bounded number of times, then yield the processor a few times, then sleep
 * on a futex until the holder wakes us. Never a fixed-time sleep: a waiter
 * runs again as soon as the lock is free.
 *
 * The word is 0 (free), 1 (held) or 2 (held, someone may sleep on it), the
 * classic three-state futex mutex. The holder is remembered so that fork()
 * from a signal handler that interrupted the holder does not wait on itself. */
#include "internal.h"

#include <pthread.h>

enum { LOCK_FREE = 0, LOCK_HELD = 1, LOCK_CONTENDED = 2 };
enum { SPIN_ROUNDS = 100, YIELD_ROUNDS = 8 };

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  atomic_signal_fence(memory_order_seq_cst);
#endif
}

static uintptr_t self(void) {
  return (uintptr_t)pthread_self();
}

bool lock_try_acquire(shoal_lock_t *lock) {
  int expected = LOCK_FREE;
  if (atomic_compare_exchange_strong_explicit(&lock->word, &expected, LOCK_HELD,
                                              memory_order_acquire, memory_order_relaxed)) {
    atomic_store_explicit(&lock->holder, self(), memory_order_relaxed);
    return true;
  }
  return false;
}

static slow_path void lock_wait(shoal_lock_t *lock) {
  for (int round = 0; round < SPIN_ROUNDS + YIELD_ROUNDS; round++) {
    if (atomic_load_explicit(&lock->word, memory_order_relaxed) == LOCK_FREE &&
        lock_try_acquire(lock))
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
  atomic_store_explicit(&lock->holder, self(), memory_order_relaxed);
}

void lock_acquire(shoal_lock_t *lock) {
  if (likely(lock_try_acquire(lock))) return;
  lock_wait(lock);
}

void lock_release(shoal_lock_t *lock) {
  atomic_store_explicit(&lock->holder, 0, memory_order_relaxed);
  if (atomic_exchange_explicit(&lock->word, LOCK_FREE, memory_order_release) == LOCK_CONTENDED)
    os_futex_wake_one(&lock->word);
}

bool lock_held_by_me(const shoal_lock_t *lock) {
  return atomic_load_explicit(&lock->word, memory_order_relaxed) != LOCK_FREE &&
         atomic_load_explicit(&lock->holder, memory_order_relaxed) == self();
}

void lock_reset(shoal_lock_t *lock) {
  atomic_store_explicit(&lock->holder, 0, memory_order_relaxed);
  atomic_store_explicit(&lock->word, LOCK_FREE, memory_order_relaxed);
}

/* For fork's prepare handler: hold the lock across fork() unless this
 * thread holds it already (a fork from a signal handler that interrupted
 * it), which must not wait on itself. True when taken here. */
bool lock_acquire_for_fork(shoal_lock_t *lock) {
  if (lock_held_by_me(lock)) return false;
  lock_acquire(lock);
  return true;
}
