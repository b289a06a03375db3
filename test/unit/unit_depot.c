/* The depot seen from inside: chains put are joined into groups of up to a
 * take, a take pops a group (and the one below when the top is small)
 * whole, with its true tail and count; a shard full or busy sends a put on
 * to the next, a take finds chains in any shard; the depot holds up to
 * DEPOT_MAX_BYTES a class; a fork child's recount leaves every chain
 * takeable; and threads putting and taking at once lose no block and get
 * none twice. */
#include "../testhelper.h"
#include "core/internal.h"

#include <pthread.h>
#include <string.h>

#define BLOCK_SIZE 64
typedef struct test_block_s {
  _Alignas(BLOCK_SIZE) shoal_block_t block;
  unsigned char rest[BLOCK_SIZE - sizeof(shoal_block_t)];
} test_block_t;

#define CHAIN_BLOCKS (OUTBOX_BYTES / BLOCK_SIZE) /* a chain as the outbox sends one */
#define TOTAL_BLOCKS (DEPOT_MAX_BYTES / BLOCK_SIZE + CHAIN_BLOCKS)
static test_block_t *pool;  /* TOTAL_BLOCKS of them */
static unsigned char *seen; /* a count per block taken */
static uint8_t size_class;  /* the class of BLOCK_SIZE */

static chain_t chain_of(size_t first, size_t count) {
  for (size_t i = first; i + 1 < first + count; i++) pool[i].block.next = &pool[i + 1].block;
  pool[first + count - 1].block.next = NULL;
  return (chain_t){&pool[first].block, &pool[first + count - 1].block, (uint32_t)count};
}

/* Walks a taken chain: its count and tail are true, it ends, and each of
 * its blocks is one of the pool's, marked seen once more. */
static size_t take_check(chain_t chain) {
  size_t length = 0;
  shoal_block_t *last = NULL;
  for (shoal_block_t *block = chain.head; block != NULL; block = block->next) {
    test_block_t *at = (test_block_t *)(void *)block;
    CHECK(at >= pool && at < pool + TOTAL_BLOCKS);
    seen[at - pool]++;
    last = block;
    length++;
    CHECK(length <= TOTAL_BLOCKS);
  }
  CHECK(length == chain.count);
  CHECK(last == chain.tail);
  return length;
}

static size_t take_all(unsigned home) {
  size_t taken = 0;
  for (chain_t chain; (chain = depot_take(size_class, 1, home)).head != NULL;)
    taken += take_check(chain);
  CHECK(!depot_may_hold(size_class));
  return taken;
}

static void seen_expect(size_t first, size_t count) {
  for (size_t i = 0; i < TOTAL_BLOCKS; i++) CHECK(seen[i] == (i >= first && i < first + count));
  memset(seen, 0, TOTAL_BLOCKS);
}

/* Four chains fill a group; a fifth starts one; a take of the fifth, less
 * than half a take, takes the group below with it. */
static void test_groups(void) {
  const size_t per_group = DEPOT_TAKE_BYTES / OUTBOX_BYTES;
  for (size_t c = 0; c <= per_group; c++)
    CHECK(depot_put(size_class, chain_of(c * CHAIN_BLOCKS, CHAIN_BLOCKS), 1, 3));
  CHECK(depot_may_hold(size_class));
  chain_t taken = depot_take(size_class, 1, 3);
  CHECK(take_check(taken) == (per_group + 1) * CHAIN_BLOCKS);
  CHECK(taken.head == &pool[per_group * CHAIN_BLOCKS].block); /* the last put comes first */
  CHECK(!depot_may_hold(size_class));
  CHECK(depot_take(size_class, 1, 3).head == NULL);
  seen_expect(0, (per_group + 1) * CHAIN_BLOCKS);

  /* Eight chains: two full groups, taken one at a time. */
  for (size_t c = 0; c < 2 * per_group; c++)
    CHECK(depot_put(size_class, chain_of(c * CHAIN_BLOCKS, CHAIN_BLOCKS), 1, 5));
  CHECK(take_check(depot_take(size_class, 1, 5)) == per_group * CHAIN_BLOCKS);
  CHECK(take_check(depot_take(size_class, 1, 5)) == per_group * CHAIN_BLOCKS);
  CHECK(!depot_may_hold(size_class));
  seen_expect(0, 2 * per_group * CHAIN_BLOCKS);
}

/* A chain put in one shard is found from any other home. */
static void test_any_home(void) {
  for (unsigned put_home = 0; put_home < DEPOT_SHARDS; put_home++) {
    unsigned take_home = (put_home + 5) & (DEPOT_SHARDS - 1);
    CHECK(depot_put(size_class, chain_of(0, 3), 1, put_home));
    CHECK(take_check(depot_take(size_class, 1, take_home)) == 3);
    CHECK(!depot_may_hold(size_class));
    seen_expect(0, 3);
  }
}

/* Every shard fills before a put is refused, at DEPOT_MAX_BYTES in all;
 * after a fork child's recount everything is still there to take. */
static void test_capacity_and_fork_child(void) {
  size_t chains = 0;
  while (depot_put(size_class, chain_of(chains * CHAIN_BLOCKS, CHAIN_BLOCKS), 1, 2)) {
    chains++;
    CHECK(chains * CHAIN_BLOCKS < TOTAL_BLOCKS);
  }
  CHECK(chains * OUTBOX_BYTES == DEPOT_MAX_BYTES);
  depot_fork_child();
  CHECK(depot_may_hold(size_class));
  CHECK(!depot_put(size_class, chain_of(chains * CHAIN_BLOCKS, CHAIN_BLOCKS), 1, 2));
  CHECK(take_all(7) == chains * CHAIN_BLOCKS);
  seen_expect(0, chains * CHAIN_BLOCKS);
}

/* Threads put chains of their blocks and take whatever comes, at once. */
#define THREADS       4
#define THREAD_BLOCKS 4096
#define ROUNDS        20000
static void *put_and_take(void *arg) {
  size_t id = (size_t)(uintptr_t)arg;
  unsigned home = (unsigned)id * 3u;
  /* Blocks this thread holds: its own at first, then whatever it took. */
  shoal_block_t *held = chain_of(id * THREAD_BLOCKS, THREAD_BLOCKS).head;
  uint64_t random = 0x9E3779B97F4A7C15u * (id + 1);
  for (int round = 0; round < ROUNDS; round++) {
    random ^= random << 13, random ^= random >> 7, random ^= random << 17;
    uint32_t want = 1 + (uint32_t)(random % CHAIN_BLOCKS);
    chain_t chain = {held, NULL, 0};
    shoal_block_t *block = held;
    while (block != NULL && chain.count < want) {
      chain.tail = block;
      chain.count++;
      block = block->next;
    }
    if (chain.count > 0) {
      chain.tail->next = NULL;
      if (depot_put(size_class, chain, 1, home)) {
        held = block;
      } else {
        chain.tail->next = block;
      }
    }
    if (round % 2 == 0) {
      chain_t taken = depot_take(size_class, 1, home);
      if (taken.head != NULL) {
        size_t length = 0;
        for (shoal_block_t *b = taken.head; b != NULL; b = b->next) length++;
        CHECK(length == taken.count && taken.tail->next == NULL);
        taken.tail->next = held;
        held = taken.head;
      }
    }
  }
  return held;
}

static void test_threads(void) {
  pthread_t threads[THREADS];
  for (size_t t = 0; t < THREADS; t++)
    CHECK(pthread_create(&threads[t], NULL, put_and_take, (void *)(uintptr_t)t) == 0);
  size_t count = 0;
  for (size_t t = 0; t < THREADS; t++) {
    void *held;
    CHECK(pthread_join(threads[t], &held) == 0);
    for (shoal_block_t *block = held; block != NULL; block = block->next) {
      seen[(test_block_t *)(void *)block - pool]++;
      count++;
    }
  }
  count += take_all(0);
  CHECK(count == THREADS * THREAD_BLOCKS);
  seen_expect(0, THREADS * THREAD_BLOCKS);
}

int main(void) {
  size_class = size_class_of(BLOCK_SIZE);
  CHECK(class_block_size[size_class] == BLOCK_SIZE && size_class >= DEPOT_FIRST_CLASS);
  pool = aligned_alloc(BLOCK_SIZE, TOTAL_BLOCKS * sizeof(test_block_t));
  seen = calloc(TOTAL_BLOCKS, 1);
  CHECK(pool != NULL && seen != NULL);
  test_groups();
  test_any_home();
  test_capacity_and_fork_child();
  test_threads();
  free(seen);
  free(pool);
  puts("unit_depot: ok");
  return 0;
}
