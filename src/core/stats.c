/* stats.c — process figures summed from the heaps' own counters, and
 * collection on demand (shoal_stats_get and shoal_collect's core).
 *
 * Counters are written by their heap's thread with plain (relaxed) stores
 * (counter_add, internal.h); summing them needs no lock on the heaps and
 * stops nobody, only the arena lock to walk the heap registry. The figures
 * come from the X-macro lists in shoal.h (SHOAL_STATS_FIELDS,
 * SHOAL_CLASS_STATS_FIELDS); the diagnostics print them (diag/report.c). */
#include "core/internal.h"

#include <string.h>

_Static_assert(SHOAL_STATS_SIZE_CLASSES == CLASS_COUNT,
               "shoal.h's SHOAL_STATS_SIZE_CLASSES must follow CLASS_COUNT");
_Static_assert(SHOAL_LARGE_MAX == LARGE_MAX, "shoal.h's SHOAL_LARGE_MAX must follow LARGE_MAX");

/* ---- summing ---- */

/* The counters of every heap added up, per class slot up to CLASS_HUGE. */
typedef struct counter_sums_s {
  size_t allocated[CLASS_HUGE + 1];
  size_t freed[CLASS_HUGE + 1];
  size_t outsized_allocated_bytes, outsized_freed_bytes;
  size_t remote_frees, slow_paths;
} counter_sums_t;

static size_t counter_read(_Atomic(size_t) *counter) {
  return atomic_load_explicit(counter, memory_order_relaxed);
}

/* Per heap, freed may exceed allocated (another thread freed what this one
 * allocated); only the sums over all heaps mean something. */
static void sums_add(counter_sums_t *sums, heap_counters_t *counters) {
  for (int slot = 0; slot <= CLASS_HUGE; slot++) {
    sums->allocated[slot] += counter_read(&counters->allocated[slot]);
    sums->freed[slot] += counter_read(&counters->freed[slot]);
  }
  sums->outsized_allocated_bytes += counter_read(&counters->outsized_allocated_bytes);
  sums->outsized_freed_bytes += counter_read(&counters->outsized_freed_bytes);
  sums->remote_frees += counter_read(&counters->remote_frees);
  sums->slow_paths += counter_read(&counters->slow_paths);
}

static void sums_add_heap(shoal_heap_t *heap, void *sums) {
  sums_add(sums, &heap->counters);
}

typedef struct page_sums_s {
  size_t taken, given;
} page_sums_t;

static void page_sums_add(shoal_heap_t *heap, void *context) {
  page_sums_t *sums = context;
  sums->taken += atomic_load_explicit(&heap->pages_taken, memory_order_relaxed);
  sums->given += atomic_load_explicit(&heap->pages_given, memory_order_relaxed);
}

/* A snapshot taken while threads run may see a free before the allocation
 * it undoes (they were counted in different heaps): live is then 0, not a
 * wrapped-around huge number. */
static size_t difference_or_zero(size_t larger, size_t smaller) {
  return larger > smaller ? larger - smaller : 0;
}

static void class_row_fill(shoal_class_stats_t *row, size_t block_size, size_t allocated,
                           size_t freed) {
  row->block_size = block_size;
  row->allocated = allocated;
  row->freed = freed;
  row->live = difference_or_zero(allocated, freed);
}

/* Totals over the rows, so that live_blocks is the sum of the lives shown. */
static void totals_add_row(shoal_stats_t *stats, const shoal_class_stats_t *row) {
  stats->allocated_blocks += row->allocated;
  stats->freed_blocks += row->freed;
  stats->live_blocks += row->live;
  stats->live_bytes += row->live * row->block_size;
}

static void counted_figures_fill(shoal_stats_t *stats) {
  counter_sums_t sums;
  memset(&sums, 0, sizeof sums);
  /* Off, orphan frees are still counted (alloc.c adds them directly) but
   * nothing else is: leave every counted figure at 0 rather than half. */
  if (SHOAL_STATISTICS) {
    arena_for_each_heap(sums_add_heap, &sums);
    sums_add(&sums, &orphan_counters);
  }
  for (int size_class = 0; size_class < CLASS_COUNT; size_class++) {
    shoal_class_stats_t *row = &stats->classes[size_class];
    class_row_fill(row, class_block_size[size_class], sums.allocated[size_class],
                   sums.freed[size_class]);
    totals_add_row(stats, row);
  }
  class_row_fill(&stats->large, 0, sums.allocated[CLASS_LARGE], sums.freed[CLASS_LARGE]);
  class_row_fill(&stats->huge, 0, sums.allocated[CLASS_HUGE], sums.freed[CLASS_HUGE]);
  totals_add_row(stats, &stats->large);
  totals_add_row(stats, &stats->huge);
  stats->outsized_live_bytes =
      difference_or_zero(sums.outsized_allocated_bytes, sums.outsized_freed_bytes);
  stats->live_bytes += stats->outsized_live_bytes;
  stats->remote_frees = sums.remote_frees;
  stats->slow_paths = sums.slow_paths;
  stats->counters_enabled = SHOAL_STATISTICS;
}

void stats_fill(shoal_stats_t *stats) {
  memset(stats, 0, sizeof *stats);
  /* This thread's latest counts are in its pages: bring them in. Another
   * running thread's join when it next takes a slow path or exits. */
  shoal_heap_t *own = thread_heap_own();
  if (own != &heap_empty) heap_fold_counters(own);
  counted_figures_fill(stats);
  stats->os_reserved_bytes = os_reserved_bytes();
  stats->os_committed_bytes = os_committed_bytes();
  stats->os_peak_committed_bytes = os_peak_committed_bytes();
  stats->segments = atomic_load_explicit(&stat_segments, memory_order_relaxed);
  page_sums_t pages = {0, 0};
  arena_for_each_heap(page_sums_add, &pages);
  stats->pages = difference_or_zero(pages.taken, pages.given);
  stats->huge_blocks = atomic_load_explicit(&stat_huge_blocks, memory_order_relaxed);
  stats->heaps = arena_heap_count(&stats->heaps_abandoned);
  stats->purges = os_purge_count();
  stats->purged_bytes = os_purged_bytes();
  stats->purge_delay_ms = (size_t)purge_delay();
}

void stats_collect(bool force) {
  shoal_heap_t *heap = thread_heap_own();
  if (heap != &heap_empty) heap_collect(heap, force);
  heap_service_all_abandoned();
  huge_cache_trim(force);
  arena_cache_trim(force);
}
