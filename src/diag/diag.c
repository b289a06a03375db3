/* diag.c — the diagnostics' way in: which modes are on, the interposition
 * around the core, the contention log, and the reports at exit (call sites
 * are walk.c's).
 *
 * Leak tracking, checked mode and the contention log must see every malloc
 * and free, yet cost nothing when off. They get there without a test on the
 * fast paths: while a mode is on, a thread's thread_heap stays heap_empty
 * (its real heap waits in thread_heap_parked), so every malloc misses the
 * direct page and every free fails the ownership test, and both end in the
 * few slow places that ask diag_interposes(). Around each core call we put
 * the real heap back (core_enter) and set diag_inside, so the core runs as
 * usual and whatever the unwinder allocates goes straight to it. */
#define _GNU_SOURCE
#include "diag/diag.h"
#include "diag/trace_format.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

_Atomic(int) diag_modes;
__attribute__((tls_model("initial-exec"))) _Thread_local bool diag_inside;
__attribute__((tls_model("initial-exec"))) _Thread_local int diag_locks_held;

/* ---- entering and leaving the core ---- */

/* Where every call takes several locks (each block tracked), signals are
 * held off once for the whole call rather than at each lock (lock.c). */
static inline bool holds_signals(int modes) {
  return (modes & (DIAG_CHECK | DIAG_LEAKS_ALL)) != 0;
}

static inline void core_enter(int modes) {
  if (holds_signals(modes)) os_signals_hold();
  diag_inside = true;
  if (thread_heap_parked != NULL) {
    thread_heap = thread_heap_parked;
    thread_heap_parked = NULL;
  }
}

static inline void core_leave(int modes) {
  if (thread_heap != &heap_empty) {
    thread_heap_parked = thread_heap;
    thread_heap = &heap_empty;
  }
  diag_inside = false;
  if (holds_signals(modes)) os_signals_release();
}

/* A report's file, or -1 after saying why. */
int diag_open_output(const char *path) {
  int fd = os_open_output(path);
  if (fd < 0) message("cannot write %s: %s", path, strerror(errno));
  return fd;
}

/* The memory function by the name the program called: a Pascal program
 * calls GetMem, FreeMem, ReallocMem and AllocMem, which ShoalMM's hooks
 * turn into the C calls; the hook the call came through (caller) names it.
 * At report time only: it reads the symbol table. */
const char *function_as_called(const char *function, caller_t caller) {
  static const struct {
    const char *hook, *called;
  } pascal_hooks[] = {
      {"SHOALGETMEM", "GetMem"},     {"SHOALFREEMEMSIZE", "FreeMem"},
      {"SHOALFREEMEM", "FreeMem"},   {"SHOALREALLOCMEM", "ReallocMem"},
      {"SHOALALLOCMEM", "AllocMem"}, {"MOVEFOREIGNBLOCK", "ReallocMem"},
  };
  static const char prefix[] = "SHOALMM_$$_";
  char name[256];
  if (caller == NULL) return function;
  symbol_name((const uint8_t *)caller - 1, name, sizeof name);
  if (strncmp(name, prefix, sizeof prefix - 1) != 0) return function;
  for (size_t i = 0; i < sizeof pascal_hooks / sizeof pascal_hooks[0]; i++)
    if (strncmp(name + sizeof prefix - 1, pascal_hooks[i].hook, strlen(pascal_hooks[i].hook)) == 0)
      return pascal_hooks[i].called;
  return function;
}

/* ---- the contention log (contention.c) ---- */

/* What a core call did that the log wants to know: read before and after. */
typedef struct contention_probe_s {
  size_t lock_waits;
  const shoal_heap_t *heap;
  size_t slow_paths;
} contention_probe_t;

static void contention_probe(contention_probe_t *probe) {
  probe->lock_waits = lock_waits;
  shoal_heap_t *heap = thread_heap;
  probe->heap = heap;
  probe->slow_paths = heap == &heap_empty
                          ? 0
                          : atomic_load_explicit(&heap->counters.slow_paths, memory_order_relaxed);
}

/* A call that gave the thread its heap (a new one, or a dead thread's with
 * its counts) took no slow path of its own to count. */
static void contention_after(const contention_probe_t *before, const char *function,
                             caller_t caller) {
  contention_probe_t after;
  contention_probe(&after);
  if (after.lock_waits != before->lock_waits)
    contention_note(EVENT_LOCK_WAIT, function, caller, after.lock_waits - before->lock_waits);
  if (after.heap == before->heap && after.slow_paths > before->slow_paths)
    contention_note(EVENT_SLOW_PATH, function, caller, after.slow_paths - before->slow_paths);
}

/* ---- the interposed API ---- */

static void *core_malloc(size_t size, size_t alignment, caller_t caller) {
  return alignment == 0 ? alloc_fast(size, caller) : core_alloc_aligned(alignment, size, caller);
}

void *diag_malloc(size_t size, size_t alignment, caller_t caller) {
  int modes = diag_mode();
  core_enter(modes);
  contention_probe_t probe;
  contention_probe(&probe);
  site_t site;
  void *p;
  if (modes & DIAG_CHECK) {
    site_capture(&site, caller);
    p = check_malloc(size, alignment, &site);
  } else {
    size_t weight = 0;
    bool track = (modes & DIAG_LEAKS) && leaks_sample(size, &weight);
    if (track) site_capture(&site, caller);
    p = core_malloc(size, alignment, caller);
    if (p != NULL && track) leaks_track(p, size, weight, &site);
  }
  if ((modes & DIAG_TRACE) && p != NULL)
    trace_note(alignment != 0 ? SHOAL_TRACE_ALIGNED : SHOAL_TRACE_MALLOC, p, p, size, alignment,
               trace_next_sequence());
  if (modes & DIAG_CONTENTION)
    contention_after(&probe, alignment != 0 ? "aligned_alloc" : "malloc", caller);
  core_leave(modes);
  return p;
}

/* Whether p is a block of a heap other than this thread's. */
static bool owned_elsewhere(const void *p) {
  if (!segment_map_is_head(p)) return false;
  shoal_segment_t *segment = segment_of(p);
  return segment->kind == SEGMENT_NORMAL &&
         atomic_load_explicit(&segment->heap, memory_order_relaxed) != thread_heap;
}

static void diag_release(void *p, size_t size_hint, const char *function, caller_t caller) {
  if (p == NULL) return;
  int modes = diag_mode();
  core_enter(modes);
  contention_probe_t probe;
  contention_probe(&probe);
  if ((modes & DIAG_CONTENTION) && owned_elsewhere(p))
    contention_note(EVENT_REMOTE_FREE, function, caller, 1);
  if (modes & DIAG_TRACE) trace_note(SHOAL_TRACE_FREE, p, NULL, 0, 0, trace_next_sequence());
  if (modes & DIAG_CHECK) {
    site_t site;
    site_capture(&site, caller);
    check_free(p, size_hint, function, &site);
  } else {
    if (modes & DIAG_LEAKS) leaks_forget(p);
    free_fast(p, size_hint, caller);
  }
  if (modes & DIAG_CONTENTION) contention_after(&probe, function, caller);
  core_leave(modes);
}

void diag_free(void *p, size_t size_hint, caller_t caller) {
  diag_release(p, size_hint, size_hint != 0 ? "sized free" : "free", caller);
}

void *diag_realloc(void *p, size_t size, caller_t caller) {
  if (p == NULL) return diag_malloc(size, 0, caller);
  if (size == 0) {
    diag_release(p, 0, "realloc", caller);
    return NULL;
  }
  int modes = diag_mode();
  core_enter(modes);
  contention_probe_t probe;
  contention_probe(&probe);
  uint64_t sequence = (modes & DIAG_TRACE) ? trace_next_sequence() : 0; /* before p is freed */
  site_t site;
  void *fresh;
  if (modes & DIAG_CHECK) {
    site_capture(&site, caller);
    fresh = check_realloc(p, size, &site);
  } else {
    bool tracked = (modes & DIAG_LEAKS) && leaks_forget(p);
    size_t weight = 0;
    bool track = (modes & DIAG_LEAKS) && (leaks_sample(size, &weight) || tracked);
    if (track) site_capture(&site, caller);
    fresh = core_realloc(p, size, caller);
    if (track && (fresh != NULL || tracked))
      leaks_track(fresh != NULL ? fresh : p, size, weight == 0 ? 1 : weight, &site);
  }
  if (modes & DIAG_TRACE) trace_note(SHOAL_TRACE_REALLOC, p, fresh, size, 0, sequence);
  if (modes & DIAG_CONTENTION) contention_after(&probe, "realloc", caller);
  core_leave(modes);
  return fresh;
}

size_t diag_usable_size(const void *p, const char *function, caller_t caller) {
  int modes = diag_mode();
  core_enter(modes);
  size_t size;
  if (modes & DIAG_CHECK) {
    site_t site;
    site_capture(&site, caller);
    size = check_usable_size(p, function, &site);
  } else {
    size = core_usable_size(p, function);
  }
  core_leave(modes);
  return size;
}

/* ---- start-up, fork, exit ---- */

static bool env_is_on(const char *name, const char *value) {
  long on;
  if (value == NULL || *value == '\0') return false;
  if (option_parse_bool(value, &on)) return on != 0;
  message("warning: %s=%s is not a valid value (expected 0 or 1); using 1", name, value);
  return true;
}

/* The core's hooks (core_hooks): a thread about to lose its heap, a fork's
 * child. */
static void diag_thread_exit(void) {
  if (diag_mode() & DIAG_TRACE) trace_thread_exit();
}

static void diag_fork_child(void) {
  if (diag_mode() & DIAG_TRACE) trace_fork_child();
}

/* Inside process_init's once section: before any thread has a heap. */
void diag_start(void) {
  int modes = 0;
  const char *leaks = getenv("SHOAL_LEAKS");
  if (leaks != NULL && strcmp(leaks, "all") == 0)
    modes |= DIAG_LEAKS | DIAG_LEAKS_ALL;
  else if (env_is_on("SHOAL_LEAKS", leaks))
    modes |= DIAG_LEAKS;
  if (env_is_on("SHOAL_CHECK", getenv("SHOAL_CHECK"))) modes |= DIAG_CHECK;
  output_start();
  /* SHOAL_CONTENTION=1, or (the older form) the path of the report file */
  const char *contention = getenv("SHOAL_CONTENTION");
  long on = 0;
  if (contention != NULL && *contention != '\0' && !option_parse_bool(contention, &on)) {
    on = 1;
    if (getenv("SHOAL_REPORT_FILE") == NULL) output_start_file(contention);
  }
  if (on) modes |= DIAG_CONTENTION;
  const char *trace_path = getenv("SHOAL_TRACE");
  if (trace_path != NULL && *trace_path != '\0' && trace_init(trace_path)) modes |= DIAG_TRACE;
  if (modes & DIAG_CHECK) check_init();
  if (modes & (DIAG_LEAKS | DIAG_CHECK)) records_register_for_fork();
  if (modes & DIAG_CHECK) check_register_for_fork();
  if (modes != 0) os_keep_stderr();
  core_hooks.thread_exit = diag_thread_exit;
  core_hooks.fork_child = diag_fork_child;
  atomic_store_explicit(&diag_modes, modes, memory_order_release);
  if (modes != 0)
    verbose("diagnostics on:%s%s%s%s", (modes & DIAG_LEAKS) ? " leaks" : "",
            (modes & DIAG_CHECK) ? " check" : "", (modes & DIAG_CONTENTION) ? " contention" : "",
            (modes & DIAG_TRACE) ? " trace" : "");
}

/* From the program (shoal_leak_report_at_exit), outside any allocation:
 * as SHOAL_LEAKS=all would have from the start. This thread's heap is put
 * aside at once; a thread started later parks its heap at its first call;
 * threads already running keep their fast paths, untracked. */
static _Atomic(bool) leak_report_off;

bool diag_leaks_report_at_exit(bool on) {
  if (diag_inside) return false;
  atomic_store_explicit(&leak_report_off, !on, memory_order_relaxed);
  if (!on) return true;
  int modes = diag_mode();
  if (modes & DIAG_LEAKS_ALL) return true;
  if (modes & DIAG_CHECK) { /* every block has its record already */
    atomic_fetch_or_explicit(&diag_modes, DIAG_LEAKS, memory_order_acq_rel);
    return true;
  }
  if (!(modes & DIAG_LEAKS)) records_register_for_fork();
  os_keep_stderr();
  atomic_fetch_or_explicit(&diag_modes, DIAG_LEAKS | DIAG_LEAKS_ALL, memory_order_acq_rel);
  diag_load_unwinder();
  if (thread_heap != &heap_empty) {
    thread_heap_parked = thread_heap;
    thread_heap = &heap_empty;
  }
  verbose("diagnostics on: leaks (exact, from now on)");
  return true;
}

void diag_collect(void) {
  int modes = diag_mode();
  if (!(modes & DIAG_CHECK) || diag_inside) return;
  core_enter(modes);
  site_t site;
  site_capture(&site, CALLER());
  check_quarantine_empty(&site);
  core_leave(modes);
}

/* After the program's own destructors (a preloaded library is finalised
 * after the program). What the C library allocates for the reports (qsort
 * may) comes from the core, untracked. */
__attribute__((destructor(101))) void diag_at_exit(void) {
  static _Atomic(bool) done;
  int modes = diag_mode();
  if (modes == 0 || atomic_exchange(&done, true)) return;
  core_enter(modes);
  if (modes & DIAG_TRACE) trace_flush_all();
  if ((modes & DIAG_LEAKS) && !atomic_load_explicit(&leak_report_off, memory_order_relaxed))
    leaks_report();
  if (modes & DIAG_CONTENTION) contention_report();
  frame_names_release();
  core_leave(modes);
}
