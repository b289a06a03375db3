/* diag.h — the diagnostics layer: what it offers the api layer above (the
 * modes, the interposed calls) and what its files share (call sites, the
 * table of tracked blocks, each mode's entry points).
 *
 *   diag.c     modes, the interposition around the core, the reports at
 *              exit
 *   walk.c     call sites: the stack walked through code with or without
 *              unwind tables, ShoalMM's and the Pascal RTL's frames left out
 *   contention.c  the contention log: events by call stack and function
 *   output.c   where the reports go: stderr, or a file and a summary
 *   leaks.c    the table of tracked blocks and the leak report
 *   check.c    checked mode: guards, patterns, quarantine, error reports
 *   trace.c    SHOAL_TRACE: every call recorded (trace_format.h)
 *   symbols.c  names for code addresses (dladdr and the ELF .symtab)
 *   lines.c    functions, files and lines from debug information (libdw,
 *              loaded when a report first needs it), cached per address
 *   report.c   SHOAL_STATS: the core's figures printed at exit
 *
 * Diagnostics code runs with diag_inside set and thread_heap restored, so
 * whatever it allocates (the unwinder might) goes straight to the core, and
 * it never holds one of its locks while calling the core or the unwinder. */
#ifndef SHOAL_DIAG_H
#define SHOAL_DIAG_H

#include "core/alloc.h"

/* ---- the interposition (diag.c) ----
 * Leak tracking, checked mode and the contention log interpose by keeping
 * thread_heap at heap_empty, so that every malloc and free leaves the fast
 * path for the api layer's slow exits, which test diag_interposes(); the
 * thread's real heap waits in thread_heap_parked meanwhile (core). Off,
 * they cost nothing. */
extern _Atomic(int) diag_modes;        /* DIAG_* bits, set once at start-up */
extern _Thread_local bool diag_inside; /* this thread is in diag code */
static inline bool diag_interposes(void) {
  return unlikely(atomic_load_explicit(&diag_modes, memory_order_relaxed) != 0) && !diag_inside;
}
/* Once, after process_init: reads the modes, fills core_hooks. */
void diag_start(void);
void diag_load_unwinder(void); /* from the constructor: call sites walked in full (walk.c) */
void diag_collect(void);       /* shoal_collect(true): checked mode empties its quarantine */
/* The reports at exit, each once: C destructors run them; a host that runs
 * none (Free Pascal) calls api_exit_reports. */
void diag_at_exit(void);         /* trace, leaks, contention */
void stats_report_at_exit(void); /* SHOAL_STATS */
void *diag_malloc(size_t size, size_t alignment, caller_t caller);
void diag_free(void *p, size_t size_hint, caller_t caller);
void *diag_realloc(void *p, size_t size, caller_t caller);
size_t diag_usable_size(const void *p, const char *function, caller_t caller);

/* A file's path as a number, to find an object again (symbols.c, lines.c):
 * FNV-1a. */
static inline uint64_t text_hash(const char *text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (; *text != '\0'; text++) hash = (hash ^ (unsigned char)*text) * 0x100000001b3ull;
  return hash;
}

/* ---- symbols.c: names for code addresses ----
 * "function+0xOFF (object)" for a code address, "0xADDR (object+0xOFF)" when
 * no function covers it (OFF is then what addr2line wants), "0xADDR" outside
 * every loaded object. Writes at most capacity bytes, always NUL-terminated
 * when capacity > 0; returns the length written (without the NUL). Never
 * allocates: safe at exit and while a bad heap is being reported. Takes the
 * loader's lock (dladdr). Static functions are named from the object's
 * .symtab when it has one. C++ names stay mangled. */
size_t symbol_name(const void *address, char *out, size_t capacity);

/* [start, end) of some code, run-time addresses. */
typedef struct code_range_s {
  uintptr_t start, end;
} code_range_t;
/* The functions of the program (not of its libraries) whose .symtab name
 * `wanted` accepts, at most capacity of them, unsorted. Maps the file for
 * the call; nothing allocated. */
size_t symbol_program_ranges(bool (*wanted)(const char *name), code_range_t *out, size_t capacity);

/* ---- lines.c: frames named from debug information ----
 * "function (file:line)" for a return address when its object has DWARF
 * line information and libdw can be loaded, else symbol_name's form for the
 * call instruction. Once per distinct address (a cache). Allocates through
 * the core (diag_inside must be set) unless told not to below. */
size_t frame_name(const void *return_address, char *out, size_t capacity);
/* From now on frames are named from symbol tables only (nothing allocated,
 * no loader lock taken): the heap may be damaged, or this is a signal
 * handler. `why` ends the report's note. */
void frame_names_plain(const char *why);
/* Let go of libdw's memory once the reports at exit are written. */
void frame_names_release(void);
/* For the note line: why names are plain, and which objects lacked debug
 * information or symbols ("no debug information in prog (build with -g)");
 * each returns the length written. */
size_t frame_names_plain_reason(char *out, size_t capacity);
size_t frame_names_missing_info(char *out, size_t capacity, bool after_another);

/* ---- why a report's call stacks say less than they might ----
 * Each reason noted once, by the walker or the namer; site_notes_write
 * gives them as one line, "shoal: call stacks: ...", after a report. */
enum {
  SITE_NOTE_NO_UNWINDER = 1,    /* libgcc_s could not be loaded: one frame */
  SITE_NOTE_STACK_UNKNOWN = 2,  /* a frame on a stack whose bounds are unknown */
  SITE_NOTE_WALK_STOPPED = 4,   /* no caller found past code without unwind tables */
  SITE_NOTE_NO_LIBDW = 8,       /* libdw.so.1 could not be loaded: no files, lines */
  SITE_NOTE_NO_DEBUG_INFO = 16, /* a program object without DWARF (lines.c names it) */
  SITE_NOTE_NO_SYMBOLS = 32,    /* a program object without a symbol table (stripped) */
  SITE_NOTE_PLAIN = 64,         /* frame_names_plain: symbol tables only */
};
void site_note(int note);
void site_notes_write(void);

enum {
  DIAG_LEAKS = 1,      /* SHOAL_LEAKS: sampled blocks are tracked */
  DIAG_LEAKS_ALL = 2,  /* SHOAL_LEAKS=all: every block is tracked */
  DIAG_CHECK = 4,      /* SHOAL_CHECK: checked mode */
  DIAG_CONTENTION = 8, /* SHOAL_CONTENTION: the contention log */
  DIAG_TRACE = 16,     /* SHOAL_TRACE: every call recorded (trace.c) */
};

static inline int diag_mode(void) {
  return atomic_load_explicit(&diag_modes, memory_order_relaxed);
}

/* ---- call sites (walk.c) ---- */
#define SITE_FRAMES 8
/* frames[0] is the return address into the program's code that called
 * malloc (or GetMem, New, SetLength... past ShoalMM's and the Free Pascal
 * RTL's own frames); the rest are its callers, as far as the walker could
 * follow them. Unused entries are NULL. */
typedef struct site_s {
  const void *frames[SITE_FRAMES];
  caller_t entry; /* the return address the exported function saw (ShoalMM's
                     hook, for Pascal): names the memory function called */
} site_t;

void site_capture(site_t *site, caller_t caller);
/* "f (prog.c:12) <- main (prog.c:40)", or without debug information
 * "f+0x1c (prog) <- main+0x40 (prog)", into out; returns the length. */
size_t site_format(const site_t *site, char *out, size_t capacity);
/* "GetMem" for "malloc" when caller is ShoalMM's GetMem hook, and so on:
 * the memory function as the program called it. Reads symbols: reports only. */
const char *function_as_called(const char *function, caller_t caller);

/* ---- where reports go (output.c) ----
 * stderr, or the report file (SHOAL_REPORT_FILE, shoal_report_file) with a
 * brief summary on stderr. Lines get their newline here. */
void output_start(void);                         /* reads the option, from diag_start */
void output_start_file(const char *path);        /* as if the option named path */
bool output_set_file(const char *path);          /* path, "auto" or NULL (stderr) */
bool output_to_file(void);                       /* the reports go to a file (opens it) */
const char *output_file_path(void);              /* its path, or "stderr" */
void output_report_line(const char *format, ...) /* into the report */
    __attribute__((format(printf, 1, 2)));
void output_summary_line(const char *format, ...) /* on stderr, when the report is a file */
    __attribute__((format(printf, 1, 2)));
void output_error_line(const char *format, ...) /* into the report, and on stderr if a file */
    __attribute__((format(printf, 1, 2)));

/* Blocks of each size class the loader kept when the unwinder was loaded. */
extern size_t unwinder_live[SHOAL_STATS_SIZE_CLASSES];
int diag_open_output(const char *path); /* a report's file, or -1 after saying why */

/* ---- locks ----
 * Diagnostics code holds at most one of its locks at a time. They are
 * lock.c's, noted in hand, and registered for fork at start-up: a fork from
 * a signal handler that interrupted this thread inside a diagnostic does not
 * wait for the lock the thread itself holds. */
extern _Thread_local int diag_locks_held; /* by this thread: no dlopen meanwhile (lines.c) */

static inline void diag_lock(shoal_lock_t *lock) {
  lock_acquire(lock);
  diag_locks_held++;
}

static inline void diag_unlock(shoal_lock_t *lock) {
  diag_locks_held--;
  lock_release(lock);
}

/* ---- the table of tracked blocks (leaks.c) ---- */
typedef enum record_state_e { RECORD_LIVE = 1, RECORD_QUARANTINED = 2 } record_state_t;

typedef struct block_record_s {
  struct block_record_s *next; /* in its bucket, or the free list */
  uintptr_t block;             /* the address the program got */
  size_t size;                 /* the size it asked for */
  size_t weight;               /* blocks this sampled one stands for */
  uint8_t state;               /* record_state_t */
  uint32_t inaccessible;       /* checked mode: its entry in check.c's table of blocks no
                                  access may touch (1 + index), 0: none; never read them */
  site_t allocated_at;
  site_t freed_at; /* checked mode: while quarantined */
} block_record_t;

typedef struct record_shard_s record_shard_t;

/* Lock the part of the table where `block` lives; every other call below
 * takes the shard so locked, and nothing else may run meanwhile. */
record_shard_t *records_lock(uintptr_t block);
void records_unlock(record_shard_t *shard);
block_record_t *records_find(record_shard_t *shard, uintptr_t block);
/* A zeroed record for block (NULL when the OS refuses memory). */
block_record_t *records_add(record_shard_t *shard, uintptr_t block);
void records_remove(record_shard_t *shard, block_record_t *record);
/* Visit every record, one shard locked at a time. */
void records_for_each(void (*visit)(block_record_t *record, void *context), void *context);
void records_register_for_fork(void);

/* Leak tracking: whether to sample an allocation of this size, and the
 * weight a sample gets. */
bool leaks_sample(size_t size, size_t *weight);
void leaks_track(void *block, size_t size, size_t weight, const site_t *site);
/* Forget a block about to be freed; true when it was tracked. */
bool leaks_forget(const void *block);
void leaks_report(void);
void leaks_set_namer(shoal_block_namer_t namer); /* shoal_report_namer */
/* shoal_leak_report_at_exit: exact tracking from now on, and whether the
 * report at exit is wanted (diag.c). */
bool diag_leaks_report_at_exit(bool on);

/* ---- the contention log (contention.c) ---- */
typedef enum contention_event_e {
  EVENT_LOCK_WAIT = 1,   /* waited for the arena (or huge cache) lock */
  EVENT_SLOW_PATH = 2,   /* malloc left the fast path for fresh pages */
  EVENT_REMOTE_FREE = 3, /* freed a block another thread owns */
} contention_event_t;
/* Count `times` events at the call stack of caller, in `function` (a
 * string that lives for ever: the C function's name). */
void contention_note(contention_event_t event, const char *function, caller_t caller, size_t times);
void contention_report(void);

/* ---- the allocation trace (trace.c; format in trace_format.h) ---- */
bool trace_init(const char *path);
uint64_t trace_next_sequence(void);
void trace_note(int op, const void *block, const void *result, size_t size, size_t alignment,
                uint64_t sequence);
void trace_thread_exit(void);
void trace_flush_all(void);
void trace_fork_child(void);

/* ---- checked mode (check.c); called inside the diagnostics ---- */
void check_init(void);
void *check_malloc(size_t size, size_t alignment, const site_t *site);
void check_free(void *p, size_t size_hint, const char *function, const site_t *site);
void *check_realloc(void *p, size_t size, const site_t *site);
size_t check_usable_size(const void *p, const char *function, const site_t *site);
/* Let every quarantined block go (checking each), for shoal_collect(true). */
void check_quarantine_empty(const site_t *site);
void check_register_for_fork(void);

#endif /* SHOAL_DIAG_H */
