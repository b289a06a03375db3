/* Threads that free each other's blocks (seed 003's story) for the
 * contention log (test/diagnostics.sh). In each round the producer thread
 * allocates a batch in produce_item, then two new consumer threads free it
 * in consume_item: every one of those frees is a remote free, and they
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

static void *consumer(void *half) {
  for (int i = (int)(size_t)half; i < BATCH; i += 2) consume_item(batch[i]);
  return NULL;
}

/* The producer lives through every round, as a server's does: a consumer
 * that starts after it could otherwise take over its heap (a dead thread's
 * heap goes to the next thread), and its frees would not be remote. */
static void *producer(void *unused) {
  (void)unused;
  for (int round = 0; round < ROUNDS; round++) {
    for (int i = 0; i < BATCH; i++) batch[i] = produce_item();
    pthread_t threads[2];
    for (size_t half = 0; half < 2; half++)
      pthread_create(&threads[half], NULL, consumer, (void *)half);
    for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
  }
  return NULL;
}

int main(void) {
  pthread_t thread;
  pthread_create(&thread, NULL, producer, NULL);
  pthread_join(thread, NULL);
  return 0;
}
