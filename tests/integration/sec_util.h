/* Helpers for the security and connector tests: act as another uid. */
#ifndef SONDE_TEST_SEC_UTIL_H
#define SONDE_TEST_SEC_UTIL_H

#include <sys/types.h>

enum { SEC_NOBODY = 65534 };

/* Skips the test unless it runs as root (it needs to act as another uid). */
void sec_require_root(void);
/* Connects to the AF_UNIX stream socket at path from a child running as uid (gid 65534,
 * no supplementary groups) and returns the connected fd: its SO_PEERCRED is that
 * child's. Fails the test if the connection is refused. */
int sec_connect_as(uid_t uid, const char *path);

#endif
