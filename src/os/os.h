/* os.h — the platform: the only door to the kernel, for every layer above.
 *
 * Vocabulary: "map" reserves and commits address space (Linux commits
 * lazily: untouched pages cost no memory); "purge" gives the pages of a
 * range back, leaving it mapped and reading as zero ("lazy": the kernel
 * takes them only when it wants memory); "unmap" returns the range itself;
 * "protect" makes pages inaccessible, or accessible again. Reserved bytes
 * are counted here; committed bytes (what may be resident) are noted by the
 * callers. Nothing here knows an allocator type: one file per platform
 * implements this header (linux.c, windows.c), and no layer above knows
 * which one it runs on. */
#ifndef SHOAL_OS_H
#define SHOAL_OS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Once, at start-up, before any other call and before any lock is held:
 * what the platform layer looks up at run time, it looks up here. */
void os_init(void);
size_t os_page_size(void);
/* Reserve and commit `size` bytes aligned to `alignment` (a power of two,
 * >= the OS page). Memory reads as zero. NULL with errno ENOMEM on failure. */
void *os_map_aligned(size_t size, size_t alignment);
/* One of many mappings of `size` bytes aligned to `size` (a power of two
 * above the OS page): the core's segments. Unmapped whole, as any mapping. */
void *os_map_segment(size_t size);
/* A whole mapping, as os_map_aligned, os_map_segment or os_remap_aligned
 * returned it (a Windows reservation is released whole). */
void os_unmap(void *address, size_t size);
/* Give the pages back but keep the range mapped: it reads as zero after. */
void os_purge(void *address, size_t size);
/* Let the kernel take the pages when it needs memory; until then touching
 * them again costs nothing. Contents are undefined after. */
void os_purge_lazy(void *address, size_t size);
/* Ask for transparent huge pages (where the system leaves it to madvise):
 * the range then faults in os_huge_page_size() at a time. Advice for part
 * of a mapping makes it two kernel mappings, which os_remap_aligned cannot
 * resize; one advice for the whole (either one) makes it one again, where
 * a page of it was written before the first advice. */
void os_advise_huge_pages(void *address, size_t size, bool wanted);
/* Fault in a range the caller is about to write, in one call: where a
 * fault a page costs more than the kernel's own loop over them (Linux).
 * Does nothing where the system cannot. */
void os_populate(void *address, size_t size);
size_t os_huge_page_size(void);
/* Grow or shrink a mapping, moving it (without copying) to an address
 * aligned to `alignment` when it cannot stay. NULL on failure, old intact
 * (Windows moves nothing: there it resizes in place or fails). */
void *os_remap_aligned(void *address, size_t old_size, size_t new_size, size_t alignment);
/* Checked mode: make whole OS pages inaccessible (any touch faults) or
 * read-write again, contents kept. False when the kernel refused. */
bool os_protect(void *address, size_t size, bool accessible);
/* Checked mode: on SIGSEGV or SIGBUS call handler(address, "read" | "write"
 * | "access", faulting instruction) in the signal handler; it reports and
 * aborts when the fault is its own, else returns: the previous handler is
 * put back and the access faults again, to end as it would without shoal.
 * The handler must be async-signal-safe. False when it cannot be installed. */
bool os_catch_faults(void (*handler)(const void *address, const char *access,
                                     const void *instruction));
int64_t os_now_ms(void);
#ifdef __linux__
/* A function the kernel's vDSO exports (os_now_ms reads the clock through
 * it), or NULL: none by that name, or no vDSO (as under valgrind). */
void *os_vdso_function(const char *name);
#endif
/* What the calling thread has had of the machine so far: its CPU time, the
 * times it was preempted (it waited for a core) and the times it blocked or
 * slept. Where the OS does not tell, all zero. A system call. */
typedef struct os_thread_usage_s {
  int64_t cpu_ms;
  uint64_t preempted, waited;
} os_thread_usage_t;
os_thread_usage_t os_thread_usage(void);
/* The calling thread's id, for os_thread_state; 0 where that tells nothing. */
int os_thread_id(void);
/* Another thread of this process as the OS sees it now: running or waiting
 * for a core (not blocked, not asleep), and its CPU time so far (to the
 * OS's tick). False where the OS does not tell. Several system calls. */
typedef struct os_thread_state_s {
  bool runnable;
  int64_t cpu_ms;
} os_thread_state_t;
bool os_thread_state(int thread_id, os_thread_state_t *state);
uint64_t os_random_key(void);
void os_futex_wait(_Atomic(int) *address, int expected);
void os_futex_wake_one(_Atomic(int) *address);
void os_yield(void);
/* Thread exit: once os_thread_exit_init(on_exit) has run, a thread that
 * called os_thread_exit_arm(value) with a non-NULL value has on_exit(value)
 * called as it ends, in that thread, with its thread-locals still there. */
void os_thread_exit_init(void (*on_exit)(void *value));
void os_thread_exit_arm(void *value);
/* fork's handlers, as pthread_atfork's; nothing where there is no fork. */
void os_at_fork(void (*prepare)(void), void (*parent)(void), void (*child)(void));
/* This process's id, for the reports' headers and file names. */
long os_process_id(void);
/* Hold off asynchronous signals in this thread (nested), and let them come
 * again at the last release: around every lock (lock.c). */
void os_signals_hold(void);
void os_signals_release(void);
void os_write_stderr(const char *text, size_t length);
void os_keep_stderr(void); /* a copy of fd 2 for the reports at exit */
void os_write_all(int fd, const char *text, size_t length);
int os_open_output(const char *path); /* -1 with errno set: the caller says why */
void os_close(int fd);
void os_abort(void) __attribute__((noreturn));
void os_commit_note(ptrdiff_t bytes); /* + touched, - purged or unmapped */
size_t os_reserved_bytes(void);
size_t os_committed_bytes(void);
size_t os_peak_committed_bytes(void);
size_t os_purge_count(void);
size_t os_purged_bytes(void);
/* A whole file mapped read-only, for reading it without a buffer (the
 * symboliser reads ELF files so); NULL when it cannot be opened, is empty or
 * is not a file. Not heap memory: not counted as reserved. errno is kept. */
const void *os_map_file(const char *path, size_t *size);
void os_unmap_file(const void *address, size_t size);
/* The target of a symbolic link (/proc/self/exe), NUL-terminated, truncated
 * to capacity; its length, 0 when it cannot be read. */
size_t os_read_link(const char *path, char *out, size_t capacity);
/* The running executable's full path, NUL-terminated; its length, 0 when
 * the system cannot tell or it does not fit in capacity. */
size_t os_executable_path(char *out, size_t capacity);
/* Copy size bytes at address to out when the whole range is readable;
 * false (errno kept) when any of it is not: no fault is ever taken. */
bool os_read_memory(const void *address, void *out, size_t size);
/* A file opened for reading (close-on-exec), -1 when it cannot be; errno
 * is kept. The caller closes it, or hands it to a library that will. */
int os_open_read(const char *path);
/* The calling thread's stack: [*low, *high), every byte of [sp, *high)
 * readable for any sp of this thread inside it. From the thread's
 * attributes (for the main thread glibc reads /proc/self/maps), else, for
 * the main thread, from the start-up stack end and RLIMIT_STACK. May
 * allocate: not from a signal handler. False when unknown. */
bool os_thread_stack(uintptr_t *low, uintptr_t *high);
/* The loaded module (the program or a library) that holds a code address:
 * its file's base name, truncated to capacity, and its load address. False
 * when no module holds it. */
bool os_module_of(const void *address, char *name, size_t capacity, uintptr_t *base);

#endif /* SHOAL_OS_H */
