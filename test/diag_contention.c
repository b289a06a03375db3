/* Threads that free each other's blocks (seed 003's story) for the
 * contention log (test/diagnostics.sh). In each round a producer thread
 * allocates a batch in produce_item, then two consumer threads free it in
 * consume_item: every one of those frees is a remote free, and they
 * outnumber the producer's slow paths (one per page of blocks). */
#include <pthread.h>
#include <stdlib.h>

enum { ROUNDS = 4, BATCH = 20000 };
static void *batch[BATCH];

__attribute__((noinline)) static void *produce_item(void) {
  return malloc(48);
}

__attribute__((noinline)) static void consume_item(void *item) {
  free(item);
}

static void *producer(void *unused) {
  (void)unused;
  for (int i = 0; i < BATCH; i++) batch[i] = produce_item();
  return NULL;
}

static void *consumer(void *half) {
  for (int i = (int)(size_t)half; i < BATCH; i += 2) consume_item(batch[i]);
  return NULL;
}

int main(void) {
  for (int round = 0; round < ROUNDS; round++) {
    pthread_t threads[2];
    pthread_create(&threads[0], NULL, producer, NULL);
    pthread_join(threads[0], NULL);
    for (size_t half = 0; half < 2; half++)
      pthread_create(&threads[half], NULL, consumer, (void *)half);
    for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
  }
  return 0;
}
