/* Helpers shared by the symbolizer tests: addresses and file offsets computed with the
 * binutils tools (nm, readelf), independently of the code under test. */
#ifndef SONDE_TEST_SYM_UTIL_H
#define SONDE_TEST_SYM_UTIL_H

#include <stdint.h>
#include <sys/types.h>

#include <sonde/spool.h>
#include <sonde/symbolize.h>

/* Virtual address of symbol name in path per `nm` (dynamic: `nm -D`). Fails the test if
 * the symbol is missing. */
uint64_t sym_test_nm(const char *path, const char *name, int dynamic);
/* File offset of virtual address vaddr per the PT_LOAD lines of `readelf -lW`. */
uint64_t sym_test_vaddr_to_off(const char *path, uint64_t vaddr);
/* A module description for a file mapped by no particular process. */
struct sonde_sym_module sym_test_module(const char *path);
/* Copies a file. */
void sym_test_copy(const char *from, const char *to);
/* Runs a shell command line (through /bin/sh -c), failing the test if it fails. */
void sym_test_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One row of the line table as `objdump --dwarf=decodedline` prints it. */
struct sym_test_row {
	uint64_t addr;
	uint32_t line; /* 0 for an end of sequence */
	char file[128];
};
/* The rows of path's line table, in order; returns how many (at most max). */
size_t sym_test_lines(const char *path, struct sym_test_row *rows, size_t max);
/* The line whose rows cover vaddr (the last row at the greatest address <= vaddr). */
uint32_t sym_test_line_at(const struct sym_test_row *rows, size_t n, uint64_t vaddr);
/* The number of the line of the source file src holding marker. */
uint32_t sym_test_marker_line(const char *src, const char *marker);
/* Build id of an ELF file per `readelf -n`, as hex. */
void sym_test_build_id_hex(const char *path, char *hex, size_t size);
/* Starts Debian's debuginfod on loopback over the files under srv (its database at db),
 * waiting until it answers GET probe (e.g. "/buildid/HEX/debuginfo") with 200; *port
 * receives its port. Returns its pid (stop it with SIGTERM); fails the test if it never
 * serves. */
pid_t sym_test_debuginfod_start(const char *srv, const char *db, const char *probe, int *port);
#endif
