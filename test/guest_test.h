/* What test/guest_pages.c and test/guest_slices.c share: a lender and a
 * borrower thread, run while free slices stay resident, the lender's check
 * that the borrowed pages came back, and a double free on purpose of a
 * borrowed page's block. */
#ifndef SHOAL_TEST_GUEST_H
#define SHOAL_TEST_GUEST_H

#include <pthread.h>

#include "shoal.h"
#include "testhelper.h"

/* Runs `lender` and `borrower` on two threads that meet at `step` (made
 * here, a barrier of two), with a purge delay long enough that no free
 * slice is purged meanwhile; prints that `name` passed. */
static inline int run_lender_and_borrower(const char *name, pthread_barrier_t *step,
                                          void *(*lender)(void *), void *(*borrower)(void *)) {
  shoal_option_set(SHOAL_OPTION_PURGE_DELAY, 3600L * 1000);
  shoal_collect(true);
  CHECK(pthread_barrier_init(step, NULL, 2) == 0);
  pthread_t lender_thread, borrower_thread;
  CHECK(pthread_create(&lender_thread, NULL, lender, NULL) == 0);
  CHECK(pthread_create(&borrower_thread, NULL, borrower, NULL) == 0);
  CHECK(pthread_join(borrower_thread, NULL) == 0);
  CHECK(pthread_join(lender_thread, NULL) == 0);
  pthread_barrier_destroy(step);
  printf("%s: all checks passed\n", name);
  return 0;
}

/* The lender, once the borrower gave its pages back: drained, it holds no
 * more pages than before the borrower took any. */
static inline void check_pages_given_back(size_t pages_before) {
  shoal_collect(false);
  shoal_stats_t stats = shoal_stats();
  CHECK_CTX(stats.pages <= pages_before, "%zu pages after B gave its pages back, %zu before B",
            (size_t)stats.pages, pages_before);
}

/* A double free of a borrowed page's block is still one: reported and
 * ignored (its line on stderr, announced first). */
static inline void double_free_on_purpose(const char *name, void *p) {
  shoal_option_set(SHOAL_OPTION_ABORT_ON_ERROR, 0);
  fprintf(stderr, "%s: a double free on purpose, whose report follows\n", name);
  shoal_free(p);
  shoal_option_set(SHOAL_OPTION_ABORT_ON_ERROR, 1);
}

#endif /* SHOAL_TEST_GUEST_H */
