/* xmalloc — batch producer/consumer after Lever and Boreham's malloc test
 * ("malloc() Performance in a Multithreaded Linux Environment", USENIX 2000,
 * known in mimalloc-bench as xmalloc-test): W threads only allocate and W
 * others only free. A producer allocates a batch: an array of BATCH pointers
 * (32 KiB, itself from malloc) and BATCH blocks of BLOCK_BYTES each, the
 * fixed object size of the public run (its `-s 64`). It hands the batch over
 * one queue shared by all, guarded by a mutex and condition variables and
 * bounded to QUEUE_BATCHES; any consumer takes it, frees every block and then
 * the array. Every free is remote, and a thread that only frees never
 * allocates what it frees back: memory must flow from the consumers' side to
 * the producers' through the allocator.
 *
 * SIZE counts batches in all, split evenly among the producers; THREADS is W
 * (W producers and W consumers). A block holds its id (producer and sequence)
 * and the id's tag in every other byte; a consumer checks both, and the sums
 * of the ids produced and consumed must agree.
 *
 * time_s: from starting the threads to the last join (every batch freed). */
#include "bench.h"

#define BATCH         4096 /* blocks per batch: the array is 32 KiB */
#define BLOCK_BYTES   64
#define QUEUE_BATCHES 64

static const long SIZES[3] = {40, 8000, 32000};

typedef struct block {
  uint64_t id;
  uint8_t fill[BLOCK_BYTES - sizeof(uint64_t)];
} block_t;

/* A bounded ring of batches; NULL tells a consumer to stop. */
static struct {
  pthread_mutex_t lock;
  pthread_cond_t not_empty, not_full;
  size_t head, count;
  block_t **slots[QUEUE_BATCHES];
} queue = {.lock = PTHREAD_MUTEX_INITIALIZER,
           .not_empty = PTHREAD_COND_INITIALIZER,
           .not_full = PTHREAD_COND_INITIALIZER};

typedef struct worker {
  _Alignas(64) int index;
  long batches;    /* producer: how many to make */
  uint64_t id_sum; /* producer: ids made; consumer: ids freed */
  uint64_t blocks; /* consumer: blocks freed */
} worker_t;

static void queue_put(block_t **batch) {
  pthread_mutex_lock(&queue.lock);
  while (queue.count == QUEUE_BATCHES) pthread_cond_wait(&queue.not_full, &queue.lock);
  queue.slots[(queue.head + queue.count) % QUEUE_BATCHES] = batch;
  queue.count++;
  pthread_cond_signal(&queue.not_empty);
  pthread_mutex_unlock(&queue.lock);
}

static block_t **queue_take(void) {
  pthread_mutex_lock(&queue.lock);
  while (queue.count == 0) pthread_cond_wait(&queue.not_empty, &queue.lock);
  block_t **batch = queue.slots[queue.head];
  queue.head = (queue.head + 1) % QUEUE_BATCHES;
  queue.count--;
  pthread_cond_signal(&queue.not_full);
  pthread_mutex_unlock(&queue.lock);
  return batch;
}

static void *producer_run(void *arg) {
  worker_t *w = arg;
  uint64_t id = (uint64_t)w->index << 40;
  for (long n = 0; n < w->batches; n++) {
    block_t **batch = bench_malloc(BATCH * sizeof *batch);
    for (int i = 0; i < BATCH; i++, id++) {
      block_t *b = bench_malloc(sizeof *b);
      b->id = id;
      memset(b->fill, bench_tag(id), sizeof b->fill);
      w->id_sum += id;
      batch[i] = b;
    }
    queue_put(batch);
  }
  return NULL;
}

static void *consumer_run(void *arg) {
  worker_t *w = arg;
  for (;;) {
    block_t **batch = queue_take();
    if (batch == NULL) break;
    for (int i = 0; i < BATCH; i++) {
      block_t *b = batch[i];
      block_check(b->fill, sizeof b->fill, sizeof b->fill, bench_tag(b->id), "consumer");
      w->id_sum += b->id;
      free(b);
    }
    w->blocks += BATCH;
    free(batch);
  }
  return NULL;
}

int main(int argc, char **argv) {
  bench_args_t args = bench_init(argc, argv, "xmalloc", SIZES, 2);
  int w = args.threads;
  long per_producer = args.size / w > 0 ? args.size / w : 1;
  worker_t *producers = aligned_alloc(64, sizeof(worker_t) * (size_t)w);
  worker_t *consumers = aligned_alloc(64, sizeof(worker_t) * (size_t)w);
  if (producers == NULL || consumers == NULL) bench_fail("cannot allocate the workers");
  for (int i = 0; i < w; i++) {
    producers[i] = (worker_t){.index = i, .batches = per_producer};
    consumers[i] = (worker_t){.index = i};
  }
  pthread_t *tids = bench_calloc(2 * (size_t)w, sizeof *tids);

  double start = bench_now();
  bench_spawn(tids, w, consumer_run, consumers, sizeof(worker_t));
  bench_spawn(tids + w, w, producer_run, producers, sizeof(worker_t));
  bench_join(tids + w, w);
  for (int i = 0; i < w; i++) queue_put(NULL);
  bench_join(tids, w);
  double seconds = bench_now() - start;

  uint64_t made = 0, freed = 0, blocks = 0;
  for (int i = 0; i < w; i++) {
    made += producers[i].id_sum;
    freed += consumers[i].id_sum;
    blocks += consumers[i].blocks;
  }
  uint64_t expected = (uint64_t)per_producer * (uint64_t)w * BATCH;
  if (blocks != expected || made != freed)
    bench_fail("blocks lost: %lu freed of %lu, id sums %lu and %lu", (unsigned long)blocks,
               (unsigned long)expected, (unsigned long)made, (unsigned long)freed);
  bench_report("producers=%d time_s=%.4f batches=%ld mfrees=%.3f", w, seconds, per_producer * w,
               (double)blocks / seconds * 1e-6);
  free(producers);
  free(consumers);
  free(tids);
  return 0;
}
