/* A program with known leaks for the leak report (test/diagnostics.sh):
 * one 4096-byte block from make_cache, two 64-byte blocks from leak_node,
 * and blocks that must not be reported: freed by another thread, freed by
 * a thread-exit destructor, and a realloc'ed buffer freed at the end. It
 * writes nothing with stdio, whose buffer would be one more block. With
 * the argument close-stderr it closes its stderr before it returns. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_key_t scratch_key;

__attribute__((noinline)) static void *make_cache(void) {
  return malloc(4096);
}

__attribute__((noinline)) void *leak_node(void) {
  char *node = malloc(64);
  memset(node, 1, 64);
  return node;
}

static void *handed_over[16];

static void *allocate_for_other(void *unused) {
  (void)unused;
  for (int i = 0; i < 16; i++) handed_over[i] = malloc(200);
  pthread_setspecific(scratch_key, malloc(300)); /* freed by the destructor */
  return NULL;
}

static void *free_for_other(void *unused) {
  (void)unused;
  for (int i = 0; i < 16; i++) free(handed_over[i]);
  return NULL;
}

void *volatile kept[3]; /* leaked all the same: nothing frees them */

int main(int argc, char **argv) {
  pthread_key_create(&scratch_key, free);
  kept[0] = make_cache();
  kept[1] = leak_node();
  kept[2] = leak_node();
  char *buffer = NULL;
  for (size_t n = 1; n <= 100000; n *= 3) buffer = realloc(buffer, n);
  pthread_t thread;
  pthread_create(&thread, NULL, allocate_for_other, NULL);
  pthread_join(thread, NULL);
  pthread_create(&thread, NULL, free_for_other, NULL);
  pthread_join(thread, NULL);
  free(buffer);
  if (argc > 1 && strcmp(argv[1], "close-stderr") == 0) close(2); /* as ls and grep do */
  return 0;
}
