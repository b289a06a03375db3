/* linux.c — os.h on Linux: mmap, madvise, mremap, mprotect, futex, signals.
 *
 * Purges use MADV_DONTNEED (the range reads as zero at once) or MADV_FREE
 * (lazy); faults of checked mode's inaccessible pages come back through
 * os_catch_faults. */
#define _GNU_SOURCE
#include "os/os.h"
#include "os/accounting.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

/* The clock, read through the kernel's vDSO directly. The C library's
 * clock_gettime does the same through a wrapper that lies far from the
 * code every program touches: calling it faulted 64 KiB of the C
 * library's text into the process (the kernel maps the pages around a
 * fault), 3 % of a small program's peak RSS. NULL: the library's. */
typedef int (*vdso_clock_gettime_t)(clockid_t clock, struct timespec *t);
static vdso_clock_gettime_t vdso_clock_gettime;

static bool names_equal(const char *a, const char *b) {
  while (*a != '\0' && *a == *b) a++, b++;
  return *a == *b;
}

/* Found by the vDSO's ELF dynamic symbols (it has the classic hash table,
 * whose second word counts them). */
void *os_vdso_function(const char *name) {
  uintptr_t base = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
  if (base == 0) return NULL;
  const ElfW(Ehdr) *header = (const ElfW(Ehdr) *)base;
  const ElfW(Phdr) *segments = (const ElfW(Phdr) *)(base + header->e_phoff);
  uintptr_t bias = 0;
  const ElfW(Dyn) *dynamic = NULL;
  bool loaded = false;
  for (size_t i = 0; i < header->e_phnum; i++) {
    if (segments[i].p_type == PT_LOAD && !loaded) {
      bias = base + segments[i].p_offset - segments[i].p_vaddr;
      loaded = true;
    } else if (segments[i].p_type == PT_DYNAMIC) {
      dynamic = (const ElfW(Dyn) *)(base + segments[i].p_offset);
    }
  }
  if (!loaded || dynamic == NULL) return NULL;
  const ElfW(Sym) *symbols = NULL;
  const char *strings = NULL;
  const Elf32_Word *hash = NULL;
  for (; dynamic->d_tag != DT_NULL; dynamic++) {
    if (dynamic->d_tag == DT_SYMTAB) symbols = (const ElfW(Sym) *)(bias + dynamic->d_un.d_ptr);
    if (dynamic->d_tag == DT_STRTAB) strings = (const char *)(bias + dynamic->d_un.d_ptr);
    if (dynamic->d_tag == DT_HASH) hash = (const Elf32_Word *)(bias + dynamic->d_un.d_ptr);
  }
  if (symbols == NULL || strings == NULL || hash == NULL) return NULL;
  for (Elf32_Word i = 0; i < hash[1]; i++) {
    const ElfW(Sym) *symbol = &symbols[i];
    if (ELF64_ST_TYPE(symbol->st_info) == STT_FUNC && symbol->st_shndx != SHN_UNDEF &&
        names_equal(strings + symbol->st_name, name))
      return (void *)(bias + symbol->st_value);
  }
  return NULL;
}

void os_init(void) {
  vdso_clock_gettime = (vdso_clock_gettime_t)os_vdso_function("__vdso_clock_gettime");
}

size_t os_page_size(void) {
  return 4096;
}

size_t os_huge_page_size(void) {
  return (size_t)2 << 20; /* a page-middle-directory entry's span, 4 KiB pages */
}

/* mmap with the kernel's errno turned into ENOMEM: every failure of ours is
 * one. No MAP_NORESERVE: the kernel's overcommit check then refuses an
 * absurd request (malloc of 64 TiB) at once, as it does for glibc, instead
 * of letting the program die when it touches the memory. */
static void *map_anonymous(uintptr_t hint, size_t size) {
  void *p = mmap((void *)hint, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    errno = ENOMEM;
    return NULL;
  }
  return p;
}

/* `size` bytes at an address `phase` past a multiple of `alignment`
 * (phase < alignment): over-reserve by one alignment and trim. */
static void *map_at_phase(size_t size, size_t alignment, size_t phase) {
  if (size + alignment < size) {
    errno = ENOMEM;
    return NULL;
  }
  uint8_t *raw = map_anonymous(0, size + alignment);
  if (raw == NULL) return NULL;
  uintptr_t at = (((uintptr_t)raw + alignment - 1) & ~(uintptr_t)(alignment - 1)) + phase;
  if (at - alignment >= (uintptr_t)raw) at -= alignment;
  uint8_t *p = (uint8_t *)at;
  size_t head = (size_t)(p - raw), tail = alignment - head;
  if (head != 0) munmap(raw, head);
  if (tail != 0) munmap(p + size, tail);
  return p;
}

/* Where the last aligned mapping began: the next is asked for right below
 * it. Left to itself, the kernel puts a 1 MiB mapping into the hole that the
 * last one's trim left, which is never aligned, and each segment then cost
 * two mmaps and two munmaps. */
static _Atomic(uintptr_t) aligned_hint;

static void *map_hinted(size_t size, size_t alignment) {
  /* A hint is only a wish (no MAP_FIXED): taken or not, nothing mapped is
   * replaced. Otherwise over-reserve and trim. */
  uintptr_t below = atomic_load_explicit(&aligned_hint, memory_order_relaxed);
  uintptr_t hint = below > size ? (below - size) & ~(uintptr_t)(alignment - 1) : 0;
  uint8_t *p = map_anonymous(hint, size);
  if (p == NULL) return NULL;
  if (((uintptr_t)p & (alignment - 1)) != 0) {
    munmap(p, size);
    p = map_at_phase(size, alignment, 0);
    if (p == NULL) return NULL;
  }
  atomic_store_explicit(&aligned_hint, (uintptr_t)p, memory_order_relaxed);
  return p;
}

/* Segments are cut from space mapped ahead, a run of them at a time: an mmap takes the address
 * space's lock for writing, and while one waits for it, every other thread's MADV_POPULATE_WRITE
 * waits too (giveback at 8 threads: half the time its threads were switched out, queued on that
 * lock behind an mmap or munmap). The run doubles, to AHEAD_MAX, as the process takes more; space
 * mapped and never touched costs address space only. Each mapping cut from it is unmapped alone, as
 * Linux allows. One word: the next mapping's address, and in its low bits how many are left. */
#define AHEAD_MAX 16u
static _Atomic(uintptr_t) ahead;
static _Atomic(size_t) ahead_size; /* of each segment: the first asked for */
static _Atomic(size_t) ahead_run = 1;

static void *map_from_ahead(size_t size) {
  uintptr_t word = atomic_load_explicit(&ahead, memory_order_relaxed);
  while ((word & (size - 1)) != 0)
    if (atomic_compare_exchange_weak_explicit(&ahead, &word, word + size - 1, memory_order_relaxed,
                                              memory_order_relaxed))
      return (void *)(word & ~(uintptr_t)(size - 1));
  return NULL;
}

void *os_map_aligned(size_t size, size_t alignment) {
  uint8_t *p = alignment <= os_page_size() ? map_anonymous(0, size) : map_hinted(size, alignment);
  if (p != NULL) account_map(size);
  return p;
}

void *os_map_segment(size_t size) {
  size_t first = 0;
  atomic_compare_exchange_strong_explicit(&ahead_size, &first, size, memory_order_relaxed,
                                          memory_order_relaxed);
  if (atomic_load_explicit(&ahead_size, memory_order_relaxed) != size)
    return os_map_aligned(size, size);
  void *cut = map_from_ahead(size);
  if (cut != NULL) return cut;
  size_t run = atomic_load_explicit(&ahead_run, memory_order_relaxed);
  uint8_t *p = map_hinted(size * run, size);
  if (p == NULL && run > 1) p = map_hinted(size * (run = 1), size);
  if (p == NULL) return NULL;
  account_map(size * run);
  if (run > 1) {
    /* Another thread's run may have come in meanwhile: then ours goes back,
     * all but the first. */
    uintptr_t spent = atomic_load_explicit(&ahead, memory_order_relaxed);
    if ((spent & (size - 1)) != 0 ||
        !atomic_compare_exchange_strong_explicit(&ahead, &spent, (uintptr_t)(p + size) | (run - 1),
                                                 memory_order_relaxed, memory_order_relaxed))
      os_unmap(p + size, size * (run - 1));
  }
  if (run < AHEAD_MAX) atomic_store_explicit(&ahead_run, run * 2, memory_order_relaxed);
  return p;
}

void os_unmap(void *address, size_t size) {
  if (munmap(address, size) == 0) account_unmap(size);
}

void os_purge(void *address, size_t size) {
  int saved = errno;
  if (madvise(address, size, MADV_DONTNEED) == 0) account_purge(size);
  errno = saved;
}

void os_advise_huge_pages(void *address, size_t size, bool wanted) {
  int saved = errno;
  /* EINVAL without THP: nothing to do */
  madvise(address, size, wanted ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  errno = saved;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* Off once the kernel refuses it (older than 5.14): no system call a page. */
static atomic_bool populate_refused;

void os_populate(void *address, size_t size) {
  if (atomic_load_explicit(&populate_refused, memory_order_relaxed)) return;
  int saved = errno;
  if (madvise(address, size, MADV_POPULATE_WRITE) != 0 && errno == EINVAL)
    atomic_store_explicit(&populate_refused, true, memory_order_relaxed);
  errno = saved;
}

void os_purge_lazy(void *address, size_t size) {
  int saved = errno;
  if (madvise(address, size, MADV_FREE) != 0) madvise(address, size, MADV_DONTNEED);
  account_purge(size);
  errno = saved;
}

/* ThreadSanitizer follows mmap and munmap but not mremap: a range that a
 * move or a shrink gives up keeps its old accesses in TSan's shadow, and
 * another thread's mapping that grows in place over it is then reported
 * racing with them (test/stress under TSan: one run in twenty, a calloc's
 * memset against the huge cache's read of a header). Under TSan the same
 * resizes are made of calls it follows: the tail mapped or unmapped in
 * place, a move copied. */
#if defined(__SANITIZE_THREAD__)
#define REMAP_SEEN_BY_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define REMAP_SEEN_BY_TSAN 1
#endif
#endif

/* The mapping resized where it is, or NULL. */
static void *remap_in_place(void *address, size_t old_size, size_t new_size) {
#ifdef REMAP_SEEN_BY_TSAN
  uint8_t *start = address;
  if (new_size < old_size)
    return munmap(start + new_size, old_size - new_size) == 0 ? address : NULL;
  uint8_t *tail = map_anonymous((uintptr_t)(start + old_size), new_size - old_size);
  if (tail == start + old_size) return address;
  if (tail != NULL) munmap(tail, new_size - old_size);
  return NULL;
#else
  void *p = mremap(address, old_size, new_size, 0);
  return p == MAP_FAILED ? NULL : p;
#endif
}

/* The mapping's pages moved to `target` (mapped, new_size), or NULL. */
static void *remap_to(void *address, size_t old_size, size_t new_size, void *target) {
#ifdef REMAP_SEEN_BY_TSAN
  memcpy(target, address, old_size < new_size ? old_size : new_size);
  munmap(address, old_size);
  return target;
#else
  void *p = mremap(address, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, target);
  return p == MAP_FAILED ? NULL : p;
#endif
}

void *os_remap_aligned(void *address, size_t old_size, size_t new_size, size_t alignment) {
  int saved = errno; /* a failed try in place is no failure */
  void *p = remap_in_place(address, old_size, new_size);
  if (p == NULL) {
    /* Reserve an aligned destination, then move the pages there: the kernel
     * moves page tables, not bytes. The destination keeps the source's
     * place within a huge page, so that its huge pages move as they are:
     * moved to another place, each is split, and every 4 KiB of it then
     * costs a page walk on its next touch (3.5 µs a page on this virtual
     * machine, a hundred times the whole huge page's move; bench/README.md,
     * the sixteenth session). */
    size_t huge = os_huge_page_size();
    size_t span = alignment > huge ? alignment : huge;
    void *target = map_at_phase(new_size, span, (uintptr_t)address & (span - 1) & ~(alignment - 1));
    if (target == NULL) return NULL;
    p = remap_to(address, old_size, new_size, target);
    if (p == NULL) {
      munmap(target, new_size);
      errno = ENOMEM;
      return NULL;
    }
  }
  if (new_size > old_size)
    account_map(new_size - old_size);
  else
    account_unmap(old_size - new_size);
  errno = saved;
  return p;
}

bool os_protect(void *address, size_t size, bool accessible) {
  int saved = errno;
  int done = mprotect(address, size, accessible ? PROT_READ | PROT_WRITE : PROT_NONE);
  errno = saved;
  return done == 0;
}

/* ---- faults, for checked mode ---- */

static void (*fault_handler)(const void *address, const char *access, const void *instruction);
static struct sigaction previous_segv, previous_bus;

/* Whether the faulting access wrote, where the CPU tells: on x86-64 the
 * page fault's error code, bit 1. */
static const char *fault_access(const void *context) {
#if defined(__x86_64__)
  const ucontext_t *state = context;
  return (state->uc_mcontext.gregs[REG_ERR] & 2) != 0 ? "write" : "read";
#else
  (void)context;
  return "access";
#endif
}

static const void *fault_instruction(const void *context) {
#if defined(__x86_64__)
  return (const void *)((const ucontext_t *)context)->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
  return (const void *)((const ucontext_t *)context)->uc_mcontext.pc;
#else
  (void)context;
  return NULL;
#endif
}

/* A fault the checked mode does not claim: the previous handler comes
 * back, and returning repeats the access, which faults again into it. A
 * SIGSEGV sent by kill() would not come again, so it is sent anew. */
static void on_fault(int signal, siginfo_t *info, void *context) {
  int saved = errno;
  if (info->si_code > 0) /* from the kernel: a real fault */
    fault_handler(info->si_addr, fault_access(context), fault_instruction(context));
  sigaction(signal, signal == SIGBUS ? &previous_bus : &previous_segv, NULL);
  if (info->si_code <= 0) raise(signal);
  errno = saved;
}

bool os_catch_faults(void (*handler)(const void *address, const char *access,
                                     const void *instruction)) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_sigaction = on_fault;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK; /* a stack overflow's fault needs another stack */
  sigemptyset(&action.sa_mask);
  fault_handler = handler;
  return sigaction(SIGSEGV, &action, &previous_segv) == 0 &&
         sigaction(SIGBUS, &action, &previous_bus) == 0;
}

int64_t os_now_ms(void) {
  struct timespec t;
  if (vdso_clock_gettime != NULL)
    vdso_clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  else
    clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

os_thread_usage_t os_thread_usage(void) {
  struct rusage usage;
  if (getrusage(RUSAGE_THREAD, &usage) != 0) return (os_thread_usage_t){0, 0, 0};
  int64_t cpu_us = ((int64_t)usage.ru_utime.tv_sec + (int64_t)usage.ru_stime.tv_sec) * 1000000 +
                   (int64_t)usage.ru_utime.tv_usec + (int64_t)usage.ru_stime.tv_usec;
  return (os_thread_usage_t){cpu_us / 1000, (uint64_t)usage.ru_nivcsw, (uint64_t)usage.ru_nvcsw};
}

int os_thread_id(void) {
  return (int)syscall(SYS_gettid);
}

/* /proc/self/task/<id>/stat: the state letter follows the name in
 * parentheses (which may hold any byte, a parenthesis too); user and
 * system time in ticks are the 12th and 13th fields after it. */
bool os_thread_state(int thread_id, os_thread_state_t *state) {
  if (thread_id <= 0) return false;
  char path[48] = "/proc/self/task/", digits[12];
  size_t length = 16, count = 0;
  for (unsigned id = (unsigned)thread_id; id != 0; id /= 10)
    digits[count++] = (char)('0' + id % 10);
  while (count > 0) path[length++] = digits[--count];
  memcpy(path + length, "/stat", 6);
  int saved = errno;
  int file = open(path, O_RDONLY | O_CLOEXEC);
  char text[512];
  ssize_t got = file < 0 ? -1 : read(file, text, sizeof text - 1);
  if (file >= 0) close(file);
  errno = saved;
  if (got <= 0) return false;
  text[got] = '\0';
  const char *field = strrchr(text, ')');
  if (field == NULL || field[1] != ' ') return false;
  field += 2;
  state->runnable = *field == 'R';
  int64_t ticks[2] = {0, 0};
  for (int index = 1; index <= 12; index++) { /* the state letter is field 0 */
    while (*field != ' ' && *field != '\0') field++;
    if (*field == '\0') return false;
    field++;
    if (index < 11) continue;
    while (*field >= '0' && *field <= '9')
      ticks[index - 11] = ticks[index - 11] * 10 + *field++ - '0';
  }
  long ticks_per_second = sysconf(_SC_CLK_TCK); /* USER_HZ */
  state->cpu_ms = (ticks[0] + ticks[1]) * 1000 / (ticks_per_second > 0 ? ticks_per_second : 100);
  return true;
}

uint64_t os_random_key(void) {
  uint64_t key = 0;
  if (getrandom(&key, sizeof key, GRND_NONBLOCK) != (ssize_t)sizeof key) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    key = (uint64_t)t.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)&t;
  }
  return key | 1; /* never 0: live blocks have 0 in that word */
}

void os_futex_wait(_Atomic(int) *address, int expected) {
  syscall(SYS_futex, (int *)address, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

void os_futex_wake_one(_Atomic(int) *address) {
  syscall(SYS_futex, (int *)address, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Signals a handler could take at any moment wait while shoal holds a lock
 * (lock.c says why); faults stay deliverable, as a blocked SIGSEGV would
 * kill the process instead of calling its handler. Nested holds count. */
static _Thread_local unsigned signals_held;
static _Thread_local sigset_t signals_before_hold;

void os_signals_hold(void) {
  if (signals_held == 0) {
    /* A handler that runs before the mask is in place nests whole and leaves
     * the count at 0; after it, none runs. */
    sigset_t deferred, before;
    sigfillset(&deferred);
    static const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS};
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) sigdelset(&deferred, faults[i]);
    pthread_sigmask(SIG_BLOCK, &deferred, &before);
    signals_before_hold = before;
  }
  signals_held++;
}

void os_signals_release(void) {
  if (--signals_held == 0) pthread_sigmask(SIG_SETMASK, &signals_before_hold, NULL);
}

/* Through syscall(), whose code lies by mmap's: libc's sched_yield lies in
 * a 64 KiB of libc's text (fork, wait, exec) that a program which never
 * forks would have resident only for shoal's waits. */
void os_yield(void) {
  syscall(SYS_sched_yield);
}

static pthread_key_t thread_exit_key;

void os_thread_exit_init(void (*on_exit)(void *value)) {
  pthread_key_create(&thread_exit_key, on_exit);
}

void os_thread_exit_arm(void *value) {
  pthread_setspecific(thread_exit_key, value);
}

void os_at_fork(void (*prepare)(void), void (*parent)(void), void (*child)(void)) {
  pthread_atfork(prepare, parent, child);
}

long os_process_id(void) {
  return (long)getpid();
}

/* Where shoal's lines go: stderr, or the copy os_keep_stderr made. */
static _Atomic(int) stderr_fd = 2;

/* Reports written at exit must reach the stderr the program started with,
 * also when it closed its own before exiting (ls, grep and awk do). */
void os_keep_stderr(void) {
  if (atomic_load_explicit(&stderr_fd, memory_order_relaxed) != 2) return;
  int saved_errno = errno;
  int copy = fcntl(2, F_DUPFD_CLOEXEC, 64);
  if (copy >= 0) atomic_store_explicit(&stderr_fd, copy, memory_order_relaxed);
  errno = saved_errno;
}

void os_write_stderr(const char *text, size_t length) {
  os_write_all(atomic_load_explicit(&stderr_fd, memory_order_relaxed), text, length);
}

void os_write_all(int fd, const char *text, size_t length) {
  while (length > 0) {
    ssize_t n = write(fd, text, length);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return;
    }
    text += n;
    length -= (size_t)n;
  }
}

int os_open_output(const char *path) {
  int saved_errno = errno;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) errno = saved_errno;
  return fd;
}

void os_close(int fd) {
  close(fd);
}

void os_abort(void) {
  abort();
}

/* Files for the symboliser (symbols.c): a whole file mapped read-only, so
 * that reading it needs no buffer from the heap. The mapping is not heap
 * memory and is not counted as reserved. errno is kept. */
const void *os_map_file(const char *path, size_t *size) {
  int saved = errno;
  void *p = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    off_t end = lseek(fd, 0, SEEK_END);
    if (end > 0 && (uintmax_t)end <= SIZE_MAX) {
      p = mmap(NULL, (size_t)end, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED)
        p = NULL;
      else
        *size = (size_t)end;
    }
    close(fd);
  }
  errno = saved;
  return p;
}

void os_unmap_file(const void *address, size_t size) {
  int saved = errno;
  munmap((void *)(uintptr_t)address, size);
  errno = saved;
}

size_t os_read_link(const char *path, char *out, size_t capacity) {
  if (capacity == 0) return 0;
  int saved = errno;
  ssize_t length = readlink(path, out, capacity - 1);
  errno = saved;
  if (length < 0) length = 0;
  out[length] = '\0';
  return (size_t)length;
}

size_t os_executable_path(char *out, size_t capacity) {
  size_t length = os_read_link("/proc/self/exe", out, capacity);
  if (length + 1 >= capacity) { /* readlink truncates without saying so */
    if (capacity > 0) out[0] = '\0';
    return 0;
  }
  return length;
}

/* The kernel copies, and says EFAULT where a page is not readable, so a
 * wild pointer costs a failed call, not a signal. Where process_vm_readv
 * is refused (a sandbox), a pipe does the same: write() copies from the
 * range, or fails with EFAULT. */
static bool read_memory_through_pipe(const void *address, void *out, size_t size) {
  int ends[2];
  if (size > 4096 || pipe2(ends, O_CLOEXEC) != 0) return false;
  bool copied =
      write(ends[1], address, size) == (ssize_t)size && read(ends[0], out, size) == (ssize_t)size;
  close(ends[0]);
  close(ends[1]);
  return copied;
}

bool os_read_memory(const void *address, void *out, size_t size) {
  if (size == 0) return true;
  int saved = errno;
  struct iovec local = {out, size};
  struct iovec remote = {(void *)(uintptr_t)address, size};
  ssize_t copied = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
  bool read = copied == (ssize_t)size;
  if (copied < 0 && errno != EFAULT) read = read_memory_through_pipe(address, out, size);
  errno = saved;
  return read;
}

int os_open_read(const char *path) {
  int saved = errno;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  errno = saved;
  return fd;
}

/* glibc's: the stack pointer at process start, above every frame of the
 * main thread. */
extern void *__libc_stack_end;

bool os_thread_stack(uintptr_t *low, uintptr_t *high) {
  int saved = errno;
  pthread_attr_t attributes;
  void *address = NULL;
  size_t size = 0;
  bool known = false;
  if (pthread_getattr_np(pthread_self(), &attributes) == 0) {
    known = pthread_attr_getstack(&attributes, &address, &size) == 0 && size != 0;
    pthread_attr_destroy(&attributes);
  }
  if (known) {
    *low = (uintptr_t)address;
    *high = (uintptr_t)address + size;
  } else if (getpid() == (pid_t)syscall(SYS_gettid) && __libc_stack_end != NULL) {
    struct rlimit limit;
    uintptr_t end = (uintptr_t)__libc_stack_end, reach = (uintptr_t)8 << 20;
    if (getrlimit(RLIMIT_STACK, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
        limit.rlim_cur < end)
      reach = (uintptr_t)limit.rlim_cur;
    *low = end - reach;
    *high = end;
    known = true;
  }
  errno = saved;
  return known;
}

bool os_module_of(const void *address, char *name, size_t capacity, uintptr_t *base) {
  Dl_info info;
  if (capacity == 0 || dladdr(address, &info) == 0 || info.dli_fname == NULL) return false;
  const char *shown = info.dli_fname;
  for (const char *p = shown; *p != '\0'; p++)
    if (*p == '/') shown = p + 1;
  size_t length = strlen(shown);
  if (length >= capacity) length = capacity - 1;
  memcpy(name, shown, length);
  name[length] = '\0';
  *base = (uintptr_t)info.dli_fbase;
  return true;
}
