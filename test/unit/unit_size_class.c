/* Size classes: the table and the bit arithmetic agree, every class is a
 * multiple of 16, waste above 128 B is at most 12.5 % (above 64 B at most
 * 15/65, the price of 16-byte alignment), classes are ordered, and the class of a size rounded up
 * to an alignment is a multiple of that alignment (what aligned allocation relies on to avoid
 * interior pointers). */
#include "../testhelper.h"
#include "core/internal.h"

int main(void) {
  for (int c = 1; c < CLASS_COUNT; c++) CHECK(class_block_size[c] > class_block_size[c - 1]);
  CHECK(class_block_size[0] == MIN_BLOCK_SIZE);
  CHECK(class_block_size[CLASS_COUNT - 1] == MEDIUM_MAX);
  /* The classes with direct slots (and the small class caches) are the first DIRECT_CLASSES. */
  CHECK(class_block_size[DIRECT_CLASSES - 1] == DIRECT_MAX);
  for (size_t size = 0; size <= MEDIUM_MAX; size++) {
    uint8_t c = size_class_of(size);
    CHECK_CTX(c < CLASS_COUNT, "size %zu", size);
    CHECK_CTX(class_block_size[c] >= size, "size %zu", size);
    CHECK_CTX(c == 0 || class_block_size[c - 1] < size, "size %zu: not the smallest class", size);
    CHECK(class_block_size[c] % 16 == 0);
    if (size > 128)
      CHECK_CTX((class_block_size[c] - size) * 8 <= size, "size %zu wastes >12.5%%", size);
    if (size > 64) CHECK_CTX((class_block_size[c] - size) * 65 <= size * 15, "size %zu", size);
    if (size > DIRECT_MAX) CHECK(size_class_of_large(size) == c);
  }
  for (size_t size = 129; size <= DIRECT_MAX; size++)
    CHECK(size_class_of_large(size) == size_class_of(size));
  for (size_t alignment = 16; alignment <= MEDIUM_MAX; alignment *= 2)
    for (size_t size = alignment; size <= MEDIUM_MAX; size += alignment)
      CHECK_CTX(class_block_size[size_class_of(size)] % alignment == 0, "size %zu align %zu", size,
                alignment);
  for (int c = 0; c < CLASS_COUNT; c++) {
    size_t page_bytes = class_slices[c] * SLICE_SIZE;
    /* Enough blocks to a page, in the fewest slices that hold them. */
    size_t target = class_block_size[c] <= 8192 ? PAGE_TARGET_BLOCKS : BIG_PAGE_TARGET_BLOCKS;
    CHECK_CTX(page_bytes / class_block_size[c] >= target, "class %d", c);
    CHECK_CTX(class_slices[c] == 1 || (page_bytes - SLICE_SIZE) / class_block_size[c] < target,
              "class %d: a slice fewer would do", c);
    CHECK(page_bytes / class_block_size[c] < 65536); /* the remote list's 16-bit count */
  }
  printf("size classes: %d classes, all checks hold\n", CLASS_COUNT);
  return 0;
}
