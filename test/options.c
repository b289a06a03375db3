/* Options: prints each option as `NAME=value` (the value in force after the
 * environment was read), one per line, for options.sh to compare with the
 * environment it set and with the README's table. */
#include <stdio.h>

#include "shoal.h"

int main(void) {
  for (int i = 0; i < SHOAL_OPTION_COUNT; i++)
    printf("%s=%ld\n", shoal_option_name((shoal_option_t)i), shoal_option_get((shoal_option_t)i));
  return shoal_option_name(SHOAL_OPTION_COUNT) == NULL ? 0 : 1;
}
