/* Built by install.sh against the installed shoal, once with pkg-config and
 * once through find_package(shoal): malloc must be shoal's, and the shoal_
 * twins and statistics must be reachable from the installed header. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shoal.h>

int main(void) {
  char *text = malloc(100);
  if (text == NULL) return 1;
  strcpy(text, "installed");
  void *twin = shoal_malloc(5000);
  shoal_stats_t stats;
  shoal_stats_get(&stats);
  int ok =
      shoal_owns(text) && shoal_owns(twin) && stats.live_blocks >= 2 && SHOAL_VERSION_MAJOR == 0;
  printf("use_shoal: malloc from shoal: %s, live blocks %zu\n", shoal_owns(text) ? "yes" : "no",
         stats.live_blocks);
  shoal_free(twin);
  free(text);
  return ok ? 0 : 1;
}
