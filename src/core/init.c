/* init.c — the core's start-up, thread exit and fork.
 *
 * The first malloc may come before main (the dynamic loader, dlsym, TLS
 * set-up under LD_PRELOAD), so initialisation allocates nothing through
 * shoal until it is done: options are read with getenv, the key comes from
 * the OS, and the fork handlers (pthread_atfork may allocate) come last. The layer
 * that takes the program's first call runs process_init before anything
 * else of the core, with its own start-up to run once inside (where it
 * fills in core_hooks for what it wants told). */
#include "core/internal.h"

enum { INIT_NONE, INIT_RUNNING, INIT_DONE };

static _Atomic(int) init_state;

/* fork holds every lock (lock.c); the child then puts the heaps of the
 * threads that did not survive aside, and tells the layers above. */
static void fork_prepare(void) {
  heap_fork_prepare(); /* first: a thread holding another's heap may wait for a lock below */
  lock_fork_prepare();
}

static void fork_parent(void) {
  lock_fork_parent();
  heap_fork_after();
}

static void fork_child(void) {
  lock_fork_child();
  heap_fork_child(thread_heap_own());
  arena_fork_child(thread_heap_own());
  if (core_hooks.fork_child != NULL) core_hooks.fork_child();
}

void process_init(void (*above)(void)) {
  if (likely(atomic_load_explicit(&init_state, memory_order_acquire) == INIT_DONE)) return;
  int expected = INIT_NONE;
  if (!atomic_compare_exchange_strong_explicit(&init_state, &expected, INIT_RUNNING,
                                               memory_order_acq_rel, memory_order_acquire)) {
    while (atomic_load_explicit(&init_state, memory_order_acquire) != INIT_DONE) os_yield();
    return;
  }
  os_init();
  options_init();
  free_key = (uintptr_t)os_random_key();
  arena_register_for_fork();
  if (above != NULL) above();
  os_thread_exit_init(heap_thread_exit);
  atomic_store_explicit(&init_state, INIT_DONE, memory_order_release);
  os_at_fork(fork_prepare, fork_parent, fork_child);
  verbose("ready: segments of %zu KiB, %d size classes up to %d bytes, purge delay %ld ms",
          SEGMENT_SIZE >> 10, CLASS_COUNT, MEDIUM_MAX, option(SHOAL_OPTION_PURGE_DELAY));
}
