/* depot.c — blocks that a thread freeing for several heaps frees for a
 * class it does not allocate (or any small class, heap.c's
 * outbox_to_depot), and the medium blocks that many threads freed for an
 * owner away too long (heap.c's mailbox_overflow), kept as blocks for
 * whichever thread allocates the class next.
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
 * A class's depot is DEPOT_SHARDS stacks, each under a lock held for a
 * few stores. One stack a class serialised every thread of a batch
 * producer/consumer program (xmalloc, 8 pairs on 16 cores: a third of
 * shoal's time waiting on the one lock, and a take walked the heads of
 * the chains it joined, a miss each, while holding it). A thread puts
 * into and takes from its own shard first and moves on to the next when
 * one is busy, so a holder preempted (more threads than cores) stops one
 * shard, not the class. Chains are joined into groups of up to
 * DEPOT_TAKE_BYTES as they are put (a chain's tail linked to the group's
 * head): a take pops a group whole, reading only the group's first block,
 * which is its own from then on. Nobody waits long: a put that finds
 * every shard busy or full sends its chain home, a take carves. No signal
 * is held off either (lock.c holds them for locks fork takes): a handler
 * that mallocs while its thread holds a shard finds it busy and goes on,
 * and a fork child, where the holder is gone, frees the locks.
 *
 * Blocks in a depot stay counted in their pages (used), which cannot be
 * given back meanwhile. A class nobody took from for a purge delay takes
 * no more chains, and its chains go home at the next malloc slow path
 * (heap.c, heap_depot_check); shoal_collect(true) sends all home. */
#include "core/internal.h"

/* A group's first block (every class with a depot has blocks of 32 bytes
 * or more): after the link and the key, the group below as a stack word,
 * and the group's tail. A stack word is a group's first block with its
 * length in the top bits (blocks lie below 2^48); 0: none. */
typedef struct group_head_s {
  shoal_block_t block;
  uintptr_t below;
  shoal_block_t *tail;
} group_head_t;
#define GROUP_COUNT_SHIFT 48

static inline group_head_t *group_head(shoal_block_t *block) {
  return (group_head_t *)(void *)block;
}

static inline shoal_block_t *word_head(uintptr_t word) {
  return (shoal_block_t *)(word & (((uintptr_t)1 << GROUP_COUNT_SHIFT) - 1));
}

static inline uint32_t word_count(uintptr_t word) {
  return (uint32_t)(word >> GROUP_COUNT_SHIFT);
}

static inline uintptr_t group_word(shoal_block_t *head, uint32_t count) {
  return (uintptr_t)head | (uintptr_t)count << GROUP_COUNT_SHIFT;
}

typedef struct depot_shard_s {
  shoal_lock_t lock;
  _Atomic(size_t) bytes; /* held (written under the lock): 0, nothing to take */
  /* (lock) The top group's word, the only word a put or take publishes
   * (a release store, after the group's own words): a fork child finds a
   * whole stack whatever a holder was doing. */
  _Atomic(uintptr_t) top;
  /* (lock) Copies of the top group's head words, so that a put joining
   * it writes only its own blocks; unset after a take (the next put
   * starts a group rather than read another thread's block). */
  uintptr_t top_below;
  shoal_block_t *top_tail;
  bool top_known;
} cache_aligned depot_shard_t;

/* The times change once a millisecond at most and are read by every put;
 * the bits change whenever a shard empties or fills, which in a batch
 * producer/consumer program is most takes. On one line, each put's reads
 * missed on the takers' writes (xmalloc, 8 pairs on 16 cores: 6 % of
 * shoal's time in depot_stale_at). */
typedef struct depot_class_s {
  _Atomic(int64_t) active_ms; /* the last take, or the put that found the depot empty */
  _Atomic(uint32_t) held_shards cache_aligned; /* a bit per shard holding chains */
} cache_aligned depot_class_t;

_Static_assert(DEPOT_SHARDS <= 32, "a bit per shard in held_shards");
_Static_assert((DEPOT_SHARDS & (DEPOT_SHARDS - 1)) == 0, "shards wrap by a mask");

/* Apart: every slow path of a class writes its depot_wanted_ms, the
 * depots and shards are written only in programs whose threads free each
 * other's blocks. The times side by side, eight classes a line, a write a
 * millisecond at most each: a program's slow paths write one OS page of
 * them, not the three of the depots that hold them (every process's peak
 * RSS, the forty-sixth session). */
static _Atomic(int64_t) depot_wanted_ms[CLASS_COUNT] cache_aligned; /* the last look for one */
static depot_class_t depots[CLASS_COUNT];
static depot_shard_t depot_shards[CLASS_COUNT][DEPOT_SHARDS];

static inline void time_note(_Atomic(int64_t) *at, int64_t now) {
  if (atomic_load_explicit(at, memory_order_relaxed) != now)
    atomic_store_explicit(at, now, memory_order_relaxed);
}

void depot_note_wanted(uint8_t size_class, int64_t now) {
  time_note(&depot_wanted_ms[size_class], now);
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
  return now - atomic_load_explicit(&depot_wanted_ms[size_class], memory_order_relaxed) <
         depot_delay();
}

bool depot_may_hold(uint8_t size_class) {
  return atomic_load_explicit(&depots[size_class].held_shards, memory_order_relaxed) != 0;
}

/* (shard lock) Its byte count, and its bit in the class's. */
static void shard_bytes_set(depot_class_t *depot, depot_shard_t *at, unsigned shard, size_t bytes) {
  size_t before = atomic_load_explicit(&at->bytes, memory_order_relaxed);
  atomic_store_explicit(&at->bytes, bytes, memory_order_relaxed);
  if (before == 0 && bytes != 0)
    atomic_fetch_or_explicit(&depot->held_shards, 1u << shard, memory_order_relaxed);
  else if (before != 0 && bytes == 0)
    atomic_fetch_and_explicit(&depot->held_shards, ~(1u << shard), memory_order_relaxed);
}

/* Blocks a group holds at most (a single chain may hold more). */
static inline uint32_t take_blocks(uint8_t size_class) {
  return (uint32_t)(DEPOT_TAKE_BYTES / class_block_size[size_class]);
}

/* (shard lock) The chain on top: into the top group while that stays
 * within a take, else as a group of its own. */
static void shard_push(depot_shard_t *shard, chain_t chain, uint32_t group_blocks) {
  uintptr_t top = atomic_load_explicit(&shard->top, memory_order_relaxed);
  group_head_t *head = group_head(chain.head);
  if (top != 0 && shard->top_known && word_count(top) + chain.count <= group_blocks) {
    chain.tail->next = word_head(top);
    head->below = shard->top_below;
    head->tail = shard->top_tail;
    chain.count += word_count(top);
  } else {
    chain.tail->next = NULL;
    head->below = top;
    head->tail = chain.tail;
    shard->top_below = top;
    shard->top_tail = chain.tail;
    shard->top_known = true;
  }
  atomic_store_explicit(&shard->top, group_word(chain.head, chain.count), memory_order_release);
}

/* (shard lock) The top group, and the one below if the top is less than
 * half a take (a group a take left unfilled): their first blocks are the
 * taker's. */
static chain_t shard_pop(depot_shard_t *shard, uint32_t group_blocks) {
  uintptr_t top = atomic_load_explicit(&shard->top, memory_order_relaxed);
  chain_t taken = {word_head(top), group_head(word_head(top))->tail, word_count(top)};
  uintptr_t below = group_head(taken.head)->below;
  if (below != 0 && taken.count < group_blocks / 2) {
    taken.tail->next = word_head(below);
    taken.tail = group_head(word_head(below))->tail;
    taken.count += word_count(below);
    below = group_head(word_head(below))->below;
  }
  atomic_store_explicit(&shard->top, below, memory_order_relaxed);
  shard->top_known = false;
  return taken;
}

/* (shard lock, released here) The chain in, if the shard still has room. */
static bool shard_put_locked(uint8_t size_class, unsigned index, chain_t chain, int64_t now) {
  depot_class_t *depot = &depots[size_class];
  depot_shard_t *shard = &depot_shards[size_class][index];
  size_t bytes = atomic_load_explicit(&shard->bytes, memory_order_relaxed);
  size_t chain_bytes = (size_t)chain.count * class_block_size[size_class];
  bool room = bytes + chain_bytes <= DEPOT_SHARD_MAX_BYTES;
  if (room) {
    if (atomic_load_explicit(&depot->held_shards, memory_order_relaxed) == 0)
      atomic_store_explicit(&depot->active_ms, now, memory_order_relaxed);
    shard_push(shard, chain, take_blocks(size_class));
    shard_bytes_set(depot, shard, index, bytes + chain_bytes);
  }
  lock_release_plain(&shard->lock);
  return room;
}

bool depot_put(uint8_t size_class, chain_t chain, int64_t now, unsigned home) {
  depot_shard_t *shards = depot_shards[size_class];
  size_t chain_bytes = (size_t)chain.count * class_block_size[size_class];
  int busy = -1; /* the first shard with room that was busy */
  for (unsigned i = 0; i < DEPOT_SHARDS; i++) {
    unsigned index = (home + i) & (DEPOT_SHARDS - 1);
    if (atomic_load_explicit(&shards[index].bytes, memory_order_relaxed) + chain_bytes >
        DEPOT_SHARD_MAX_BYTES)
      continue;
    if (lock_try_acquire_plain(&shards[index].lock))
      return shard_put_locked(size_class, index, chain, now);
    if (busy < 0) busy = (int)index;
  }
  if (busy >= 0 && lock_try_acquire_briefly(&shards[busy].lock))
    return shard_put_locked(size_class, (unsigned)busy, chain, now);
  return false;
}

/* (shard lock, released here) Its top group or two, if it still holds one. */
static chain_t shard_take_locked(uint8_t size_class, unsigned index, int64_t now) {
  depot_class_t *depot = &depots[size_class];
  depot_shard_t *shard = &depot_shards[size_class][index];
  chain_t taken = {NULL, NULL, 0};
  if (atomic_load_explicit(&shard->top, memory_order_relaxed) != 0) {
    taken = shard_pop(shard, take_blocks(size_class));
    shard_bytes_set(depot, shard, index,
                    atomic_load_explicit(&shard->bytes, memory_order_relaxed) -
                        (size_t)taken.count * class_block_size[size_class]);
    if (now != 0) time_note(&depot->active_ms, now);
  }
  lock_release_plain(&shard->lock);
  return taken;
}

chain_t depot_take(uint8_t size_class, int64_t now, unsigned home) {
  depot_shard_t *shards = depot_shards[size_class];
  chain_t taken = {NULL, NULL, 0};
  uint32_t held = atomic_load_explicit(&depots[size_class].held_shards, memory_order_relaxed);
  if (held == 0) return taken;
  home &= DEPOT_SHARDS - 1;
  /* The shards that hold chains from home on, wrapping: home rotated to bit 0. */
  uint32_t from_home =
      ((held >> home) | (held << (DEPOT_SHARDS - home))) & ((1u << DEPOT_SHARDS) - 1u);
  int busy = -1; /* the first of them that was busy */
  for (; from_home != 0; from_home &= from_home - 1) {
    unsigned index = (home + (unsigned)__builtin_ctz(from_home)) & (DEPOT_SHARDS - 1);
    if (lock_try_acquire_plain(&shards[index].lock)) {
      taken = shard_take_locked(size_class, index, now);
      if (taken.head != NULL) return taken;
    } else if (busy < 0) {
      busy = (int)index;
    }
  }
  if (busy >= 0 && lock_try_acquire_briefly(&shards[busy].lock))
    taken = shard_take_locked(size_class, (unsigned)busy, now);
  return taken;
}

int64_t depot_active_until(uint8_t size_class) {
  return atomic_load_explicit(&depots[size_class].active_ms, memory_order_relaxed) +
         DEPOT_STALE_DELAYS * depot_delay();
}

int64_t depot_stale_at(uint8_t size_class) {
  return depot_may_hold(size_class) ? depot_active_until(size_class) : 0;
}

/* The stacks are whole in the child whatever a put or take was doing (one
 * store to `top` adds or removes chains); the counts and copies may not
 * be: made again from the stacks. */
void depot_fork_child(void) {
  for (uint8_t size_class = 0; size_class < CLASS_COUNT; size_class++) {
    depot_class_t *depot = &depots[size_class];
    atomic_store_explicit(&depot->held_shards, 0, memory_order_relaxed);
    for (unsigned index = 0; index < DEPOT_SHARDS; index++) {
      depot_shard_t *shard = &depot_shards[size_class][index];
      lock_reset(&shard->lock);
      shard->top_known = false;
      size_t blocks = 0;
      for (uintptr_t word = atomic_load_explicit(&shard->top, memory_order_relaxed); word != 0;
           word = group_head(word_head(word))->below)
        blocks += word_count(word);
      atomic_store_explicit(&shard->bytes, 0, memory_order_relaxed);
      shard_bytes_set(depot, shard, index, blocks * class_block_size[size_class]);
    }
  }
}
