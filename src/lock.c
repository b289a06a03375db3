/* lock.c — the one lock shoal has, used by the arena only.
 *
 * Waiting follows seed 002 (FastMM4-AVX) and seed 004: spin with `pause` a
 * bounded number of times, then yield the processor a few times, then sleep
 * on a futex until the holder wakes us. Never a fixed-time sleep: a waiter
 * runs again as soon as the lock is free.
 *
 * The word is 0 (free), 1 (held) or 2 (held, someone may sleep on it), the
 * classic three-state futex mutex. Each thread remembers the locks in its
 * hands, so that fork() from a signal handler that interrupted it while
 * taking, holding or releasing one does not wait on itself. */
#include "internal.h"

enum { LOCK_FREE = 0, LOCK_HELD = 1, LOCK_CONTENDED = 2 };
enum { SPIN_ROUNDS = 100, YIELD_ROUNDS = 8 };

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  atomic_signal_fence(memory_order_seq_cst);
#endif
}

/* The locks this thread is taking, holds or is releasing: noted before the
 * first atomic step and forgotten after the last, with compiler fences, so a
 * signal handler that interrupts the thread anywhere in between sees the
 * lock as its own (and a fork there does not wait on itself). */
static _Thread_local const shoal_lock_t *in_hand[2];

static void note_in_hand(const shoal_lock_t *lock) {
  for (size_t i = 0; i < 2; i++) {
    if (in_hand[i] == NULL) {
      in_hand[i] = lock;
      break;
    }
  }
  atomic_signal_fence(memory_order_seq_cst);
}

static void forget_in_hand(const shoal_lock_t *lock) {
  atomic_signal_fence(memory_order_seq_cst);
  for (size_t i = 0; i < 2; i++)
    if (in_hand[i] == lock) in_hand[i] = NULL;
}

static bool try_take(shoal_lock_t *lock) {
  int expected = LOCK_FREE;
  return atomic_compare_exchange_strong_explicit(&lock->word, &expected, LOCK_HELD,
                                                 memory_order_acquire, memory_order_relaxed);
}

bool lock_try_acquire(shoal_lock_t *lock) {
  note_in_hand(lock);
  if (try_take(lock)) return true;
  forget_in_hand(lock);
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
  note_in_hand(lock);
  lock_acquire_plain(lock);
}

void lock_release(shoal_lock_t *lock) {
  lock_release_plain(lock);
  forget_in_hand(lock);
}

bool lock_held_by_me(const shoal_lock_t *lock) {
  for (size_t i = 0; i < 2; i++)
    if (in_hand[i] == lock) return true;
  return false;
}

void lock_reset(shoal_lock_t *lock) {
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
