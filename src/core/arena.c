/* arena.c — what threads share: the segment map, cached segments and the
 * heap registry.
 *
 * Holds one of the core's two locks (arena_lock; the other guards the huge
 * block cache in large.c), both lock.c's spin-yield-futex. It is taken when
 * a segment is fetched or returned and when a thread starts or ends, never
 * on the path of an ordinary malloc or free. The two are never nested, and
 * neither is held while calling into a heap; fork takes arena, then huge.
 *
 * Heaps are carved from chunks that are never unmapped, so a remote free can
 * always reach the heap named by a page, whatever became of its thread. */
#include "core/internal.h"

#include <string.h>

#define HEAP_CHUNK_SIZE ((size_t)256 * 1024)

shoal_lock_t arena_lock = SHOAL_LOCK_INIT;
_Atomic(int64_t) arena_purge_at_ms; /* when cached segments are due for purging; 0: none */

/* The scalars first, then the arrays: a process writes the first OS page
 * and the arrays' entries it uses, not a page at each end. */
static struct {
  size_t cached_count;                /* (arena) */
  _Atomic(bool) has_cached;           /* (arena, read by all) cached_count > 0 */
  size_t cached_old;                  /* (arena) the first ones, cached before the last trim */
  int64_t purge_latest_ms;            /* (arena) releases push arena_purge_at_ms back no later */
  int64_t released_ms;                /* (arena) when a segment was last cached */
  int64_t taken_ms;                   /* (arena) when a cached segment was last taken */
  int64_t drawn_since_ms;             /* (arena) the last release, or the last put-off trim */
  size_t drawn;                       /* (arena) segments taken since drawn_since_ms */
  unsigned trims_put_off;             /* (arena) in a row, while heaps draw the cache down */
  _Atomic(shoal_heap_t *) registered; /* every heap; append only */
  shoal_heap_t *abandoned;            /* (arena) heaps of exited threads */
  size_t abandoned_count;             /* (arena) */
  uint8_t *heap_chunk;                /* (arena) where the next heap is carved */
  size_t heap_chunk_left;             /* (arena) */
  _Atomic(size_t) heap_count;
  _Atomic(size_t) heaps_live; /* (written under arena) of a thread: not abandoned, not orphaned */
  size_t retained_count;      /* (arena) */
  shoal_segment_t *cached[ARENA_CACHED_SEGMENTS]; /* (arena) empty segments, warm last */
  /* (arena) segments purged whole, no longer in the segment map: address
   * space only. Last, so that the OS pages of the array that no one reaches
   * stay untouched. */
  shoal_segment_t *retained[ARENA_RETAINED_SEGMENTS];
} arena;

/* ---- the segment map: which 1 MiB chunks of the address space are shoal's ---- */

_Atomic(uint8_t) segment_map[SEGMENT_MAP_ENTRIES];
_Atomic(size_t) stat_segments;

void segment_map_set(shoal_segment_t *segment, size_t size, uint8_t head) {
  uintptr_t first = (uintptr_t)segment >> SEGMENT_SHIFT;
  uintptr_t last = ((uintptr_t)segment + size - 1) >> SEGMENT_SHIFT;
  for (uintptr_t chunk = first; chunk <= last && chunk < SEGMENT_MAP_ENTRIES; chunk++) {
    uint8_t value = head == 0 ? 0 : chunk == first ? SEGMENT_MAP_HEAD : SEGMENT_MAP_INTERIOR;
    atomic_store_explicit(&segment_map[chunk], value, memory_order_relaxed);
  }
}

shoal_segment_t *segment_find(const void *p) {
  uintptr_t chunk = (uintptr_t)p >> SEGMENT_SHIFT;
  if (chunk >= SEGMENT_MAP_ENTRIES) return NULL;
  for (;;) {
    uint8_t value = atomic_load_explicit(&segment_map[chunk], memory_order_relaxed);
    if (value == SEGMENT_MAP_HEAD) {
      /* A huge mapping ends at an OS page, not at a chunk: what lies past its
       * end in its last chunk belongs to someone else. */
      shoal_segment_t *segment = (shoal_segment_t *)(chunk << SEGMENT_SHIFT);
      return (uintptr_t)p - (uintptr_t)segment < segment->size ? segment : NULL;
    }
    if (value != SEGMENT_MAP_INTERIOR || chunk == 0) return NULL;
    chunk--; /* inside a huge block: walk back to its head */
  }
}

/* A segment's header for a new owner. One fresh from the OS is zero, and
 * its page descriptors stay so (page_is_unused): 3 KiB a segment, a thread,
 * that no one touches until its slices serve. */
static void segment_reset_header(shoal_segment_t *segment, bool fresh) {
  atomic_store_explicit(&segment->heap, NULL, memory_order_relaxed);
  segment->next = segment->prev = NULL;
  segment->free_slices = SLICES_ALL & ~SLICE_HEADER_BITS;
  segment->lazy_slices = segment->recent_slices = 0;
  segment->size = SEGMENT_SIZE;
  segment->kind = SEGMENT_NORMAL;
  for (size_t i = 0; i < SLICES_PER_SEGMENT; i++) segment_slice_set_page(segment, i, i);
  if (fresh) return;
  memset(segment->pages, 0, sizeof segment->pages);
  for (size_t i = 0; i < SLICES_PER_SEGMENT; i++) {
    segment->pages[i].size_class = segment->pages[i].shared_class = CLASS_NONE;
    segment->pages[i].freed_class = CLASS_NONE;
    segment->pages[i].flags = PAGE_UNUSED;
  }
}

shoal_segment_t *arena_segment_acquire(void) {
  shoal_segment_t *segment = NULL;
  lock_acquire(&arena_lock);
  if (arena.cached_count > 0) { /* the last released first: it may still be warm */
    segment = arena.cached[--arena.cached_count];
    arena.taken_ms = os_now_ms();
    arena.drawn++;
    if (arena.cached_old > arena.cached_count) arena.cached_old = arena.cached_count;
    atomic_store_explicit(&arena.has_cached, arena.cached_count > 0, memory_order_relaxed);
  }
  bool fresh = segment == NULL;
  if (fresh && arena.retained_count > 0) segment = arena.retained[--arena.retained_count];
  lock_release(&arena_lock);
  if (fresh) {
    if (segment == NULL) segment = os_map_segment(SEGMENT_SIZE);
    if (segment == NULL) return NULL;
    segment->dirty_slices = SLICE_HEADER_BITS;
    os_commit_note((ptrdiff_t)SLICE_SIZE);
    segment_map_set(segment, SEGMENT_SIZE, 1);
  }
  segment_reset_header(segment, fresh);
  atomic_fetch_add_explicit(&stat_segments, 1, memory_order_relaxed);
  return segment;
}

/* A segment no one takes: out of the segment map, purged whole, header
 * and all (it comes back as one fresh from the OS), and kept mapped for the
 * next segment asked for, up to ARENA_RETAINED_SEGMENTS; or unmapped. An
 * munmap takes the address space's lock for writing, which stalls every
 * other thread's populates (and, on older kernels, its page faults), and a
 * purge does not: giveback
 * at 8 threads, a GiB freed as the other threads fill theirs, ran 12 %
 * faster so. What stays is address space, and a page table's page for each
 * 2 MiB of it. */
static void segment_retire(shoal_segment_t *segment, bool unmap) {
  segment_map_set(segment, SEGMENT_SIZE, 0);
  uint64_t dirty = segment->dirty_slices;
  os_commit_note(-(ptrdiff_t)(bit_count(dirty) * SLICE_SIZE));
  if (!unmap) {
    os_purge(segment, (size_t)(64 - __builtin_clzll(dirty)) * SLICE_SIZE);
    lock_acquire(&arena_lock);
    unmap = arena.retained_count == ARENA_RETAINED_SEGMENTS;
    if (!unmap) arena.retained[arena.retained_count++] = segment;
    lock_release(&arena_lock);
  }
  if (unmap) os_unmap(segment, SEGMENT_SIZE);
}

/* With force (a program's call to give all back): the retained segments'
 * address space too. */
static void arena_retained_unmap(void) {
  for (;;) {
    lock_acquire(&arena_lock);
    shoal_segment_t *segment =
        arena.retained_count > 0 ? arena.retained[--arena.retained_count] : NULL;
    lock_release(&arena_lock);
    if (segment == NULL) return;
    os_unmap(segment, SEGMENT_SIZE);
  }
}

/* ---- purge pacing ----
 * A program that frees much and allocates it again at intervals longer than
 * the purge delay (the seeds' loader: every record freed, then loaded
 * again) pays for each purge with a fault per page when it refills, and
 * each refault makes its memory manager slower than one that never gives
 * memory back. So when slices purged for good are taken again within
 * REFAULT_WINDOW_DELAYS of their purge (or a class page carves into the
 * tail it gave back: heap.c, TAIL_PURGED), the delay in force doubles until it
 * is twice as long as they had been free (the delay, and the time since the
 * purge), up to PURGE_PACE_MAX_SHIFT doublings (640 ms at the default 10),
 * at most once a delay (a refill takes many slices at once: one refault);
 * and it halves at a purge that comes QUIET_DELAYS with no refault. One
 * pace for the process:
 * a refault of any heap's memory, or of a segment the arena trimmed, is the
 * program's phase, not one thread's. */
#define PURGE_PACE_MAX_SHIFT  6
#define REFAULT_WINDOW_DELAYS 4
#define QUIET_DELAYS          16
/* SHOAL_PURGE_DELAY as the pacing reads it: an hour at most, so that no
 * multiple or doubling of it overflows. */
#define PURGE_DELAY_MAX_MS (3600L * 1000)
static _Atomic(unsigned) purge_pace_shift;
static _Atomic(int64_t) quiet_since_ms; /* the last refault, or the last halving */
static _Atomic(int64_t) last_raise_ms;

static long purge_delay_option(void) {
  long delay = option(SHOAL_OPTION_PURGE_DELAY);
  return delay < PURGE_DELAY_MAX_MS ? delay : PURGE_DELAY_MAX_MS;
}

long purge_delay(void) {
  return purge_delay_option() << atomic_load_explicit(&purge_pace_shift, memory_order_relaxed);
}

long purge_wait(long delays) {
  long wait = delays * purge_delay_option(), delay = purge_delay();
  return wait > delay ? wait : delay;
}

void purge_note_refault(int64_t purged_ms) {
  int64_t now = os_now_ms();
  if (now - purged_ms >= REFAULT_WINDOW_DELAYS * purge_delay()) return;
  atomic_store_explicit(&quiet_since_ms, now, memory_order_relaxed);
  int64_t raised = atomic_load_explicit(&last_raise_ms, memory_order_relaxed);
  unsigned shift = atomic_load_explicit(&purge_pace_shift, memory_order_relaxed);
  long delay = purge_delay();
  if (shift >= PURGE_PACE_MAX_SHIFT || now - raised < delay) return;
  int64_t wanted = 2 * (delay + (now - purged_ms));
  do shift++;
  while (shift < PURGE_PACE_MAX_SHIFT && (purge_delay_option() << shift) < wanted);
  /* Racing threads: one of them raises it. */
  if (atomic_compare_exchange_strong_explicit(&last_raise_ms, &raised, now, memory_order_relaxed,
                                              memory_order_relaxed))
    atomic_store_explicit(&purge_pace_shift, shift, memory_order_relaxed);
}

void purge_note_purge(int64_t now) {
  unsigned shift = atomic_load_explicit(&purge_pace_shift, memory_order_relaxed);
  if (shift == 0 || now - atomic_load_explicit(&quiet_since_ms, memory_order_relaxed) <
                        QUIET_DELAYS * purge_delay())
    return;
  atomic_compare_exchange_strong_explicit(&purge_pace_shift, &shift, shift - 1,
                                          memory_order_relaxed, memory_order_relaxed);
  atomic_store_explicit(&quiet_since_ms, now, memory_order_relaxed); /* next halving: as long */
}

/* Purge a whole empty segment for good. */
static void segment_purge_all(shoal_segment_t *segment) {
  uint64_t dirty = segment->dirty_slices & ~SLICE_HEADER_BITS;
  if (dirty == 0) return;
  segment_note_purged(segment, dirty, os_now_ms());
  size_t first = (size_t)__builtin_ctzll(dirty);
  size_t last = 63 - (size_t)__builtin_clzll(dirty);
  uint8_t *start = (uint8_t *)segment + first * SLICE_SIZE;
  os_purge(start, (last - first + 1) * SLICE_SIZE);
  os_commit_note(-(ptrdiff_t)(bit_count(dirty) * SLICE_SIZE));
  segment->dirty_slices = SLICE_HEADER_BITS;
  segment->lazy_slices = 0;
}

static void arena_trim_schedule(int64_t now) { /* (arena) */
  purge_deadline_push(&arena_purge_at_ms, &arena.purge_latest_ms, now,
                      purge_wait(ARENA_TRIM_DELAYS));
}

bool arena_has_cached(void) {
  return atomic_load_explicit(&arena.has_cached, memory_order_relaxed);
}

/* An empty segment: kept as it is, so that a program that frees a lot and
 * allocates again soon (a new thread, the next phase) finds its memory
 * without faulting it in; once it has stayed in the cache through a trim it
 * is purged for good, and the cache trimmed to ARENA_CACHED_CLEAN of them
 * (arena_cache_trim). Not purged lazily meanwhile:
 * MADV_FREE walks the page tables, and each page written again takes a
 * dirty-bit assist; freeing and refilling 160 MiB ran twice as slow so. */
void arena_segment_release(shoal_segment_t *segment) {
  segment->free_slices = SLICES_ALL & ~SLICE_HEADER_BITS;
  atomic_fetch_sub_explicit(&stat_segments, 1, memory_order_relaxed);
  bool keep = option(SHOAL_OPTION_PURGE_DELAY) > 0;
  if (!keep) segment_purge_all(segment);
  lock_acquire(&arena_lock);
  if (arena.cached_count < (keep ? ARENA_CACHED_SEGMENTS : ARENA_CACHED_CLEAN)) {
    arena.cached[arena.cached_count++] = segment;
    atomic_store_explicit(&arena.has_cached, true, memory_order_relaxed);
    segment = NULL;
    if (keep) {
      arena.released_ms = arena.drawn_since_ms = os_now_ms();
      arena.drawn = 0;
      arena_trim_schedule(arena.released_ms);
    }
  }
  lock_release(&arena_lock);
  if (segment != NULL) segment_retire(segment, false);
}

/* A trim that comes due while heaps take the cache's segments back, one
 * after another, waits one delay more, at most this many times in a row:
 * the segments not reached yet are about to be used, and purged, each of
 * their OS pages faults again. The seeds' loader (every record freed, then
 * loaded again) regrows 35 MB in 130 ms against a trim delay of 100 ms; a
 * busy neighbour thread's slow path ran the trim, and the load faulted
 * 11,000 times (tcmalloc 8,900) and took 1.2 times as long as alone. Only
 * while the draw, at its pace since the last release (or put-off), would
 * take the rest before the put-offs run out: threads that each take a
 * segment after a long pause (a program that freed all it had) leave the
 * rest to be trimmed at once. At most ARENA_TRIMS_PUT_OFF (internal.h). */

static bool arena_trim_put_off(int64_t now) { /* (arena) */
  long delay = purge_delay();
  int64_t pace_window = (int64_t)(ARENA_TRIMS_PUT_OFF - arena.trims_put_off) * delay;
  if (arena.drawn == 0 || arena.cached_count == 0 || now - arena.taken_ms >= delay ||
      arena.trims_put_off >= ARENA_TRIMS_PUT_OFF ||
      (int64_t)arena.cached_count * (now - arena.drawn_since_ms) >
          (int64_t)arena.drawn * pace_window)
    return false;
  arena.trims_put_off++;
  arena.drawn_since_ms = now;
  arena.drawn = 0;
  atomic_store_explicit(&arena_purge_at_ms, now + delay, memory_order_relaxed);
  return true;
}

/* Once the trim is due: the segments cached before the last trim have
 * stayed unused through a delay; they are purged for good, and all but
 * ARENA_CACHED_CLEAN of them unmapped. Those cached since are spared until
 * the next trim, unless none was cached for two delays (as heap.c's
 * heap_purge_due): with threads waiting for a core, the delay on the clock
 * passes while they are still using them. Put off while heaps draw the
 * cache down (arena_trim_put_off): a segment taken within the last delay,
 * and at that pace the rest taken soon. With force, unmap them all. */
void arena_cache_trim(bool force) {
  int64_t due = atomic_load_explicit(&arena_purge_at_ms, memory_order_relaxed);
  int64_t now = os_now_ms();
  if (!force && (due == 0 || now < due)) return;
  shoal_segment_t *unmapped[ARENA_CACHED_SEGMENTS];
  size_t unmapped_count = 0;
  lock_acquire(&arena_lock);
  if (!force && arena_trim_put_off(now)) {
    lock_release(&arena_lock);
    return;
  }
  arena.trims_put_off = 0;
  atomic_store_explicit(&arena_purge_at_ms, 0, memory_order_relaxed);
  bool quiet = force || now - arena.released_ms >= 2 * purge_delay();
  size_t old = quiet ? arena.cached_count : arena.cached_old;
  size_t keep = force ? 0 : (old < ARENA_CACHED_CLEAN ? old : ARENA_CACHED_CLEAN);
  for (size_t i = keep; i < old; i++) unmapped[unmapped_count++] = arena.cached[i];
  memmove(&arena.cached[keep], &arena.cached[old],
          (arena.cached_count - old) * sizeof arena.cached[0]);
  arena.cached_count -= old - keep;
  atomic_store_explicit(&arena.has_cached, arena.cached_count > 0, memory_order_relaxed);
  for (size_t i = 0; i < keep; i++) segment_purge_all(arena.cached[i]);
  if (old > 0) purge_note_purge(now);
  if (arena.cached_count > keep) arena_trim_schedule(now); /* the spared ones, next time */
  arena.cached_old = arena.cached_count;
  lock_release(&arena_lock);
  for (size_t i = 0; i < unmapped_count; i++) segment_retire(unmapped[i], force);
  if (force) arena_retained_unmap();
}

_Static_assert(offsetof(shoal_heap_t, outbox) <= 4096,
               "what every thread writes of its heap fits in one OS page");

static shoal_heap_t *heap_carve(void) {
  /* Page-aligned: the fields every thread writes stay in the heap's first
   * page (internal.h), not across two. */
  size_t page = os_page_size();
  size_t size = (sizeof(shoal_heap_t) + page - 1) & ~(page - 1);
  if (arena.heap_chunk_left < size) {
    uint8_t *chunk = os_map_aligned(HEAP_CHUNK_SIZE, os_page_size());
    if (chunk == NULL) return NULL;
    os_commit_note((ptrdiff_t)HEAP_CHUNK_SIZE);
    arena.heap_chunk = chunk;
    arena.heap_chunk_left = HEAP_CHUNK_SIZE;
  }
  shoal_heap_t *heap = (shoal_heap_t *)arena.heap_chunk;
  arena.heap_chunk += size;
  arena.heap_chunk_left -= size;
  heap->next_registered = atomic_load_explicit(&arena.registered, memory_order_relaxed);
  atomic_store_explicit(&arena.registered, heap, memory_order_release);
  atomic_fetch_add_explicit(&arena.heap_count, 1, memory_order_relaxed);
  return heap;
}

static void heaps_live_add(ptrdiff_t change) {
  size_t live = atomic_load_explicit(&arena.heaps_live, memory_order_relaxed);
  atomic_store_explicit(&arena.heaps_live, live + (size_t)change, memory_order_relaxed);
}

size_t arena_heaps_live(void) {
  return atomic_load_explicit(&arena.heaps_live, memory_order_relaxed);
}

/* The next abandoned heap, or a new one; NULL when out of memory. */
static shoal_heap_t *heap_pop_or_carve(void) {
  lock_acquire(&arena_lock);
  shoal_heap_t *heap;
  for (;;) {
    heap = arena.abandoned;
    if (heap == NULL) {
      heap = heap_carve();
      break;
    }
    arena.abandoned = heap->next_abandoned;
    arena.abandoned_count--;
    heap->next_abandoned = NULL;
    if (atomic_load_explicit(&heap->state, memory_order_relaxed) != HEAP_ORPHAN) break;
  }
  if (heap != NULL) heaps_live_add(1);
  lock_release(&arena_lock);
  return heap;
}

/* A heap for a starting thread: a dead thread's heap when there is one (its
 * pages get used again), a new one otherwise (zeroed, registered: the heap
 * layer sets it up). */
shoal_heap_t *arena_heap_new_or_adopt(bool *adopted) {
  *adopted = false;
  for (;;) {
    shoal_heap_t *heap = heap_pop_or_carve();
    if (heap == NULL) return NULL;
    if (atomic_load_explicit(&heap->state, memory_order_relaxed) == HEAP_LIVE) return heap;
    /* Wait out a thread servicing it: that is a short, bounded drain. In a
     * fork child that thread is gone and the heap an orphan: take another. */
    for (int round = 0;; round++) {
      int expected = HEAP_ABANDONED;
      if (atomic_compare_exchange_weak_explicit(&heap->state, &expected, HEAP_LIVE,
                                                memory_order_seq_cst, memory_order_relaxed)) {
        *adopted = true;
        return heap;
      }
      if (expected == HEAP_ORPHAN) break;
      if (round > 16) os_yield();
    }
  }
}

void arena_heap_abandoned(shoal_heap_t *heap) {
  lock_acquire(&arena_lock);
  heap->next_abandoned = arena.abandoned;
  arena.abandoned = heap;
  arena.abandoned_count++;
  heaps_live_add(-1);
  lock_release(&arena_lock);
}

/* The first dead thread's heap that can be taken for service; it goes to
 * the end of the list, so that the next taker tries another, and a heap
 * that gave its memory away is adopted last. */
shoal_heap_t *arena_abandoned_to_service(void) {
  enum { TRIES = 4 }; /* heaps being serviced are passed over, a few of them */
  shoal_heap_t *found = NULL;
  lock_acquire(&arena_lock);
  for (int tries = 0; tries < TRIES && arena.abandoned != NULL; tries++) {
    shoal_heap_t *heap = arena.abandoned;
    if (heap->next_abandoned != NULL) {
      arena.abandoned = heap->next_abandoned;
      heap->next_abandoned = NULL;
      shoal_heap_t *last = arena.abandoned;
      while (last->next_abandoned != NULL) last = last->next_abandoned;
      last->next_abandoned = heap;
    }
    int expected = HEAP_ABANDONED;
    if (atomic_compare_exchange_strong_explicit(&heap->state, &expected, HEAP_SERVICING,
                                                memory_order_seq_cst, memory_order_relaxed)) {
      found = heap;
      break;
    }
  }
  lock_release(&arena_lock);
  return found;
}

void arena_for_each_heap(void (*visit)(shoal_heap_t *heap, void *context), void *context) {
  for (shoal_heap_t *heap = atomic_load_explicit(&arena.registered, memory_order_acquire);
       heap != NULL; heap = heap->next_registered)
    visit(heap, context);
}

size_t arena_heap_count(size_t *abandoned) {
  lock_acquire(&arena_lock);
  *abandoned = arena.abandoned_count;
  lock_release(&arena_lock);
  return atomic_load_explicit(&arena.heap_count, memory_order_relaxed);
}

/* ---- fork: the child must be able to allocate at once ---- */

void arena_register_for_fork(void) {
  lock_register_for_fork(&arena_lock, LOCK_RANK_ARENA);
}

static void orphan_other_heaps(shoal_heap_t *heap, void *context) {
  if (heap == context) return;
  int state = atomic_load_explicit(&heap->state, memory_order_relaxed);
  if (state == HEAP_LIVE || state == HEAP_SERVICING) /* abandoned ones were quiet: keep them */
    atomic_store_explicit(&heap->state, HEAP_ORPHAN, memory_order_relaxed);
}

/* In the child only this thread survives. Other threads' heaps may have
 * been mid-update: never adopt or service them (their memory stays with
 * them; a child that lives on leaks it rather than risk corruption). */
void arena_fork_child(shoal_heap_t *survivor) {
  arena_for_each_heap(orphan_other_heaps, survivor);
  atomic_store_explicit(&arena.heaps_live, survivor != NULL, memory_order_relaxed);
}
