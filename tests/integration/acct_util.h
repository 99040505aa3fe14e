/* The accounting invariants of an -a --off-cpu recording (docs/record.md, "Accounting"),
 * checked on every such test recording. */
#ifndef SONDE_TEST_ACCT_UTIL_H
#define SONDE_TEST_ACCT_UTIL_H

#include <stdbool.h>

/* Fails the test unless no task or process of the accounting tables is labelled by its
 * bare id when a definition anywhere in the spool names it (never a bare id when a name
 * was seen), and unless spool's CPU time adds up: when it kept the CPUs' switches (a
 * recording of every process), every online CPU has them, each CPU's busy, idle and
 * unknown time add up to the window exactly, and no CPU's samples weigh more than its
 * busy time (a sampled thread was on it); that each task's life (first sight to exit or
 * end) adds up from its on-CPU time by the switches, its states, unknown and short time
 * (time counted twice at most its short intervals' time and 1 ms, docs/record.md, Known
 * limits; no
 * task but the idle task under pid 0), the
 * time no record covers small without losses, and the tasks'
 * on-CPU time within the CPUs' busy time. expect_switches: the recording must have
 * them. Returns whether it had them. Both off-CPU backends keep the switches of an -a
 * recording of every process. */
bool acct_check_spool(const char *spool, bool expect_switches);

#endif
