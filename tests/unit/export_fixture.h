/* A hand-built profile shaped like tests/progs/split, shared by the export tests, and
 * small helpers to run the independent checkers (python3, protoc, chromium). */
#ifndef SONDE_TEST_EXPORT_FIXTURE_H
#define SONDE_TEST_EXPORT_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include <sonde/profile.h>

/* main;run;path_hot;compute_hot;spin (spin inlined into compute_hot)   60 samples
 * main;run;path_warm;compute_warm                                      30
 * main;run;path_cool;compute_cool                                      10, in 2 locations
 * main;run;libc.so.6+0x1234 (unsymbolized)                              4
 * main;run;WEIRD (a name with markup, quotes, ';', a tab and bad UTF-8)  1
 * over two threads of one process; period 1 ms. */
struct sonde_profile *export_fixture(void);
extern const char export_fixture_weird[];
enum { EXPORT_FIXTURE_TOTAL = 105 };

/* Writes p in fmt to a new file test_path(name); returns that path. */
const char *export_fixture_write(const struct sonde_profile *p, enum sonde_profile_format fmt,
				 const char *name);
/* The same, written with opts. */
const char *export_fixture_write_opts(const struct sonde_profile *p, enum sonde_profile_format fmt,
				      const char *name, const struct sonde_profile_write_opts *opts);
/* Absolute path of a program found in PATH, or NULL. */
const char *export_which(const char *name);

#endif
