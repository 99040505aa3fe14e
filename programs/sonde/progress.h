/* A progress line on stderr for long reports and conversions: one line, rewritten in
 * place, erased at the end. Shown only when stderr is a terminal (not in pipes, files or
 * CI, where $CI is set) and only once the work has taken half a second;
 * $SONDE_PROGRESS=1 shows it at once anywhere, $SONDE_PROGRESS=0 never. */
#ifndef SONDE_CLI_PROGRESS_H
#define SONDE_CLI_PROGRESS_H

#include <stdint.h>

struct cli_progress;

/* Starts a progress line "sonde CMD: WHAT"; NULL when it is not to be shown (every other
 * call accepts NULL). */
struct cli_progress *cli_progress_begin(const char *cmd, const char *what);
/* Says "WHAT done/total (P%)", at most ten times a second. */
void cli_progress_update(struct cli_progress *p, uint64_t done, uint64_t total);
/* For work that reports nothing until it is over: a line with the seconds elapsed,
 * refreshed by a thread until cli_progress_end. */
void cli_progress_tick(struct cli_progress *p);
/* Erases the line and frees p. */
void cli_progress_end(struct cli_progress *p);

#endif
