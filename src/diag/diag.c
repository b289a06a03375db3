/* diag.c — the diagnostics' way in: which modes are on, the interposition
 * around the core, call sites, the contention log, and the reports at exit.
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

/* The unwinder is libgcc's, on ELF systems. Bound here when the program has
 * it (C++ does); otherwise loaded when a diagnostic that names call sites
 * starts (diag_load_unwinder): linking libgcc_s into every process cost
 * 100 KiB of resident memory. Without it (and on PE systems, Windows, where
 * libgcc_s is no system library), call sites have one frame: the caller. */
#if defined(__ELF__)
#define HAS_LIBGCC_UNWINDER 1
#include <dlfcn.h>
#include <unwind.h>
#pragma weak _Unwind_Backtrace
#pragma weak _Unwind_GetIP
typedef _Unwind_Reason_Code (*unwind_backtrace_fn)(_Unwind_Trace_Fn, void *);
typedef _Unwind_Ptr (*unwind_get_ip_fn)(struct _Unwind_Context *);
static _Atomic(unwind_backtrace_fn) unwind_backtrace;
static _Atomic(unwind_get_ip_fn) unwind_get_ip;
#else
#define HAS_LIBGCC_UNWINDER 0
#endif
size_t unwinder_live[SHOAL_STATS_SIZE_CLASSES];

_Atomic(int) diag_modes;
__attribute__((tls_model("initial-exec"))) _Thread_local bool diag_inside;

static const char *contention_path;

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

/* ---- call sites ---- */

#if HAS_LIBGCC_UNWINDER
typedef struct unwind_walk_s {
  site_t *site;
  int stored;  /* frames written; 0 until the caller's frame is reached */
  int skipped; /* shoal's own frames (and a signal trampoline or two) */
} unwind_walk_t;

static _Unwind_Reason_Code unwind_step(struct _Unwind_Context *context, void *argument) {
  unwind_walk_t *walk = argument;
  unwind_get_ip_fn get_ip = atomic_load_explicit(&unwind_get_ip, memory_order_relaxed);
  const void *ip = (const void *)get_ip(context);
  if (walk->stored == 0) {
    if (ip == walk->site->frames[0]) walk->stored = 1;
    return ++walk->skipped > 32 ? _URC_END_OF_STACK : _URC_NO_REASON;
  }
  walk->site->frames[walk->stored++] = ip;
  return walk->stored == SITE_FRAMES ? _URC_END_OF_STACK : _URC_NO_REASON;
}

/* The frames from the exported function's caller outwards: unwind, skip
 * until the return address the entry point saw, keep what follows. */
void site_capture(site_t *site, caller_t caller) {
  memset(site, 0, sizeof *site);
  site->frames[0] = caller;
  unwind_backtrace_fn backtrace = atomic_load_explicit(&unwind_backtrace, memory_order_acquire);
  if (backtrace == NULL) return;
  unwind_walk_t walk = {site, 0, 0};
  backtrace(unwind_step, &walk);
  if (walk.stored == 0) memset(&site->frames[1], 0, sizeof site->frames - sizeof site->frames[0]);
}
#else
void site_capture(site_t *site, caller_t caller) {
  memset(site, 0, sizeof *site);
  site->frames[0] = caller;
}
#endif

/* A return address points after the call; name the call itself. */
static size_t frame_format(const void *frame, char *out, size_t capacity) {
  return symbol_name((const uint8_t *)frame - 1, out, capacity);
}

size_t site_format(const site_t *site, char *out, size_t capacity) {
  size_t length = 0;
  out[0] = '\0';
  for (int i = 0; i < SITE_FRAMES && site->frames[i] != NULL && length + 8 < capacity; i++) {
    if (i > 0) length += (size_t)text_format(out + length, capacity - length, " <- ");
    if (length >= capacity) break;
    size_t name = length;
    length += frame_format(site->frames[i], out + length, capacity - length);
    if (strncmp(out + name, "main+", 5) == 0) break; /* what calls main is noise */
  }
  return length < capacity ? length : capacity - 1;
}

void diag_write(int fd, const char *format, ...) {
  char line[2048];
  va_list args;
  va_start(args, format);
  int n = text_vformat(line, sizeof line - 1, format, args);
  va_end(args);
  size_t length = n < 0 ? 0 : (size_t)n;
  if (length > sizeof line - 2) length = sizeof line - 2;
  line[length++] = '\n';
  if (fd == 2)
    os_write_stderr(line, length); /* the kept copy, if the program closed its own */
  else
    os_write_all(fd, line, length);
}

/* ---- the contention log ----
 * Counts per (event, call site) in a fixed open-addressed table that any
 * thread fills with atomics and none waits on; a full table counts the
 * rest as dropped. */

typedef enum contention_event_e {
  EVENT_LOCK_WAIT = 1,   /* waited for the arena (or huge cache) lock */
  EVENT_SLOW_PATH = 2,   /* malloc left the fast path for fresh pages */
  EVENT_REMOTE_FREE = 3, /* freed a block another thread owns */
} contention_event_t;

static const char *const event_names[] = {"", "lock wait", "slow path", "remote free"};

#define CONTENTION_SLOTS 8192
typedef struct contention_slot_s {
  _Atomic(uintptr_t) key; /* call site << 2 | event */
  _Atomic(size_t) count;
} contention_slot_t;

static contention_slot_t contention_slots[CONTENTION_SLOTS];
static _Atomic(size_t) contention_dropped;

static void contention_note(contention_event_t event, caller_t caller, size_t times) {
  uintptr_t key = (uintptr_t)caller << 2 | (uintptr_t)event;
  size_t start = (size_t)((key * 0x9E3779B97F4A7C15u) >> 51);
  for (size_t i = 0; i < CONTENTION_SLOTS; i++) {
    contention_slot_t *slot = &contention_slots[(start + i) % CONTENTION_SLOTS];
    uintptr_t seen = atomic_load_explicit(&slot->key, memory_order_acquire);
    if (seen == 0 && atomic_compare_exchange_strong_explicit(
                         &slot->key, &seen, key, memory_order_acq_rel, memory_order_acquire))
      seen = key;
    if (seen == key) {
      atomic_fetch_add_explicit(&slot->count, times, memory_order_relaxed);
      return;
    }
  }
  atomic_fetch_add_explicit(&contention_dropped, times, memory_order_relaxed);
}

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
static void contention_after(const contention_probe_t *before, caller_t caller) {
  contention_probe_t after;
  contention_probe(&after);
  if (after.lock_waits != before->lock_waits)
    contention_note(EVENT_LOCK_WAIT, caller, after.lock_waits - before->lock_waits);
  if (after.heap == before->heap && after.slow_paths > before->slow_paths)
    contention_note(EVENT_SLOW_PATH, caller, after.slow_paths - before->slow_paths);
}

typedef struct contention_entry_s {
  uintptr_t key;
  size_t count;
} contention_entry_t;

static int entry_by_count(const void *a, const void *b) {
  const contention_entry_t *x = a, *y = b;
  if (x->count != y->count) return x->count > y->count ? -1 : 1;
  return x->key < y->key ? -1 : x->key > y->key;
}

static void contention_report(void) {
  static contention_entry_t entries[CONTENTION_SLOTS]; /* at exit, once */
  size_t used = 0, total = 0;
  for (size_t i = 0; i < CONTENTION_SLOTS; i++) {
    uintptr_t key = atomic_load_explicit(&contention_slots[i].key, memory_order_acquire);
    if (key == 0) continue;
    entries[used].key = key;
    entries[used].count = atomic_load_explicit(&contention_slots[i].count, memory_order_relaxed);
    total += entries[used++].count;
  }
  qsort(entries, used, sizeof entries[0], entry_by_count);
  int fd = diag_open_output(contention_path);
  char site[1024];
  if (fd >= 0) {
    diag_write(fd, "# shoal contention log: %zu events at %zu call sites, most frequent first",
               total, used);
    diag_write(fd, "# %10s  %-11s  %s", "count", "event", "call site");
    for (size_t i = 0; i < used; i++) {
      frame_format((const void *)(entries[i].key >> 2), site, sizeof site);
      diag_write(fd, "%12zu  %-11s  %s", entries[i].count, event_names[entries[i].key & 3], site);
    }
    size_t dropped = atomic_load_explicit(&contention_dropped, memory_order_relaxed);
    if (dropped != 0)
      diag_write(fd, "# %zu more events at sites the table had no room for", dropped);
    os_close(fd);
  }
  diag_write(2, "shoal: contention: %zu events at %zu call sites%s%s", total, used,
             fd >= 0 ? "; log in " : "", fd >= 0 ? contention_path : "");
  for (size_t i = 0; i < used && i < 3; i++) {
    frame_format((const void *)(entries[i].key >> 2), site, sizeof site);
    diag_write(2, "shoal:   %zu %s%s at %s", entries[i].count, event_names[entries[i].key & 3],
               entries[i].count == 1 ? "" : "s", site);
  }
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
  if (modes & DIAG_CONTENTION) contention_after(&probe, caller);
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
    contention_note(EVENT_REMOTE_FREE, caller, 1);
  if (modes & DIAG_TRACE) trace_note(SHOAL_TRACE_FREE, p, NULL, 0, 0, trace_next_sequence());
  if (modes & DIAG_CHECK) {
    site_t site;
    site_capture(&site, caller);
    check_free(p, size_hint, function, &site);
  } else {
    if (modes & DIAG_LEAKS) leaks_forget(p);
    free_fast(p, size_hint, caller);
  }
  if (modes & DIAG_CONTENTION) contention_after(&probe, caller);
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
  if (modes & DIAG_CONTENTION) contention_after(&probe, caller);
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
  contention_path = getenv("SHOAL_CONTENTION");
  if (contention_path != NULL && *contention_path != '\0') modes |= DIAG_CONTENTION;
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

/* Called once the library is initialised (its constructor), never from
 * inside an allocation: dlopen allocates, and takes the loader's lock. */
void diag_load_unwinder(void) {
  if (!(diag_mode() & (DIAG_LEAKS | DIAG_CHECK | DIAG_CONTENTION))) return;
#if HAS_LIBGCC_UNWINDER
  unwind_backtrace_fn backtrace = NULL;
  unwind_get_ip_fn get_ip = NULL;
  if (_Unwind_Backtrace != NULL && _Unwind_GetIP != NULL) {
    backtrace = _Unwind_Backtrace;
    get_ip = _Unwind_GetIP;
  } else {
    /* What the loader keeps of this is the runtime's, not the program's:
     * the sampled leak report leaves it out of its counts. */
    static shoal_stats_t before, after;
    stats_fill(&before);
    void *libgcc = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL);
    stats_fill(&after);
    for (size_t i = 0; i < SHOAL_STATS_SIZE_CLASSES; i++)
      if (after.classes[i].live > before.classes[i].live)
        unwinder_live[i] = after.classes[i].live - before.classes[i].live;
    if (libgcc == NULL) return;
    *(void **)&backtrace = dlsym(libgcc, "_Unwind_Backtrace");
    *(void **)&get_ip = dlsym(libgcc, "_Unwind_GetIP");
    if (backtrace == NULL || get_ip == NULL) return;
  }
  atomic_store_explicit(&unwind_get_ip, get_ip, memory_order_relaxed);
  atomic_store_explicit(&unwind_backtrace, backtrace, memory_order_release);
#endif
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
  if (modes & DIAG_LEAKS) leaks_report();
  if (modes & DIAG_CONTENTION) contention_report();
  core_leave(modes);
}
