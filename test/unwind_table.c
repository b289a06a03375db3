/* Win64: a program linked with libshoal.a keeps a true exception table.
 *
 * Windows unwinds every frame (a C++ exception, a debugger's stack, a
 * crash report) by searching the image's .pdata, sorted by start address,
 * by halves. A libshoal.a that brought entries with wrong starts (an
 * `ld -r` merge of clang's objects by MinGW's GNU ld did) leaves the table
 * unsorted: the search then misses entries of the program's own functions
 * as well as shoal's, depending on where the link placed the code.
 *
 * What is checked, in this running program's image:
 *   - the entries are sorted, each ends after it starts, none overlaps the
 *     next: the table the search needs;
 *   - the system's lookup finds, for shoal's functions and for main, the
 *     entry that covers the address, starting at the function (a leaf
 *     may have none). cxx_static throws a C++ exception past shoal's code. */
#include "testhelper.h"

#include "shoal.h"

static const IMAGE_RUNTIME_FUNCTION_ENTRY *image_table(uintptr_t image, size_t *count) {
  const IMAGE_DOS_HEADER *dos = (const IMAGE_DOS_HEADER *)image;
  const IMAGE_NT_HEADERS64 *nt = (const IMAGE_NT_HEADERS64 *)(image + (uintptr_t)dos->e_lfanew);
  IMAGE_DATA_DIRECTORY exceptions =
      nt->OptionalHeader.DataDirectory[IMAGE_DIRECTORY_ENTRY_EXCEPTION];
  *count = exceptions.Size / sizeof(IMAGE_RUNTIME_FUNCTION_ENTRY);
  return (const IMAGE_RUNTIME_FUNCTION_ENTRY *)(image + exceptions.VirtualAddress);
}

static void check_sorted(const IMAGE_RUNTIME_FUNCTION_ENTRY *table, size_t count) {
  CHECK(count > 100);
  for (size_t i = 0; i < count; i++) {
    if (table[i].EndAddress <= table[i].BeginAddress) {
      fprintf(stderr, "entry %zu: ends at 0x%lx, before its start 0x%lx\n", i,
              (unsigned long)table[i].EndAddress, (unsigned long)table[i].BeginAddress);
      CHECK(!"an entry ends after it starts");
    }
    if (i > 0 && table[i].BeginAddress < table[i - 1].EndAddress) {
      fprintf(stderr, "entry %zu (0x%lx-0x%lx) starts before entry %zu ends (0x%lx-0x%lx)\n", i,
              (unsigned long)table[i].BeginAddress, (unsigned long)table[i].EndAddress, i - 1,
              (unsigned long)table[i - 1].BeginAddress, (unsigned long)table[i - 1].EndAddress);
      CHECK(!"the entries are sorted and apart");
    }
  }
}

/* A function with a frame has an entry that starts at it; a leaf without
 * one has none, and the unwinder takes its return address from the stack. */
static void check_lookup(const char *name, const void *function, bool needs_entry) {
  DWORD64 image = 0;
  DWORD64 address = (DWORD64)(uintptr_t)function;
  PRUNTIME_FUNCTION entry = RtlLookupFunctionEntry(address, &image, NULL);
  if (entry == NULL) {
    if (needs_entry) fprintf(stderr, "%s: no entry\n", name);
    CHECK(!needs_entry);
    return;
  }
  if (image + entry->BeginAddress != address || address >= image + entry->EndAddress) {
    fprintf(stderr, "%s at 0x%llx: found the entry 0x%llx-0x%llx\n", name,
            (unsigned long long)address, (unsigned long long)(image + entry->BeginAddress),
            (unsigned long long)(image + entry->EndAddress));
    CHECK(!"the entry found is the function's");
  }
}

int main(void) {
  /* Shoal's slow paths run first: large and huge blocks (opaque, lest a
   * compiler drop a malloc and free whose block no one uses). */
  void *large = opaque_pointer(malloc(opaque_size(300000)));
  void *huge = opaque_pointer(malloc(opaque_size(4 << 20)));
  CHECK(large != NULL && huge != NULL);
  free(large);
  free(huge);

  size_t count = 0;
  const IMAGE_RUNTIME_FUNCTION_ENTRY *table =
      image_table((uintptr_t)GetModuleHandleW(NULL), &count);
  check_sorted(table, count);

  check_lookup("main", (const void *)main, true);
  check_lookup("shoal_stats", (const void *)shoal_stats, true);
  check_lookup("shoal_collect", (const void *)shoal_collect, false);
  check_lookup("shoal_check_heap", (const void *)shoal_check_heap, false);
  check_lookup("malloc", (const void *)malloc, false);
  check_lookup("free", (const void *)free, false);
  check_lookup("realloc", (const void *)realloc, false);
  check_lookup("calloc", (const void *)calloc, false);
  printf("unwind_table: %zu entries sorted and apart; lookups find their functions\n", count);
  return 0;
}
