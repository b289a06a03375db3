/* accounting.h — the byte counts every platform file keeps the same way
 * (accounting.c): what it reserved and purged; committed bytes are noted
 * by the layers above (os_commit_note in os.h). For os/ alone. */
#ifndef SHOAL_OS_ACCOUNTING_H
#define SHOAL_OS_ACCOUNTING_H

#include <stddef.h>

void account_map(size_t size);
void account_unmap(size_t size);
void account_purge(size_t size);

#endif /* SHOAL_OS_ACCOUNTING_H */
