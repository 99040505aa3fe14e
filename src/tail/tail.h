/* The tail's link to a recorder in the same process. Internal to libsonde.
 *
 * A tail made by sonde_recorder__tail asks the recorder for the exact image of each module
 * it sees; the recorder tells its tail when it goes away, so neither outlives a pointer
 * to the other.
 */
#ifndef SONDE_TAIL_TAIL_H
#define SONDE_TAIL_TAIL_H

#include <sonde/symbolize.h>
#include <sonde/tail.h>

/* A tail reading fd (taken over in every case: closed on failure). NULL and errno. */
struct sonde_tail *sonde__tail_new_fd(int fd, const struct sonde_tail_opts *opts);
/* Links t to its recorder (NULL: the recorder is gone, stop asking it for images). */
void sonde__tail_set_recorder(struct sonde_tail *t, struct sonde_recorder *r);
/* The one conversion of a spool module definition into the symbolizer's module, for the
 * tail and the exporters: out borrows d's path and build id. */
void sonde__tail_sym_module(const struct sonde_spool_module_def *d, struct sonde_sym_module *out);

#endif
