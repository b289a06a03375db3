/* windows.c — os.h on 64-bit Windows: VirtualAlloc, VirtualFree,
 * VirtualProtect, WaitOnAddress, fiber-local storage, vectored exceptions.
 *
 * Address space: a mapping is one reservation, committed whole (Windows
 * charges commit but faults pages in on first touch, as Linux does), so
 * that os_unmap can release it with one VirtualFree. Every reservation
 * starts on 64 KiB; a segment's 1 MiB alignment comes from VirtualAlloc2's
 * address requirements where the system has them (Windows 10 1803 and
 * later, Wine 8); otherwise an over-sized reservation is released and the
 * aligned address inside it taken at once (another thread may get there
 * first: tried again), and failing that the over-sized reservation is kept
 * and only its aligned part committed. os_unmap finds the reservation's
 * base with VirtualQuery either way.
 *
 * Purge: os_purge decommits and commits again (the range then reads as
 * zero, as the contract asks, and the memory leaves the working set and
 * the commit charge); os_purge_lazy resets (MEM_RESET: the system may drop
 * the pages instead of writing them out, and they stay committed). Under
 * Wine both give the pages back at once, and a reset range faults back in
 * no faster (bench/results/2026-11-25-windows.md).
 *
 * Waiting: WaitOnAddress and WakeByAddressSingle (Windows 8 and later),
 * looked up at start-up; without them a waiter yields its time slice until
 * the word changes. Never Sleep: a waiter runs again as soon as the lock is
 * free. Mappings are resized in place only (a shrink decommits the tail, a
 * growth commits what the reservation has left); the core copies otherwise.
 *
 * Thread exit: an FLS callback (FlsAlloc), which Windows calls in the
 * exiting thread while its thread-locals are still there, whether the
 * library is a DLL, linked statically into a program, or linked into a
 * Free Pascal program. There is no fork, and no asynchronous signal runs
 * in a thread that holds a lock, so os_at_fork and the signal holds do
 * nothing. Files are Win32 handles behind small integers: 1 and 2 are the
 * standard output and error, what os_open_output opens is 3 and up. */
#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include <errno.h>
#include <string.h>

#include "os/os.h"
#include "os/accounting.h"

size_t os_page_size(void) {
  return 4096;
}

/* ---- functions found at run time ---- */

typedef PVOID(WINAPI *virtual_alloc2_fn)(HANDLE, PVOID, SIZE_T, ULONG, ULONG,
                                         MEM_EXTENDED_PARAMETER *, ULONG);
typedef BOOL(WINAPI *wait_on_address_fn)(volatile VOID *, PVOID, SIZE_T, DWORD);
typedef VOID(WINAPI *wake_by_address_fn)(PVOID);

/* Found once, at start-up (os_init), never later: looking a function up
 * takes the loader's lock, which a thread may hold while it exits and runs
 * shoal's thread-exit callback, which may wait for a lock of shoal's that
 * the looking thread holds. kernelbase.dll is in every process that has
 * them (Windows 8 and 10, Wine). NULL: not in this system. */
static virtual_alloc2_fn virtual_alloc2;
static wait_on_address_fn wait_on_address;
static wake_by_address_fn wake_by_address;

void os_init(void) {
  HMODULE kernelbase = GetModuleHandleA("kernelbase.dll");
  if (kernelbase == NULL) return;
  virtual_alloc2 = (virtual_alloc2_fn)(void (*)(void))GetProcAddress(kernelbase, "VirtualAlloc2");
  wait_on_address = (wait_on_address_fn)(void (*)(void))GetProcAddress(kernelbase, "WaitOnAddress");
  wake_by_address =
      (wake_by_address_fn)(void (*)(void))GetProcAddress(kernelbase, "WakeByAddressSingle");
}

/* ---- address space ---- */

static void *reserve_and_commit(void *at, size_t size) {
  return VirtualAlloc(at, size, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
}

static void *map_with_alignment_parameter(size_t size, size_t alignment) {
  if (virtual_alloc2 == NULL) return NULL;
  MEM_ADDRESS_REQUIREMENTS requirements = {.Alignment = alignment};
  MEM_EXTENDED_PARAMETER parameter = {.Type = MemExtendedParameterAddressRequirements,
                                      .Pointer = &requirements};
  return virtual_alloc2(GetCurrentProcess(), NULL, size, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE,
                        &parameter, 1);
}

static uint8_t *align_up(uint8_t *p, size_t alignment) {
  return (uint8_t *)(((uintptr_t)p + alignment - 1) & ~(uintptr_t)(alignment - 1));
}

enum { RESERVATION_GRANULE = 64 << 10 }; /* where every reservation starts */

void *os_map_aligned(size_t size, size_t alignment) {
  if (size + alignment < size) goto failed;
  uint8_t *p;
  if (alignment <= RESERVATION_GRANULE) {
    p = reserve_and_commit(NULL, size);
    if (p == NULL) goto failed;
    goto mapped;
  }
  p = map_with_alignment_parameter(size, alignment);
  if (p != NULL) goto mapped;
  for (int attempt = 0; attempt < 8; attempt++) {
    uint8_t *wide = VirtualAlloc(NULL, size + alignment, MEM_RESERVE, PAGE_NOACCESS);
    if (wide == NULL) goto failed;
    VirtualFree(wide, 0, MEM_RELEASE);
    p = reserve_and_commit(align_up(wide, alignment), size);
    if (p != NULL) goto mapped;
  }
  /* Others keep taking the space between: keep the wide reservation. */
  uint8_t *wide = VirtualAlloc(NULL, size + alignment, MEM_RESERVE, PAGE_NOACCESS);
  if (wide == NULL) goto failed;
  p = VirtualAlloc(align_up(wide, alignment), size, MEM_COMMIT, PAGE_READWRITE);
  if (p == NULL) {
    VirtualFree(wide, 0, MEM_RELEASE);
    goto failed;
  }
mapped:
  account_map(size);
  return p;
failed:
  errno = ENOMEM;
  return NULL;
}

void *os_map_segment(size_t size) {
  return os_map_aligned(size, size);
}

/* The whole reservation that holds the mapping at `address`. */
static void release_reservation(void *address) {
  MEMORY_BASIC_INFORMATION region;
  if (VirtualQuery(address, &region, sizeof region) != 0)
    VirtualFree(region.AllocationBase, 0, MEM_RELEASE);
}

void os_unmap(void *address, size_t size) {
  release_reservation(address);
  account_unmap(size);
}

/* The commit again can fail only when the system's commit limit is
 * reached between the two calls; the range must be usable after a purge,
 * so the commit is tried again while other threads give memory back, and
 * then, out of memory with a range shoal counts as its own, shoal stops. */
void os_purge(void *address, size_t size) {
  int saved = errno;
  if (!VirtualFree(address, size, MEM_DECOMMIT)) return;
  for (int attempt = 0; VirtualAlloc(address, size, MEM_COMMIT, PAGE_READWRITE) == NULL;
       attempt++) {
    if (attempt == 1000) {
      static const char text[] = "shoal: out of commit: a purged range cannot be committed again\n";
      os_write_stderr(text, sizeof text - 1);
      os_abort();
    }
    SwitchToThread();
  }
  account_purge(size);
  errno = saved;
}

void os_purge_lazy(void *address, size_t size) {
  int saved = errno;
  if (VirtualAlloc(address, size, MEM_RESET, PAGE_READWRITE) != NULL) account_purge(size);
  errno = saved;
}

void os_advise_huge_pages(void *address, size_t size, bool wanted) {
  (void)address; /* large pages need a privilege programs rarely hold */
  (void)size;
  (void)wanted;
}

void os_populate(void *address, size_t size) {
  (void)address; /* committed memory faults a page at a time; nothing asks ahead */
  (void)size;
}

size_t os_huge_page_size(void) {
  return (size_t)2 << 20; /* what a large page would be; nothing asks for one here */
}

/* In place only: a shrink decommits the tail (the reservation stays whole,
 * for os_unmap), a growth commits what the reservation still has after
 * the mapping. Anything else is NULL: the caller copies. */
void *os_remap_aligned(void *address, size_t old_size, size_t new_size, size_t alignment) {
  (void)alignment;
  uint8_t *start = address;
  int saved = errno;
  if (new_size < old_size) {
    if (!VirtualFree(start + new_size, old_size - new_size, MEM_DECOMMIT)) return NULL;
    account_unmap(old_size - new_size);
    return address;
  }
  MEMORY_BASIC_INFORMATION mapping, tail;
  if (VirtualQuery(start, &mapping, sizeof mapping) == 0 ||
      VirtualQuery(start + old_size, &tail, sizeof tail) == 0 || tail.State != MEM_RESERVE ||
      tail.AllocationBase != mapping.AllocationBase || tail.RegionSize < new_size - old_size) {
    errno = saved;
    return NULL;
  }
  if (VirtualAlloc(start + old_size, new_size - old_size, MEM_COMMIT, PAGE_READWRITE) == NULL) {
    errno = saved;
    return NULL;
  }
  account_map(new_size - old_size);
  return address;
}

bool os_protect(void *address, size_t size, bool accessible) {
  DWORD before;
  return VirtualProtect(address, size, accessible ? PAGE_READWRITE : PAGE_NOACCESS, &before) != 0;
}

/* ---- faults, for checked mode: a vectored exception handler ---- */

static void (*fault_handler)(const void *address, const char *access, const void *instruction);

/* An access violation the checked mode does not claim goes on to the
 * program's handlers, then to the system's, as it would without shoal. */
static LONG WINAPI on_exception(EXCEPTION_POINTERS *exception) {
  const EXCEPTION_RECORD *record = exception->ExceptionRecord;
  if (record->ExceptionCode == EXCEPTION_ACCESS_VIOLATION && record->NumberParameters >= 2) {
    ULONG_PTR kind = record->ExceptionInformation[0];
    const char *access = kind == 0 ? "read" : kind == 1 ? "write" : "access";
    fault_handler((const void *)record->ExceptionInformation[1], access, record->ExceptionAddress);
  }
  return EXCEPTION_CONTINUE_SEARCH;
}

bool os_catch_faults(void (*handler)(const void *address, const char *access,
                                     const void *instruction)) {
  fault_handler = handler;
  return AddVectoredExceptionHandler(1, on_exception) != NULL;
}

int64_t os_now_ms(void) {
  return (int64_t)GetTickCount64();
}

os_thread_usage_t os_thread_usage(void) {
  return (os_thread_usage_t){0, 0, 0}; /* Windows counts no preemptions per thread */
}

int os_thread_id(void) {
  return 0;
}

bool os_thread_state(int thread_id, os_thread_state_t *state) {
  (void)thread_id, (void)state;
  return false;
}

/* No system call here gives randomness without a library shoal would have
 * to load (advapi32, bcrypt) inside the first malloc: the key mixes the
 * cycle counter, the process and thread ids and two addresses that address
 * space layout randomisation moves. It guards against double frees, which
 * cannot choose it, not against an attacker. */
uint64_t os_random_key(void) {
  LARGE_INTEGER counter;
  QueryPerformanceCounter(&counter);
  uint64_t key = (uint64_t)counter.QuadPart ^ __builtin_ia32_rdtsc();
  key ^= ((uint64_t)GetCurrentProcessId() << 32) ^ GetCurrentThreadId();
  key ^= (uint64_t)(uintptr_t)&counter ^ ((uint64_t)(uintptr_t)os_random_key << 17);
  key = (key ^ (key >> 30)) * 0xbf58476d1ce4e5b9ull; /* splitmix64's finaliser */
  key = (key ^ (key >> 27)) * 0x94d049bb133111ebull;
  return (key ^ (key >> 31)) | 1; /* never 0: live blocks have 0 in that word */
}

/* ---- waiting ---- */

void os_futex_wait(_Atomic(int) *address, int expected) {
  if (wait_on_address != NULL) {
    wait_on_address((volatile VOID *)address, &expected, sizeof expected, INFINITE);
    return;
  }
  if (atomic_load_explicit(address, memory_order_relaxed) == expected) SwitchToThread();
}

void os_futex_wake_one(_Atomic(int) *address) {
  if (wake_by_address != NULL) wake_by_address((PVOID)address);
}

void os_yield(void) {
  SwitchToThread();
}

/* ---- threads and processes ---- */

static void (*thread_exit_handler)(void *value);
static DWORD thread_exit_slot = FLS_OUT_OF_INDEXES;

static VOID WINAPI on_thread_exit(PVOID value) {
  if (value != NULL) thread_exit_handler(value);
}

void os_thread_exit_init(void (*on_exit)(void *value)) {
  thread_exit_handler = on_exit;
  thread_exit_slot = FlsAlloc(on_thread_exit);
}

void os_thread_exit_arm(void *value) {
  if (thread_exit_slot != FLS_OUT_OF_INDEXES) FlsSetValue(thread_exit_slot, value);
}

void os_at_fork(void (*prepare)(void), void (*parent)(void), void (*child)(void)) {
  (void)prepare;
  (void)parent;
  (void)child;
}

long os_process_id(void) {
  return (long)GetCurrentProcessId();
}

void os_signals_hold(void) {}

void os_signals_release(void) {}

/* ---- output ---- */

enum { FIRST_FILE = 3, FILES_MAX = 16 };
static _Atomic(HANDLE) open_files[FILES_MAX];
static _Atomic(HANDLE) kept_stderr;

static HANDLE handle_of(int fd) {
  if (fd == 1) return GetStdHandle(STD_OUTPUT_HANDLE);
  if (fd == 2) return GetStdHandle(STD_ERROR_HANDLE);
  if (fd < FIRST_FILE || fd >= FIRST_FILE + FILES_MAX) return INVALID_HANDLE_VALUE;
  return atomic_load_explicit(&open_files[fd - FIRST_FILE], memory_order_acquire);
}

/* The reports at exit go where stderr went at start, also when the program
 * has changed its standard handles meanwhile. */
void os_keep_stderr(void) {
  HANDLE none = NULL;
  atomic_compare_exchange_strong(&kept_stderr, &none, GetStdHandle(STD_ERROR_HANDLE));
}

void os_write_stderr(const char *text, size_t length) {
  HANDLE kept = atomic_load_explicit(&kept_stderr, memory_order_relaxed);
  HANDLE handle = kept != NULL ? kept : GetStdHandle(STD_ERROR_HANDLE);
  DWORD saved = GetLastError();
  while (length > 0 && handle != NULL && handle != INVALID_HANDLE_VALUE) {
    DWORD chunk = length > 0x40000000 ? 0x40000000 : (DWORD)length, written = 0;
    if (!WriteFile(handle, text, chunk, &written, NULL) || written == 0) break;
    text += written;
    length -= written;
  }
  SetLastError(saved);
}

void os_write_all(int fd, const char *text, size_t length) {
  if (fd == 2) {
    os_write_stderr(text, length);
    return;
  }
  HANDLE handle = handle_of(fd);
  while (length > 0 && handle != NULL && handle != INVALID_HANDLE_VALUE) {
    DWORD chunk = length > 0x40000000 ? 0x40000000 : (DWORD)length, written = 0;
    if (!WriteFile(handle, text, chunk, &written, NULL) || written == 0) return;
    text += written;
    length -= written;
  }
}

int os_open_output(const char *path) {
  HANDLE handle = CreateFileA(path, GENERIC_WRITE, FILE_SHARE_READ | FILE_SHARE_WRITE, NULL,
                              CREATE_ALWAYS, FILE_ATTRIBUTE_NORMAL, NULL);
  if (handle == INVALID_HANDLE_VALUE) {
    DWORD error = GetLastError();
    errno = error == ERROR_PATH_NOT_FOUND || error == ERROR_FILE_NOT_FOUND ? ENOENT
            : error == ERROR_ACCESS_DENIED                                 ? EACCES
                                                                           : EIO;
    return -1;
  }
  for (int i = 0; i < FILES_MAX; i++) {
    HANDLE none = NULL;
    if (atomic_compare_exchange_strong(&open_files[i], &none, handle)) return FIRST_FILE + i;
  }
  CloseHandle(handle);
  errno = EMFILE;
  return -1;
}

void os_close(int fd) {
  if (fd < FIRST_FILE || fd >= FIRST_FILE + FILES_MAX) return;
  HANDLE handle = atomic_exchange(&open_files[fd - FIRST_FILE], NULL);
  if (handle != NULL) CloseHandle(handle);
}

/* As abort() ends a program (exit status 3), without the C runtime's
 * message box or its SIGABRT handlers, which may allocate. */
void os_abort(void) {
  TerminateProcess(GetCurrentProcess(), 3);
  __builtin_trap();
}

/* ---- files and modules, for naming code addresses ---- */

const void *os_map_file(const char *path, size_t *size) {
  int saved = errno;
  const void *view = NULL;
  HANDLE file = CreateFileA(path, GENERIC_READ, FILE_SHARE_READ, NULL, OPEN_EXISTING,
                            FILE_ATTRIBUTE_NORMAL, NULL);
  if (file != INVALID_HANDLE_VALUE) {
    LARGE_INTEGER length;
    if (GetFileSizeEx(file, &length) && length.QuadPart > 0) {
      HANDLE mapping = CreateFileMappingA(file, NULL, PAGE_READONLY, 0, 0, NULL);
      if (mapping != NULL) {
        view = MapViewOfFile(mapping, FILE_MAP_READ, 0, 0, 0);
        if (view != NULL) *size = (size_t)length.QuadPart;
        CloseHandle(mapping); /* the view keeps it */
      }
    }
    CloseHandle(file);
  }
  errno = saved;
  return view;
}

void os_unmap_file(const void *address, size_t size) {
  (void)size;
  UnmapViewOfFile(address);
}

size_t os_read_link(const char *path, char *out, size_t capacity) {
  (void)path; /* no /proc/self/exe to read: os_module_of names modules */
  if (capacity > 0) out[0] = '\0';
  return 0;
}

bool os_module_of(const void *address, char *name, size_t capacity, uintptr_t *base) {
  HMODULE module;
  if (capacity == 0 || !GetModuleHandleExA(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS |
                                               GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
                                           (LPCSTR)address, &module))
    return false;
  char path[MAX_PATH];
  DWORD length = GetModuleFileNameA(module, path, sizeof path);
  if (length == 0 || length >= sizeof path) return false;
  const char *shown = path;
  for (const char *p = path; *p != '\0'; p++)
    if (*p == '\\' || *p == '/') shown = p + 1;
  size_t shown_length = strlen(shown);
  if (shown_length >= capacity) shown_length = capacity - 1;
  memcpy(name, shown, shown_length);
  name[shown_length] = '\0';
  *base = (uintptr_t)module;
  return true;
}

size_t os_executable_path(char *out, size_t capacity) {
  if (capacity == 0) return 0;
  DWORD length =
      GetModuleFileNameA(NULL, out, (DWORD)(capacity > 0xffffffffu ? 0xffffffffu : capacity));
  if (length == 0 || length >= capacity) { /* truncated: a path cut short names another file */
    out[0] = '\0';
    return 0;
  }
  return length;
}

/* ReadProcessMemory on this process copies what is readable and fails on
 * the first page that is not, without an exception. */
bool os_read_memory(const void *address, void *out, size_t size) {
  if (size == 0) return true;
  int saved = errno;
  SIZE_T copied = 0;
  bool read = ReadProcessMemory(GetCurrentProcess(), address, out, size, &copied) && copied == size;
  errno = saved;
  return read;
}
