/* depot.c — blocks that a thread freeing for several heaps frees for a
 * class it does not allocate (or any small class, heap.c's
 * outbox_to_depot), kept as blocks for whichever thread allocates the
 * class next.
 *
 * In a producer/consumer program every block is freed by a thread that
 * never allocates its class. Sent home, the blocks empty their producer's
 * pages, the slices go to that producer's heap, and only that producer uses
 * them again: with several producers, each heap held its own high-water
 * mark of freed memory (xmalloc 8:8: 34 MB of free slices beside 27 MB of
 * pages, while the leanest peer's whole peak was 29 MB: its freed blocks go
 * to one list per class that every thread takes from). So the outbox's
 * chains of such a thread (heap.c, outbox_to_depot: one page's blocks, 4
 * KiB) go to the class's depot instead of home, and a thread looking for a
 * free block of the class takes chains first. Memory flows between
 * producers while their pages stay in use. A chain holds one page's blocks
 * so that a batch built from the depot spans a few pages, as one built
 * from fresh pages does: chains of blocks from anywhere, handed round,
 * scattered every batch over the whole pool (xmalloc 2:2 four times
 * slower, in cache misses).
 *
 * A class's depot is a stack of chains under a lock held for a few
 * instructions. Nobody waits long for it: a put that finds it busy or full
 * sends its chain home, a take that finds it busy carves. No signal is
 * held off either (lock.c holds them for locks fork takes): a handler
 * that mallocs while its thread holds a depot finds it busy and goes on,
 * and a fork child, where the holder is gone, frees the locks.
 *
 * Blocks in a depot stay counted in their pages (used), which cannot be
 * given back meanwhile. A class nobody took from for a purge delay takes
 * no more chains, and its chains go home at the next malloc slow path
 * (heap.c, heap_depot_check); shoal_collect(true) sends all home. */
#include "core/internal.h"

typedef struct depot_class_s {
  shoal_lock_t lock;
  _Atomic(size_t) bytes;      /* held (written under the lock): 0, nothing to take */
  _Atomic(int64_t) active_ms; /* the last take, or the put that found the depot empty */
  _Atomic(int64_t) wanted_ms; /* the last time a thread looked for a block of the class */
  /* (lock) The last chain put. Atomic for a fork child only: a release
   * store publishes a chain's head words before the chain. */
  _Atomic(shoal_block_t *) top;
} cache_aligned depot_class_t;

static depot_class_t depots[CLASS_COUNT];

/* A chain's first block (every class with a depot has blocks of 32 bytes
 * or more): after the link and the key, the chain's tail with its length
 * in the top bits (blocks lie below 2^47), and the next chain down. */
typedef struct chain_head_s {
  shoal_block_t block;
  uintptr_t tail_and_count;
  shoal_block_t *next_chain;
} chain_head_t;
#define CHAIN_COUNT_SHIFT 48

static inline chain_head_t *chain_head(shoal_block_t *block) {
  return (chain_head_t *)(void *)block;
}

void depot_note_wanted(uint8_t size_class, int64_t now) {
  if (atomic_load_explicit(&depots[size_class].wanted_ms, memory_order_relaxed) != now)
    atomic_store_explicit(&depots[size_class].wanted_ms, now, memory_order_relaxed);
}

/* A depot's times count in the option's purge delay, not the paced one
 * (purge_delay): pacing keeps memory from the OS while it is soon wanted
 * again, where a depot's question is only whether any thread wants its
 * blocks; waiting paced delays, blocks freed for idle owners came home
 * after the owners' purge was due (test purge, case c). 0: no depot. */
static int64_t depot_delay(void) {
  return option(SHOAL_OPTION_PURGE_DELAY);
}

bool depot_is_wanted(uint8_t size_class, int64_t now) {
  return now - atomic_load_explicit(&depots[size_class].wanted_ms, memory_order_relaxed) <
         depot_delay();
}

bool depot_may_hold(uint8_t size_class) {
  return atomic_load_explicit(&depots[size_class].bytes, memory_order_relaxed) > 0;
}

bool depot_put(uint8_t size_class, chain_t chain, int64_t now) {
  depot_class_t *depot = &depots[size_class];
  size_t chain_bytes = (size_t)chain.count * class_block_size[size_class];
  if (atomic_load_explicit(&depot->bytes, memory_order_relaxed) + chain_bytes > DEPOT_MAX_BYTES ||
      !lock_try_acquire_briefly(&depot->lock))
    return false;
  size_t bytes = atomic_load_explicit(&depot->bytes, memory_order_relaxed);
  bool room = bytes + chain_bytes <= DEPOT_MAX_BYTES;
  if (room) {
    chain_head(chain.head)->tail_and_count = (uintptr_t)chain.tail | (uintptr_t)chain.count
                                                                         << CHAIN_COUNT_SHIFT;
    chain_head(chain.head)->next_chain = atomic_load_explicit(&depot->top, memory_order_relaxed);
    atomic_store_explicit(&depot->bytes, bytes + chain_bytes, memory_order_relaxed);
    if (bytes == 0) atomic_store_explicit(&depot->active_ms, now, memory_order_relaxed);
    atomic_store_explicit(&depot->top, chain.head, memory_order_release);
  }
  lock_release_plain(&depot->lock);
  return room;
}

chain_t depot_take(uint8_t size_class, int64_t now) {
  depot_class_t *depot = &depots[size_class];
  chain_t taken = {NULL, NULL, 0};
  if (!depot_may_hold(size_class) || !lock_try_acquire_briefly(&depot->lock)) return taken;
  size_t block_size = class_block_size[size_class];
  shoal_block_t *head = atomic_load_explicit(&depot->top, memory_order_relaxed);
  while (head != NULL && (size_t)taken.count * block_size < DEPOT_TAKE_BYTES) {
    uintptr_t word = chain_head(head)->tail_and_count;
    shoal_block_t *next_chain = chain_head(head)->next_chain;
    if (taken.head == NULL)
      taken.head = head;
    else
      taken.tail->next = head;
    taken.tail = (shoal_block_t *)(word & (((uintptr_t)1 << CHAIN_COUNT_SHIFT) - 1));
    taken.count += (uint32_t)(word >> CHAIN_COUNT_SHIFT);
    head = next_chain;
  }
  if (taken.head != NULL) {
    taken.tail->next = NULL;
    atomic_store_explicit(&depot->top, head, memory_order_relaxed);
    atomic_store_explicit(&depot->bytes,
                          atomic_load_explicit(&depot->bytes, memory_order_relaxed) -
                              (size_t)taken.count * block_size,
                          memory_order_relaxed);
    if (now != 0) atomic_store_explicit(&depot->active_ms, now, memory_order_relaxed);
  }
  lock_release_plain(&depot->lock);
  return taken;
}

int64_t depot_stale_at(uint8_t size_class) {
  if (!depot_may_hold(size_class)) return 0;
  return atomic_load_explicit(&depots[size_class].active_ms, memory_order_relaxed) +
         DEPOT_STALE_DELAYS * depot_delay();
}

/* The stack is whole in the child whatever a put or take was doing (one
 * store to `top` adds or removes chains); its byte count may not be: count
 * it again. */
void depot_fork_child(void) {
  for (uint8_t size_class = 0; size_class < CLASS_COUNT; size_class++) {
    depot_class_t *depot = &depots[size_class];
    lock_reset(&depot->lock);
    size_t blocks = 0;
    for (shoal_block_t *head = atomic_load_explicit(&depot->top, memory_order_relaxed);
         head != NULL; head = chain_head(head)->next_chain)
      blocks += chain_head(head)->tail_and_count >> CHAIN_COUNT_SHIFT;
    atomic_store_explicit(&depot->bytes, blocks * class_block_size[size_class],
                          memory_order_relaxed);
  }
}
