/* smallobj — seed 003, the "Allocate" demo of Delphi High Performance: ten
 * million binary-tree nodes allocated, then freed. A node record (left,
 * right, data) is 24 bytes; the same node as a Delphi object carries a hidden
 * class pointer and is 32. The book frees in allocation order; freeing in
 * random order as well shows what scattered frees cost.
 *
 * SIZE is the number of nodes (10 million in the book). Four phases, each
 * allocating SIZE nodes and freeing them all:
 *   node24_forward_s  node24_random_s  node32_forward_s  node32_random_s
 * The random order is one fixed permutation. Each node links to the one
 * allocated before it; every free checks the node's data and link.
 *
 * time_s: the sum of the four phases. */
#include "bench.h"

static const long SIZES[3] = {100000, 5000000, 10000000};

typedef struct node {
  struct node *left, *right;
  uintptr_t data;
} node_t; /* 24 bytes: the record */

typedef struct object_node {
  void *class_pointer;
  node_t node;
} object_node_t; /* 32 bytes: the object */

static double phase(node_t **nodes, const uint32_t *order, long n, size_t size) {
  double start = bench_now();
  node_t *previous = NULL;
  for (long i = 0; i < n; i++) {
    node_t *node = bench_malloc(size);
    node->left = previous;
    node->right = NULL;
    node->data = (uintptr_t)i;
    nodes[i] = previous = node;
  }
  for (long k = 0; k < n; k++) {
    long i = order == NULL ? k : (long)order[k];
    node_t *node = nodes[i];
    if (node->data != (uintptr_t)i || (i > 0 && node->left != nodes[i - 1]))
      bench_fail("node %ld corrupt (size %zu)", i, size);
    free(node);
  }
  return bench_now() - start;
}

int main(int argc, char **argv) {
  bench_args_t args = bench_init(argc, argv, "smallobj", SIZES, 1);
  long n = args.size;
  node_t **nodes = bench_malloc((size_t)n * sizeof *nodes);
  uint32_t *order = bench_malloc((size_t)n * sizeof *order);
  rng_t rng = rng_make(3);
  for (long i = 0; i < n; i++) order[i] = (uint32_t)i;
  for (long i = n - 1; i > 0; i--) {
    long j = (long)rng_below(&rng, (uint64_t)i + 1);
    uint32_t t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  double f24 = phase(nodes, NULL, n, sizeof(node_t));
  double r24 = phase(nodes, order, n, sizeof(node_t));
  double f32 = phase(nodes, NULL, n, sizeof(object_node_t));
  double r32 = phase(nodes, order, n, sizeof(object_node_t));
  bench_report("time_s=%.4f node24_forward_s=%.4f node24_random_s=%.4f node32_forward_s=%.4f "
               "node32_random_s=%.4f nodes=%ld",
               f24 + r24 + f32 + r32, f24, r24, f32, r32, n);
  free(nodes);
  free(order);
  return 0;
}
