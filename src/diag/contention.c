/* contention.c — SHOAL_CONTENTION, after FastMM's LogLockContention (seed
 * 003): where threads waited for each other or left their fast path, counted
 * by call stack and memory function, reported at exit most frequent first.
 *
 * Three events cost a thread time another thread caused: a wait for a lock
 * (the arena's, the huge cache's), a malloc that went to the slow path for
 * fresh pages, a free of a block another thread owns. Each event captures
 * its call stack; the counts live in a fixed open-addressed table keyed by a
 * hash of (event, function, stack), which any thread fills with atomics and
 * none waits on (a full table counts the rest as dropped). The first thread
 * to claim a slot writes the stack it saw there; the report reads them after
 * the program's threads are done. */
#include "diag/diag.h"

#include <stdlib.h>
#include <string.h>

#define CONTENTION_SLOTS 4096

static const char *const event_names[] = {"", "lock wait", "slow path", "remote free"};

typedef struct contention_slot_s {
  _Atomic(uint64_t) key; /* hash of event, function and stack; 0: free */
  _Atomic(size_t) count;
  _Atomic(bool) written; /* what follows is there to read */
  contention_event_t event;
  const char *function; /* the memory function the program called */
  caller_t caller;      /* the return address into the program (names Pascal's calls) */
  site_t site;
} contention_slot_t;

static contention_slot_t contention_slots[CONTENTION_SLOTS];
static _Atomic(size_t) contention_dropped;

static uint64_t contention_key(contention_event_t event, const char *function, const site_t *site) {
  uint64_t hash = 0xcbf29ce484222325u ^ (uint64_t)event;
  hash = (hash ^ (uint64_t)(uintptr_t)function) * 0x100000001b3u;
  for (int i = 0; i < SITE_FRAMES; i++)
    hash = (hash ^ (uint64_t)(uintptr_t)site->frames[i]) * 0x9E3779B97F4A7C15u;
  hash ^= hash >> 29;
  return hash | 1; /* never 0, the free slot's key */
}

void contention_note(contention_event_t event, const char *function, caller_t caller,
                     size_t times) {
  site_t site;
  site_capture(&site, caller);
  uint64_t key = contention_key(event, function, &site);
  size_t start = (size_t)(key >> 52);
  for (size_t i = 0; i < CONTENTION_SLOTS; i++) {
    contention_slot_t *slot = &contention_slots[(start + i) % CONTENTION_SLOTS];
    uint64_t seen = atomic_load_explicit(&slot->key, memory_order_acquire);
    if (seen == 0 && atomic_compare_exchange_strong_explicit(
                         &slot->key, &seen, key, memory_order_acq_rel, memory_order_acquire)) {
      slot->event = event;
      slot->function = function;
      slot->caller = caller;
      slot->site = site;
      atomic_store_explicit(&slot->written, true, memory_order_release);
      seen = key;
    }
    if (seen == key) {
      atomic_fetch_add_explicit(&slot->count, times, memory_order_relaxed);
      return;
    }
  }
  atomic_fetch_add_explicit(&contention_dropped, times, memory_order_relaxed);
}

static int slot_by_count(const void *a, const void *b) {
  const contention_slot_t *x = *(const contention_slot_t *const *)a;
  const contention_slot_t *y = *(const contention_slot_t *const *)b;
  size_t count_x = atomic_load_explicit(&x->count, memory_order_relaxed);
  size_t count_y = atomic_load_explicit(&y->count, memory_order_relaxed);
  if (count_x != count_y) return count_x > count_y ? -1 : 1;
  return x < y ? -1 : x > y;
}

void contention_report(void) {
  static contention_slot_t *used_slots[CONTENTION_SLOTS]; /* at exit, once */
  size_t used = 0, total = 0;
  for (size_t i = 0; i < CONTENTION_SLOTS; i++) {
    contention_slot_t *slot = &contention_slots[i];
    if (!atomic_load_explicit(&slot->written, memory_order_acquire)) continue;
    used_slots[used++] = slot;
    total += atomic_load_explicit(&slot->count, memory_order_relaxed);
  }
  qsort(used_slots, used, sizeof used_slots[0], slot_by_count);
  output_error_line("shoal: contention: %zu events at %zu call stacks, most frequent first%s%s",
                    total, used, output_to_file() ? "; the report is in " : "",
                    output_to_file() ? output_file_path() : "");
  output_report_line("%12s  %-11s  %-13s  %s", "count", "event", "function", "call stack");
  char site[1536];
  for (size_t i = 0; i < used; i++) {
    const contention_slot_t *slot = used_slots[i];
    size_t count = atomic_load_explicit(&slot->count, memory_order_relaxed);
    site_format(&slot->site, site, sizeof site);
    const char *function = function_as_called(slot->function, slot->caller);
    output_report_line("%12zu  %-11s  %-13s  %s", count, event_names[slot->event], function, site);
    if (i < 3)
      output_summary_line("shoal:   %zu %s%s in %s at %s", count, event_names[slot->event],
                          count == 1 ? "" : "s", function, site);
  }
  size_t dropped = atomic_load_explicit(&contention_dropped, memory_order_relaxed);
  if (dropped != 0)
    output_report_line("%12zu  events at stacks the table had no room for", dropped);
  site_notes_write();
}
