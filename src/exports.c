/* exports.c — the names a program calls: the C library's allocation API and
 * C++'s operator new/delete family, each the inline fast path of alloc.h.
 * Linking -lshoal or preloading libshoal.so makes these the program's.
 *
 * operator new must call the new-handler and throw std::bad_alloc; those
 * live in the C++ runtime, reached through weak references so that a C
 * program does not need it (a program that calls new has it loaded). */
#include "alloc.h"

#include <errno.h>

exported void *malloc(size_t size) {
  return alloc_fast(size);
}
exported void free(void *p) {
  free_fast(p, 0);
}
exported void *calloc(size_t count, size_t size) {
  return shoal_calloc(count, size);
}
exported void *realloc(void *p, size_t size) {
  return shoal_realloc(p, size);
}
exported void *reallocarray(void *p, size_t count, size_t size) {
  return shoal_reallocarray(p, count, size);
}
exported int posix_memalign(void **result, size_t alignment, size_t size) {
  return shoal_posix_memalign(result, alignment, size);
}
exported void *aligned_alloc(size_t alignment, size_t size) {
  return shoal_aligned_alloc(alignment, size);
}
exported void *memalign(size_t alignment, size_t size) {
  return shoal_memalign(alignment, size);
}
exported void *valloc(size_t size) {
  return shoal_valloc(size);
}
exported void *pvalloc(size_t size) {
  return shoal_pvalloc(size);
}
exported size_t malloc_usable_size(void *p) {
  return shoal_malloc_usable_size(p);
}
/* C23 */
exported void free_sized(void *p, size_t size) {
  free_fast(p, size);
}
exported void free_aligned_sized(void *p, size_t alignment, size_t size) {
  (void)alignment;
  free_fast(p, size);
}

/* ---- C++ (Itanium ABI names, size_t = unsigned long) ---- */

typedef void (*new_handler_t)(void);
extern new_handler_t _ZSt15get_new_handlerv(void) __attribute__((weak));
extern void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn));

/* Out of memory in new: ask the new-handler to make room and retry, then
 * throw (or return NULL for the nothrow forms). */
static slow_path void *new_failed(size_t size, size_t alignment, bool nothrow) {
  for (;;) {
    new_handler_t handler = _ZSt15get_new_handlerv != NULL ? _ZSt15get_new_handlerv() : NULL;
    if (handler == NULL) {
      if (nothrow) return NULL;
      if (_ZSt17__throw_bad_allocv != NULL) _ZSt17__throw_bad_allocv();
      message("operator new: out of memory for %zu bytes and no C++ runtime to throw", size);
      os_abort();
    }
    handler();
    void *p = alignment != 0 ? shoal_aligned_alloc(alignment, size) : alloc_fast(size);
    if (p != NULL) return p;
  }
}

fast_path void *new_fast(size_t size, bool nothrow) {
  void *p = alloc_fast(size);
  return likely(p != NULL) ? p : new_failed(size, 0, nothrow);
}

static void *new_aligned(size_t size, size_t alignment, bool nothrow) {
  void *p = shoal_aligned_alloc(alignment, size);
  return likely(p != NULL) ? p : new_failed(size, alignment, nothrow);
}

typedef struct nothrow_s nothrow_t; /* std::nothrow_t, passed by reference */

/* plain */
exported void *_Znwm(size_t size) {
  return new_fast(size, false);
}
exported void *_Znam(size_t size) {
  return new_fast(size, false);
}
exported void *_ZnwmRKSt9nothrow_t(size_t size, const nothrow_t *tag) {
  (void)tag;
  return new_fast(size, true);
}
exported void *_ZnamRKSt9nothrow_t(size_t size, const nothrow_t *tag) {
  (void)tag;
  return new_fast(size, true);
}
exported void _ZdlPv(void *p) {
  free_fast(p, 0);
}
exported void _ZdaPv(void *p) {
  free_fast(p, 0);
}
exported void _ZdlPvRKSt9nothrow_t(void *p, const nothrow_t *tag) {
  (void)tag;
  free_fast(p, 0);
}
exported void _ZdaPvRKSt9nothrow_t(void *p, const nothrow_t *tag) {
  (void)tag;
  free_fast(p, 0);
}
/* sized */
exported void _ZdlPvm(void *p, size_t size) {
  free_fast(p, size);
}
exported void _ZdaPvm(void *p, size_t size) {
  free_fast(p, size);
}
/* aligned (std::align_val_t is a size_t) */
exported void *_ZnwmSt11align_val_t(size_t size, size_t alignment) {
  return new_aligned(size, alignment, false);
}
exported void *_ZnamSt11align_val_t(size_t size, size_t alignment) {
  return new_aligned(size, alignment, false);
}
exported void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t size, size_t alignment,
                                                  const nothrow_t *tag) {
  (void)tag;
  return new_aligned(size, alignment, true);
}
exported void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t size, size_t alignment,
                                                  const nothrow_t *tag) {
  (void)tag;
  return new_aligned(size, alignment, true);
}
exported void _ZdlPvSt11align_val_t(void *p, size_t alignment) {
  (void)alignment;
  free_fast(p, 0);
}
exported void _ZdaPvSt11align_val_t(void *p, size_t alignment) {
  (void)alignment;
  free_fast(p, 0);
}
exported void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t alignment, const nothrow_t *tag) {
  (void)alignment, (void)tag;
  free_fast(p, 0);
}
exported void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t alignment, const nothrow_t *tag) {
  (void)alignment, (void)tag;
  free_fast(p, 0);
}
exported void _ZdlPvmSt11align_val_t(void *p, size_t size, size_t alignment) {
  (void)alignment;
  free_fast(p, size);
}
exported void _ZdaPvmSt11align_val_t(void *p, size_t size, size_t alignment) {
  (void)alignment;
  free_fast(p, size);
}
