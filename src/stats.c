/* stats.c — process figures summed from the heaps' own counters, and the
 * collect entry point. Counters are written by their heap's thread with
 * plain stores; summing them needs no lock and stops nobody. */
#include "internal.h"

#include <string.h>

heap_counters_t orphan_counters;

static size_t counter_read(_Atomic(size_t) *counter) {
  return atomic_load_explicit(counter, memory_order_relaxed);
}

/* Per heap a difference may be negative (another thread freed what this one
 * allocated); the sum over heaps is not, and wrap-around cancels out. */
static void add_counters(shoal_stats_t *stats, heap_counters_t *c) {
  for (int slot = 0; slot < COUNTER_SLOTS; slot++) {
    size_t live = counter_read(&c->allocated[slot]) - counter_read(&c->freed[slot]);
    stats->live_blocks += live;
    if (slot < CLASS_COUNT) stats->live_bytes += live * class_block_size[slot];
  }
  stats->live_bytes +=
      counter_read(&c->outsized_allocated_bytes) - counter_read(&c->outsized_freed_bytes);
  stats->remote_frees += counter_read(&c->remote_frees);
}

static void add_heap(shoal_heap_t *heap, void *context) {
  add_counters(context, &heap->counters);
}

exported void shoal_stats_get(shoal_stats_t *stats) {
  memset(stats, 0, sizeof *stats);
  arena_for_each_heap(add_heap, stats);
  add_counters(stats, &orphan_counters);
  stats->os_reserved_bytes = os_reserved_bytes();
  stats->os_committed_bytes = os_committed_bytes();
  stats->os_peak_committed_bytes = os_peak_committed_bytes();
  stats->segments = atomic_load_explicit(&stat_segments, memory_order_relaxed);
  stats->pages = atomic_load_explicit(&stat_pages, memory_order_relaxed);
  stats->huge_blocks = atomic_load_explicit(&stat_huge_blocks, memory_order_relaxed);
  stats->heaps = arena_heap_count(&stats->heaps_abandoned);
  stats->purges = os_purge_count();
  stats->purged_bytes = os_purged_bytes();
}

exported void shoal_collect(bool force) {
  shoal_heap_t *heap = thread_heap;
  if (heap != &heap_empty) heap_collect(heap, force);
  arena_service_all_abandoned();
  huge_cache_trim(force);
  arena_cache_trim(force);
}
