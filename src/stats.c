/* stats.c — process figures summed from the heaps' own counters, the
 * SHOAL_STATS report at exit, and the collect entry point.
 *
 * Counters are written by their heap's thread with plain (relaxed) stores
 * (counter_add, internal.h); summing them needs no lock on the heaps and
 * stops nobody, only the arena lock to walk the heap registry. The figures
 * and both printers come from the two X-macro lists in shoal.h
 * (SHOAL_STATS_FIELDS, SHOAL_CLASS_STATS_FIELDS), so a figure added there
 * appears in the struct, the table and the JSON at once.
 *
 * The report runs from a destructor, so it comes after main returns or
 * exit() is called (not after _exit or a crash), under LD_PRELOAD and when
 * linked alike. It must not allocate: a malloc from here would change the
 * figures being printed and could run into a heap being torn down. So
 * lines are formatted with snprintf into a buffer on the stack and written
 * with os_write_stderr, as message() does, and SHOAL_STATS is read with
 * getenv. */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

_Static_assert(SHOAL_STATS_SIZE_CLASSES == CLASS_COUNT,
               "shoal.h's SHOAL_STATS_SIZE_CLASSES must follow CLASS_COUNT");

heap_counters_t orphan_counters;

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

exported void shoal_stats_get(shoal_stats_t *stats) {
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
  stats->pages = atomic_load_explicit(&stat_pages, memory_order_relaxed);
  stats->huge_blocks = atomic_load_explicit(&stat_huge_blocks, memory_order_relaxed);
  stats->heaps = arena_heap_count(&stats->heaps_abandoned);
  stats->purges = os_purge_count();
  stats->purged_bytes = os_purged_bytes();
}

exported shoal_stats_t shoal_stats(void) {
  shoal_stats_t stats;
  shoal_stats_get(&stats);
  return stats;
}

exported void shoal_collect(bool force) {
  if (force) diag_collect();
  shoal_heap_t *heap = thread_heap_own();
  if (heap != &heap_empty) heap_collect(heap, force);
  arena_service_all_abandoned();
  huge_cache_trim(force);
  arena_cache_trim(force);
}

/* ---- the report: text gathered on the stack, written in a few calls ---- */

typedef struct report_s {
  char text[4096];
  size_t length;
} report_t;

static void report_flush(report_t *report) {
  os_write_stderr(report->text, report->length);
  report->length = 0;
}

/* Lines are far shorter than the buffer: one that does not fit in what is
 * left goes into an emptied buffer, cut if it still does not fit. */
__attribute__((format(printf, 2, 3))) static void report_printf(report_t *report,
                                                                const char *format, ...) {
  for (int attempt = 0; attempt < 2; attempt++) {
    size_t room = sizeof report->text - report->length;
    va_list args;
    va_start(args, format);
    int written = vsnprintf(report->text + report->length, room, format, args);
    va_end(args);
    if (written < 0) return;
    if ((size_t)written < room) {
      report->length += (size_t)written;
      return;
    }
    if (report->length == 0) {
      report->length = sizeof report->text - 1;
      return;
    }
    report_flush(report);
  }
}

/* "812 B", "3.1 KiB", "12.0 MiB": integer arithmetic, because printf of a
 * double may allocate. */
static const char *bytes_readable(char *out, size_t out_size, size_t bytes) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t unit = 0, scale = 1;
  while (unit + 1 < sizeof units / sizeof units[0] && bytes / scale >= 1024) {
    scale *= 1024;
    unit++;
  }
  if (unit == 0)
    snprintf(out, out_size, "%zu B", bytes);
  else
    snprintf(out, out_size, "%zu.%zu %s", bytes / scale, bytes % scale * 10 / scale, units[unit]);
  return out;
}

enum { KIND_COUNT, KIND_BYTES }; /* the kinds of the lists in shoal.h */
#define STATS_KIND(kind) KIND_##kind

static void table_figure(report_t *report, const char *name, int kind, size_t value,
                         const char *description) {
  char readable[32] = "";
  if (kind == KIND_BYTES && value >= 1024) bytes_readable(readable, sizeof readable, value);
  report_printf(report, "  %-24s %14zu %10s  %s\n", name, value, readable, description);
}

static void table_class_row(report_t *report, const char *label, const shoal_class_stats_t *row) {
  report_printf(report, "  %10s", label);
#define CLASS_CELL(name, kind, description) report_printf(report, " %14zu", row->name);
  SHOAL_CLASS_STATS_FIELDS(CLASS_CELL)
#undef CLASS_CELL
  report_printf(report, "\n");
}

static void table_print(report_t *report, const shoal_stats_t *stats) {
  report_printf(report, "shoal: statistics of process %ld at exit\n", (long)getpid());
#define FIGURE_LINE(name, kind, description)                                                       \
  table_figure(report, #name, STATS_KIND(kind), stats->name, description);
  SHOAL_STATS_FIELDS(FIGURE_LINE)
#undef FIGURE_LINE
  report_printf(report, "  %10s", "size class");
#define CLASS_HEADER(name, kind, description) report_printf(report, " %14s", #name);
  SHOAL_CLASS_STATS_FIELDS(CLASS_HEADER)
#undef CLASS_HEADER
  report_printf(report, "\n");
  for (int size_class = 0; size_class < CLASS_COUNT; size_class++) {
    if (stats->classes[size_class].allocated == 0) continue; /* 80 rows of zeros help nobody */
    char label[16];
    snprintf(label, sizeof label, "%d", size_class);
    table_class_row(report, label, &stats->classes[size_class]);
  }
  table_class_row(report, "large", &stats->large);
  table_class_row(report, "huge", &stats->huge);
  report_printf(report, "  (size classes that never held a block are left out)\n");
}

/* Every field of one row, as the members of a JSON object. */
static void json_class_members(report_t *report, const shoal_class_stats_t *row) {
  const char *separator = "";
#define CLASS_MEMBER(name, kind, description)                                                      \
  report_printf(report, "%s\"" #name "\": %zu", separator, row->name);                             \
  separator = ", ";
  SHOAL_CLASS_STATS_FIELDS(CLASS_MEMBER)
#undef CLASS_MEMBER
}

static void json_print(report_t *report, const shoal_stats_t *stats) {
  report_printf(report, "{\n  \"pid\": %ld,\n", (long)getpid());
#define FIGURE_MEMBER(name, kind, description)                                                     \
  report_printf(report, "  \"" #name "\": %zu,\n", stats->name);
  SHOAL_STATS_FIELDS(FIGURE_MEMBER)
#undef FIGURE_MEMBER
  report_printf(report, "  \"classes\": [\n");
  for (int size_class = 0; size_class < CLASS_COUNT; size_class++) {
    report_printf(report, "    {\"class\": %d, ", size_class);
    json_class_members(report, &stats->classes[size_class]);
    report_printf(report, "}%s\n", size_class + 1 < CLASS_COUNT ? "," : "");
  }
  report_printf(report, "  ],\n  \"large\": {");
  json_class_members(report, &stats->large);
  report_printf(report, "},\n  \"huge\": {");
  json_class_members(report, &stats->huge);
  report_printf(report, "}\n}\n");
}

/* ---- SHOAL_STATS: read at start, acted on at exit ---- */

typedef enum report_format_e {
  REPORT_UNREAD, /* the constructor has not run (a host that skips them) */
  REPORT_NONE,
  REPORT_TABLE,
  REPORT_JSON,
} report_format_t;

static report_format_t report_format;

/* The spellings of the options' booleans (options.c), plus table and json. */
static report_format_t report_format_read(void) {
  const char *text = getenv("SHOAL_STATS");
  long on;
  if (text == NULL || *text == '\0') return REPORT_NONE;
  if (strcasecmp(text, "json") == 0) return REPORT_JSON;
  if (strcasecmp(text, "table") == 0) return REPORT_TABLE;
  if (option_parse_bool(text, &on)) return on ? REPORT_TABLE : REPORT_NONE;
  message("warning: SHOAL_STATS=%s is not a valid value (expected 0, 1 or json); using 0", text);
  return REPORT_NONE;
}

/* At start, like the options, so that a bad value is reported at once and
 * a program's own setenv later changes nothing. */
__attribute__((constructor)) static void stats_report_init(void) {
  report_format = report_format_read();
  if (report_format != REPORT_NONE) os_keep_stderr();
}

__attribute__((destructor)) static void stats_report_at_exit(void) {
  if (report_format == REPORT_UNREAD) report_format = report_format_read();
  if (report_format == REPORT_NONE) return;
  shoal_stats_t stats;
  shoal_stats_get(&stats);
  report_t report;
  report.length = 0;
  if (report_format == REPORT_JSON)
    json_print(&report, &stats);
  else
    table_print(&report, &stats);
  report_flush(&report);
}
