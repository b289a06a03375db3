/* exports.c — the names a program calls: the C library's allocation API and
 * C++'s operator new/delete family, each the inline fast path of alloc.h.
 * Linking -lshoal or preloading libshoal.so makes these the program's.
 *
 * operator new must call the new-handler and throw std::bad_alloc; those
 * live in the C++ runtime, reached through weak references so that a C
 * program does not need it (a program that calls new has it loaded). */
#include "api/api.h"

#include <errno.h>

exported void *malloc(size_t size) {
  return api_malloc(size, OWN_CALLER);
}
exported void free(void *p) {
  api_free(p, 0, OWN_CALLER);
}
exported void *calloc(size_t count, size_t size) {
  return api_calloc(count, size, CALLER());
}
exported void *realloc(void *p, size_t size) {
  return api_realloc(p, size, CALLER());
}
exported void *reallocarray(void *p, size_t count, size_t size) {
  return api_reallocarray(p, count, size, CALLER());
}
exported int posix_memalign(void **result, size_t alignment, size_t size) {
  return api_posix_memalign(result, alignment, size, CALLER());
}
exported void *aligned_alloc(size_t alignment, size_t size) {
  return api_aligned_alloc(alignment, size, CALLER());
}
exported void *memalign(size_t alignment, size_t size) {
  return api_memalign(alignment, size, CALLER());
}
exported void *valloc(size_t size) {
  return api_valloc(size, CALLER());
}
exported void *pvalloc(size_t size) {
  return api_pvalloc(size, CALLER());
}
exported size_t malloc_usable_size(void *p) {
  return api_usable_size(p, "malloc_usable_size", CALLER());
}
/* C23 */
exported void free_sized(void *p, size_t size) {
  api_free(p, size, OWN_CALLER);
}
exported void free_aligned_sized(void *p, size_t alignment, size_t size) {
  (void)alignment;
  api_free(p, size, OWN_CALLER);
}

/* The C++ operators reach the C++ runtime through weak references, which
 * ELF keeps through the merge of libshoal.a into one object and COFF (PE:
 * Windows) does not. There, C++ programs get shoal through the runtime's
 * own operator new and delete, which call malloc and free: shoal's, when
 * libstdc++ is linked statically (README, "Windows"). */
#if defined(__ELF__)
/* ---- C++ (Itanium ABI names, size_t = unsigned long) ---- */

typedef void (*new_handler_t)(void);
extern new_handler_t _ZSt15get_new_handlerv(void) __attribute__((weak));
extern void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn));

/* Out of memory in new: ask the new-handler to make room and retry, then
 * throw (or return NULL for the nothrow forms). */
static slow_path void *new_failed(size_t size, size_t alignment, bool nothrow, caller_t caller) {
  for (;;) {
    new_handler_t handler = _ZSt15get_new_handlerv != NULL ? _ZSt15get_new_handlerv() : NULL;
    if (handler == NULL) {
      if (nothrow) return NULL;
      if (_ZSt17__throw_bad_allocv != NULL) _ZSt17__throw_bad_allocv();
      message("operator new: out of memory for %zu bytes and no C++ runtime to throw", size);
      os_abort();
    }
    handler();
    void *p =
        alignment != 0 ? api_aligned_alloc(alignment, size, caller) : api_malloc(size, caller);
    if (p != NULL) return p;
  }
}

/* new's slow exits: malloc's, then the new-handler when it fails. The
 * fast path is malloc's, which never fails, so new tests nothing more. */
static slow_path void *new_generic(size_t size, shoal_heap_t *heap, caller_t caller) {
  if (caller == OWN_CALLER) caller = CALLER();
  void *p = api_alloc_exit(size, heap, caller);
  return likely(p != NULL) ? p : new_failed(size, 0, false, caller);
}

static slow_path void *new_generic_nothrow(size_t size, shoal_heap_t *heap, caller_t caller) {
  if (caller == OWN_CALLER) caller = CALLER();
  void *p = api_alloc_exit(size, heap, caller);
  return likely(p != NULL) ? p : new_failed(size, 0, true, caller);
}

fast_path void *new_aligned(size_t size, size_t alignment, bool nothrow, caller_t caller) {
  void *p = api_aligned_alloc(alignment, size, caller);
  return likely(p != NULL) ? p : new_failed(size, alignment, nothrow, caller);
}

typedef struct nothrow_s nothrow_t; /* std::nothrow_t, passed by reference */

/* plain */
exported void *_Znwm(size_t size) {
  return alloc_fast_then(size, OWN_CALLER, new_generic);
}
exported void *_Znam(size_t size) {
  return alloc_fast_then(size, OWN_CALLER, new_generic);
}
exported void *_ZnwmRKSt9nothrow_t(size_t size, const nothrow_t *tag) {
  (void)tag;
  return alloc_fast_then(size, OWN_CALLER, new_generic_nothrow);
}
exported void *_ZnamRKSt9nothrow_t(size_t size, const nothrow_t *tag) {
  (void)tag;
  return alloc_fast_then(size, OWN_CALLER, new_generic_nothrow);
}
exported void _ZdlPv(void *p) {
  api_free(p, 0, OWN_CALLER);
}
exported void _ZdaPv(void *p) {
  api_free(p, 0, OWN_CALLER);
}
exported void _ZdlPvRKSt9nothrow_t(void *p, const nothrow_t *tag) {
  (void)tag;
  api_free(p, 0, OWN_CALLER);
}
exported void _ZdaPvRKSt9nothrow_t(void *p, const nothrow_t *tag) {
  (void)tag;
  api_free(p, 0, OWN_CALLER);
}
/* sized */
exported void _ZdlPvm(void *p, size_t size) {
  api_free(p, size, OWN_CALLER);
}
exported void _ZdaPvm(void *p, size_t size) {
  api_free(p, size, OWN_CALLER);
}
/* aligned (std::align_val_t is a size_t) */
exported void *_ZnwmSt11align_val_t(size_t size, size_t alignment) {
  return new_aligned(size, alignment, false, CALLER());
}
exported void *_ZnamSt11align_val_t(size_t size, size_t alignment) {
  return new_aligned(size, alignment, false, CALLER());
}
exported void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t size, size_t alignment,
                                                  const nothrow_t *tag) {
  (void)tag;
  return new_aligned(size, alignment, true, CALLER());
}
exported void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t size, size_t alignment,
                                                  const nothrow_t *tag) {
  (void)tag;
  return new_aligned(size, alignment, true, CALLER());
}
exported void _ZdlPvSt11align_val_t(void *p, size_t alignment) {
  (void)alignment;
  api_free(p, 0, OWN_CALLER);
}
exported void _ZdaPvSt11align_val_t(void *p, size_t alignment) {
  (void)alignment;
  api_free(p, 0, OWN_CALLER);
}
exported void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t alignment, const nothrow_t *tag) {
  (void)alignment, (void)tag;
  api_free(p, 0, OWN_CALLER);
}
exported void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t alignment, const nothrow_t *tag) {
  (void)alignment, (void)tag;
  api_free(p, 0, OWN_CALLER);
}
exported void _ZdlPvmSt11align_val_t(void *p, size_t size, size_t alignment) {
  (void)alignment;
  api_free(p, size, OWN_CALLER);
}
exported void _ZdaPvmSt11align_val_t(void *p, size_t size, size_t alignment) {
  (void)alignment;
  api_free(p, size, OWN_CALLER);
}
#endif /* __ELF__ */
