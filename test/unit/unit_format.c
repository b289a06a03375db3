/* format.c: text_format writes what the C library's snprintf writes, for
 * every conversion, flag, width, precision and length shoal's lines use,
 * at the extremes of each type, and truncates as snprintf does: the text
 * cut to the capacity and terminated, the whole length returned, nothing
 * written at capacity 0. */
#include "../testhelper.h"

#include <limits.h>
#include <stddef.h>

#include "core/internal.h"

static int checks;

/* Both into buffers filled alike, so bytes past the terminator compare too. */
#define SAME(capacity, ...)                                                                        \
  do {                                                                                             \
    char ours[96], theirs[96];                                                                     \
    memset(ours, 'X', sizeof ours);                                                                \
    memset(theirs, 'X', sizeof theirs);                                                            \
    size_t room = opaque_size(capacity); /* truncation is what some cases test */                  \
    int ours_length = text_format(ours, room, __VA_ARGS__);                                        \
    int theirs_length = snprintf(theirs, room, __VA_ARGS__);                                       \
    CHECK_CTX(ours_length == theirs_length && memcmp(ours, theirs, sizeof ours) == 0,              \
              "%s: ours [%.*s] %d, the C library's [%.*s] %d", #__VA_ARGS__, 40, ours,             \
              ours_length, 40, theirs, theirs_length);                                             \
    checks++;                                                                                      \
  } while (0)

int main(void) {
  const size_t full = 96;
  SAME(full, "plain text, no conversion");
  SAME(full, "%d %d %d %d", 0, -5, INT_MAX, INT_MIN);
  SAME(full, "[%5d] [%-5d] [%05d] [%.3d] [%8.3d] [%-8.3d]", 42, 42, -42, 7, -7, 7);
  SAME(full, "%i %u %u", -1, 0u, UINT_MAX);
  SAME(full, "%ld %ld %lu", LONG_MIN, LONG_MAX, ULONG_MAX);
  SAME(full, "%lld %llu %llx", LLONG_MIN, ULLONG_MAX, 0x0123456789abcdefULL);
  SAME(full, "%zu %zu [%12zu] [%-14zu] [%9zu]", (size_t)0, SIZE_MAX, (size_t)4096, (size_t)7,
       (size_t)123456789);
  SAME(full, "%td %td %td", (ptrdiff_t)-100000, PTRDIFF_MAX, PTRDIFF_MIN);
  SAME(full, "%jd %ju", INTMAX_MIN, UINTMAX_MAX);
  SAME(full, "%x %x [%08x] [%-6x]", 0u, 0xdeadbeefu, 0xbeefu, 0xau);
  SAME(full, "%hhu %hu %hd", (unsigned char)200, (unsigned short)60000, (short)-300);
  SAME(full, "[%s] [%10s] [%-11s] [%.2s] [%12.3s] [%s]", "abc", "right", "left", "truncated", "cut",
       "");
  SAME(full, "[%*d] [%-*d] [%.*s] [%*s]", 6, 12, 6, 12, 3, "precision", -4, "neg");
  SAME(full, "%c%c%c [%3c] [%-3c]", 'a', 'b', 'c', 'd', 'e');
  SAME(full, "100%% of %s", "it");
  SAME(full, "%p %p", (void *)0x1000, (void *)&checks);
  SAME(full, "%s", (const char *)opaque_pointer(NULL));
  /* Truncated: the text cut, terminated, the whole length returned. */
  SAME(1, "%s", "anything");
  SAME(5, "%s and %d", "longer", 123456);
  SAME(8, "%12zu", (size_t)99);
  SAME(10, "[%-11s]", "left");
  SAME(0, "%d", 12345);
  printf("format: %d comparisons with the C library's snprintf hold\n", checks);
  return 0;
}
