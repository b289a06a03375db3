/* size_class.c — request size to size class to block size, in O(1).
 *
 * Every block is 16-byte aligned, as C requires of malloc on x86-64 (an
 * object of 16-byte alignment may live in any request of 16 bytes or more)
 * and as glibc, C++'s default new alignment and Free Pascal's heap promise.
 * So classes step by 16 up to 128 bytes, then come eight per doubling up to
 * MEDIUM_MAX (32 KiB): above 128 bytes a block wastes at most 12.5 % of the
 * request; between 64 and 128 the 16-byte step allows up to 23 % (65 -> 80).
 * Every class is a multiple of every power of two up to 2^(b-3) where 2^b
 * <= size, so the smallest class at or above a multiple of an alignment is
 * a multiple of that alignment: aligned requests need no interior pointers.
 * FastMM (seed 003) split small and medium blocks; here one table covers
 * both. A page is one slice up to 8 KiB (8 blocks at least); above, a page
 * of one or two slices holds four blocks or more, carved one at a time as
 * they are handed out. Blocks of 8-32 KiB were large blocks (a page each)
 * until rptest showed what that costs: a 64 KiB slice for each, resident to
 * the most any earlier block of it touched, three times the peers' memory
 * and a trip through the segment's bitmap per block. Beyond MEDIUM_MAX a
 * block is a page of its own (large), sized by OS pages; realloc grows a
 * buffer into one once it passes 8 KiB (alloc.c), so that it grows in place.
 * Above DIRECT_MAX the class comes from bit arithmetic (size_class_of_large
 * in internal.h, inline for the fast path). The tables follow this rule and
 * are checked by test/unit/unit_size_class.c. */
#include "core/internal.h"

const uint32_t class_block_size[CLASS_COUNT] = {
    16,    32,    48,    64,    80,    96,    112,   128,   144,   160,   176,   192,
    208,   224,   240,   256,   288,   320,   352,   384,   416,   448,   480,   512,
    576,   640,   704,   768,   832,   896,   960,   1024,  1152,  1280,  1408,  1536,
    1664,  1792,  1920,  2048,  2304,  2560,  2816,  3072,  3328,  3584,  3840,  4096,
    4608,  5120,  5632,  6144,  6656,  7168,  7680,  8192,  9216,  10240, 11264, 12288,
    13312, 14336, 15360, 16384, 18432, 20480, 22528, 24576, 26624, 28672, 30720, 32768,
};

/* Slices per page: enough for PAGE_TARGET_BLOCKS blocks up to 8 KiB, for
 * BIG_PAGE_TARGET_BLOCKS above, at least one. */
const uint8_t class_slices[CLASS_COUNT] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
};

/* Class of each 8-byte step of request up to DIRECT_MAX. */
const uint8_t direct_class[DIRECT_SLOTS] = {
    0,  0,  0,  1,  1,  2,  2,  3,  3,  4,  4,  5,  5,  6,  6,  7,  7,  8,  8,  9,  9,  10,
    10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15, 16, 16, 16, 16, 17, 17, 17, 17, 18, 18, 18,
    18, 19, 19, 19, 19, 20, 20, 20, 20, 21, 21, 21, 21, 22, 22, 22, 22, 23, 23, 23, 23, 24,
    24, 24, 24, 24, 24, 24, 24, 25, 25, 25, 25, 25, 25, 25, 25, 26, 26, 26, 26, 26, 26, 26,
    26, 27, 27, 27, 27, 27, 27, 27, 27, 28, 28, 28, 28, 28, 28, 28, 28, 29, 29, 29, 29, 29,
    29, 29, 29, 30, 30, 30, 30, 30, 30, 30, 30, 31, 31, 31, 31, 31, 31, 31, 31,
};
