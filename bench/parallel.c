/* parallel — seed 003, the ParallelAllocations demo of Delphi High
 * Performance: a list of tasks whose Execute creates and destroys many objects
 * and object lists, run once serially and once in parallel (TParallel.For).
 * On a 12-core machine FastMM gave a 3.9x speed-up, 6.3x with its release
 * stack; the rest was lost to frees waiting on locks. Here the speed-up is
 * bounded by min(THREADS, cores).
 *
 * A task runs rounds; a round builds an object list (pointer array doubled
 * when full) of LIST_LENGTH objects of 24..96 bytes, each with a text of
 * 8..64 bytes, deletes every third object (freeing it, as TObjectList does),
 * appends LIST_LENGTH / 3 new objects, sums the objects' contents and frees
 * them all. TASKS tasks; in parallel, THREADS threads take tasks from a
 * shared counter. Each task's sum must be the same in both runs.
 *
 * SIZE is the number of objects allocated per run, split evenly among the
 * tasks. A serial pass over an eighth of the tasks warms the heap first.
 * time_s: the parallel run; serial_s: the serial run; speedup: their ratio. */
#include "bench.h"

#include <stdatomic.h>

#define TASKS       64
#define LIST_LENGTH 1000

static const long SIZES[3] = {64000, 8000000, 40000000};

typedef struct object {
  long id;
  size_t text_length;
  char *text;
} object_t;

typedef struct list {
  object_t **items;
  size_t count, capacity;
} list_t;

static long rounds_per_task;
static uint64_t serial_sums[TASKS], parallel_sums[TASKS];
static atomic_int next_task;

static void list_add(list_t *list, object_t *object) {
  if (list->count == list->capacity) {
    list->capacity = list->capacity == 0 ? 4 : list->capacity * 2;
    list->items = bench_realloc(list->items, list->capacity * sizeof *list->items);
  }
  list->items[list->count++] = object;
}

static object_t *object_new(rng_t *rng, long id) {
  object_t *object = bench_malloc(rng_range(rng, sizeof(object_t), 96));
  object->id = id;
  object->text_length = rng_range(rng, 8, 64);
  object->text = bench_malloc(object->text_length);
  memset(object->text, 'a' + (int)(id % 26), object->text_length);
  return object;
}

static void object_free(object_t *object) {
  if (object->text[0] != 'a' + object->id % 26 ||
      object->text[object->text_length - 1] != object->text[0])
    bench_fail("object %ld corrupt", object->id);
  free(object->text);
  free(object);
}

static uint64_t task_execute(int task) {
  rng_t rng = rng_make(300 + (uint64_t)task);
  uint64_t sum = 0;
  long id = 0;
  for (long r = 0; r < rounds_per_task; r++) {
    list_t list = {0};
    for (int i = 0; i < LIST_LENGTH; i++) list_add(&list, object_new(&rng, id++));
    size_t kept = 0;
    for (size_t i = 0; i < list.count; i++) {
      if (i % 3 == 0)
        object_free(list.items[i]);
      else
        list.items[kept++] = list.items[i];
    }
    list.count = kept;
    for (int i = 0; i < LIST_LENGTH / 3; i++) list_add(&list, object_new(&rng, id++));
    for (size_t i = 0; i < list.count; i++) {
      sum += (uint64_t)list.items[i]->id * list.items[i]->text_length;
      object_free(list.items[i]);
    }
    free(list.items);
  }
  return sum;
}

static void *worker_run(void *arg) {
  (void)arg;
  for (int task; (task = atomic_fetch_add(&next_task, 1)) < TASKS;)
    parallel_sums[task] = task_execute(task);
  return NULL;
}

int main(int argc, char **argv) {
  bench_args_t args = bench_init(argc, argv, "parallel", SIZES, 2);
  long objects_per_round = LIST_LENGTH + LIST_LENGTH / 3;
  rounds_per_task = args.size / TASKS / objects_per_round;
  if (rounds_per_task < 1) rounds_per_task = 1;

  for (int task = 0; task < TASKS / 8; task++) task_execute(task);
  double start = bench_now();
  for (int task = 0; task < TASKS; task++) serial_sums[task] = task_execute(task);
  double serial = bench_now() - start;

  pthread_t *tids = bench_calloc((size_t)args.threads, sizeof *tids);
  start = bench_now();
  bench_spawn(tids, args.threads, worker_run, NULL, 0);
  bench_join(tids, args.threads);
  double parallel = bench_now() - start;
  free(tids);

  for (int task = 0; task < TASKS; task++)
    if (serial_sums[task] != parallel_sums[task]) bench_fail("task %d: sums differ", task);
  bench_report("threads=%d time_s=%.4f serial_s=%.4f speedup=%.3f objects=%ld", args.threads,
               parallel, serial, serial / parallel, rounds_per_task * objects_per_round * TASKS);
  return 0;
}
