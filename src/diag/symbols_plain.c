/* symbols_plain.c — names for code addresses where shoal reads no symbol
 * table (PE programs: Windows): "0xADDR (module+0xOFF)", the module and
 * the offset a debugger or `addr2line -e module` turns into a line. The
 * ELF symboliser (symbols.c) names functions; this one never allocates
 * either, and needs no lock. */
#include "core/internal.h"

size_t symbol_name(const void *address, char *out, size_t capacity) {
  if (capacity == 0) return 0;
  char module[64];
  uintptr_t base = 0;
  int length;
  if (os_module_of(address, module, sizeof module, &base))
    length =
        text_format(out, capacity, "0x%llx (%s+0x%llx)", (unsigned long long)(uintptr_t)address,
                    module, (unsigned long long)((uintptr_t)address - base));
  else
    length = text_format(out, capacity, "0x%llx", (unsigned long long)(uintptr_t)address);
  if (length < 0) length = 0;
  return (size_t)length < capacity ? (size_t)length : capacity - 1;
}
