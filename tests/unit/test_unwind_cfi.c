/* CFI tables: every row of real binaries (split-nofp, this test binary, the libc it runs
 * on, a .debug_frame-only program with a separate debug file) agrees with
 * `readelf --debug-dump=frames-interp`, an independent decoder; .eh_frame_hdr and scanning
 * give the same table; malformed input is rejected without crashing. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "unwind/cfi.h"
#include "unwind/cfi_parse.h"
#include "unwind/unwind.h"

struct image {
	char *buf;
	size_t len;
};

static struct image load(const char *path)
{
	struct image im;

	im.buf = test_read_file(path, &im.len);
	if (!im.buf)
		FAIL("cannot read %s: %s", path, strerror(errno));
	return im;
}

/* The path of the libc this process runs on, from /proc/self/maps. */
static void libc_path(char *out, size_t n)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];

	out[0] = 0;
	ASSERT(f != NULL);
	while (fgets(line, sizeof(line), f)) {
		char *p = strchr(line, '/');
		if (p && strstr(p, "/libc.so")) {
			p[strcspn(p, "\n")] = 0;
			snprintf(out, n, "%s", p);
			break;
		}
	}
	fclose(f);
	ASSERT(out[0] != 0);
}

static int reg_number(const char *name)
{
	static const char *const names[] = {"rax", "rdx", "rcx", "rbx", "rsi", "rdi",
					    "rbp", "rsp", "r8",	 "r9",	"r10", "r11",
					    "r12", "r13", "r14", "r15", "ra"};
	for (int i = 0; i < (int)(sizeof(names) / sizeof(names[0])); i++)
		if (!strcmp(name, names[i]))
			return i;
	return -1;
}

enum { MAX_COLS = 24 };

/* One readelf row: rules from lo to hi. */
struct rrow {
	uint64_t lo, hi;
	char cfa[32];
	int ncols;
	int col_reg[MAX_COLS];
	char col_val[MAX_COLS][16];
};

static void check_rule(const struct cfi_row *row, int col, const char *v, uint64_t pc)
{
	unsigned kind = CFI_ROW_RULE(row, col);
	const char *what = col == CFI_COL_RA ? "ra" : col == CFI_COL_RBP ? "rbp" : "rbx";

	if (!strcmp(v, "u")) {
		/* readelf prints "u" for DW_CFA_undefined and for columns never set. */
		if (col == CFI_COL_RA)
			ASSERT_UINT(kind, ==, CFI_RULE_UNDEFINED);
		else if (kind != CFI_RULE_SAME && kind != CFI_RULE_UNDEFINED)
			FAIL("%s at 0x%" PRIx64 ": kind %u, readelf u", what, pc, kind);
	} else if (!strcmp(v, "s")) {
		ASSERT_UINT(kind, ==, CFI_RULE_SAME);
	} else if (v[0] == 'c') {
		long off = strtol(v + 1, NULL, 10);
		if (off % 8 || off / 8 < -128 || off / 8 > 127)
			ASSERT_UINT(kind, ==, CFI_RULE_UNSUPPORTED);
		else if (kind != CFI_RULE_OFFSET || row->off[col] * 8 != off)
			FAIL("%s at 0x%" PRIx64 ": kind %u off %d, readelf %s", what, pc, kind,
			     row->off[col] * 8, v);
	} else if (!strcmp(v, "exp")) {
		ASSERT(kind == CFI_RULE_AT_RSP || kind == CFI_RULE_UNSUPPORTED);
	} else if (v[0] == 'r') {
		ASSERT_UINT(kind, ==, CFI_RULE_REGISTER);
		ASSERT_INT(row->off[col], ==, atoi(v + 1));
	} else {
		ASSERT(kind == CFI_RULE_VAL_OFFSET || kind == CFI_RULE_UNSUPPORTED);
	}
}

static void check_at(const struct cfi_table *t, const struct rrow *r, uint64_t pc)
{
	const struct cfi_row *row = sonde__cfi_table_lookup(t, pc);
	char reg[8];
	long off;

	if (!row)
		FAIL("no row at 0x%" PRIx64 " (readelf: CFA %s)", pc, r->cfa);
	unsigned kind = row->cfa_kind & CFI_CFA_KIND_MASK;
	if (!strcmp(r->cfa, "exp")) {
		ASSERT(kind == CFI_CFA_DEREF || kind == CFI_CFA_PLT || kind == CFI_CFA_UNSUPPORTED);
	} else if (sscanf(r->cfa, "%7[a-z0-9]%ld", reg, &off) == 2) {
		if (kind != CFI_CFA_REG || row->cfa_reg != reg_number(reg) || row->cfa_off != off)
			FAIL("CFA at 0x%" PRIx64 ": kind %u reg %u off %d, readelf %s", pc, kind,
			     row->cfa_reg, row->cfa_off, r->cfa);
	} else {
		FAIL("unexpected readelf CFA %s", r->cfa);
	}
	unsigned clobbers = 0;
	for (int i = 0; i < r->ncols; i++) {
		int reg_no = r->col_reg[i];
		const char *v = r->col_val[i];
		if (reg_no == 16)
			check_rule(row, CFI_COL_RA, v, pc);
		else if (reg_no == UREG_RBP)
			check_rule(row, CFI_COL_RBP, v, pc);
		else if (reg_no == UREG_RBX)
			check_rule(row, CFI_COL_RBX, v, pc);
		else if (reg_no >= 12 && reg_no <= 15 && strcmp(v, "u") && strcmp(v, "s"))
			clobbers |= 1u << (reg_no - 12);
	}
	ASSERT_UINT((unsigned)row->rules >> CFI_CLOBBER_SHIFT, ==, clobbers);
}

struct walk {
	const struct cfi_table *t;
	long rows, fdes;
	/* CIE offset -> its initial row, for FDEs whose own program is empty */
	uint64_t cie_off[512];
	struct rrow cie_row[512];
	int n_cies;
};

static void parse_row(struct rrow *r, char *line, char (*cols)[8], int ncols)
{
	char *save, *tok = strtok_r(line, " \n", &save);

	r->lo = strtoull(tok, NULL, 16);
	tok = strtok_r(NULL, " \n", &save);
	snprintf(r->cfa, sizeof(r->cfa), "%s", tok ? tok : "?");
	r->ncols = 0;
	for (int i = 0; i < ncols && (tok = strtok_r(NULL, " \n", &save)); i++) {
		if (tok[0] == '(') { /* "r9 (r9)": the register's name after its number */
			i--;
			continue;
		}
		r->col_reg[r->ncols] = reg_number(cols[i]);
		snprintf(r->col_val[r->ncols++], sizeof(r->col_val[0]), "%s", tok);
	}
}

/* Runs readelf on path and checks every row of the section named in `section` (e.g.
 * ".eh_frame") at its first and last pc. */
static void check_against_readelf(struct walk *w, const char *path, const char *section)
{
	char cmd[1024], line[1024], cols[MAX_COLS][8];
	int ncols = 0, in_section = 0, in_fde = 0, in_cie = -1, nrows = 0;
	uint64_t fde_lo = 0, fde_hi = 0, cie = 0;
	static struct rrow rows[4096];

	snprintf(cmd, sizeof(cmd), "readelf --debug-dump=frames-interp '%s' 2>/dev/null", path);
	FILE *f = popen(cmd, "r");
	ASSERT(f != NULL);
	while (true) {
		char *got = fgets(line, sizeof(line), f);
		bool is_row = got && strlen(line) > 17 && line[16] == ' ' &&
			      strspn(line, "0123456789abcdef") == 16;
		bool entry_end = !got || (!is_row && !strstr(line, "   LOC"));
		if (entry_end && in_fde && in_section) {
			if (nrows == 0) {
				int i;
				for (i = 0; i < w->n_cies && w->cie_off[i] != cie; i++)
					;
				ASSERT(i < w->n_cies);
				rows[nrows] = w->cie_row[i];
				rows[nrows++].lo = fde_lo;
			}
			for (int i = 0; i < nrows; i++) {
				rows[i].hi = i + 1 < nrows ? rows[i + 1].lo : fde_hi;
				if (rows[i].hi <= rows[i].lo)
					continue;
				check_at(w->t, &rows[i], rows[i].lo);
				check_at(w->t, &rows[i], rows[i].hi - 1);
				w->rows++;
			}
			w->fdes++;
		}
		if (entry_end) {
			in_fde = 0;
			nrows = 0;
		}
		if (!got)
			break;
		if (strstr(line, "Contents of"))
			in_section = strstr(line, section) != NULL;
		unsigned long long off_, lo, hi;
		if (strstr(line, " FDE ") &&
		    sscanf(line, "%llx %*s %*s FDE cie=%llx pc=%llx..%llx", &off_,
			   (unsigned long long *)&cie, &lo, &hi) == 4) {
			in_fde = 1;
			fde_lo = lo;
			fde_hi = hi;
		} else if (strstr(line, " CIE") && sscanf(line, "%llx", &off_) == 1 &&
			   w->n_cies < 512) {
			in_cie = w->n_cies++;
			w->cie_off[in_cie] = off_;
			w->cie_row[in_cie].ncols = 0;
			snprintf(w->cie_row[in_cie].cfa, sizeof(w->cie_row[0].cfa), "?");
		} else if (strstr(line, "   LOC")) {
			char *save, *tok = strtok_r(line, " \n", &save);
			ncols = 0;
			for (int i = 0; tok; i++, tok = strtok_r(NULL, " \n", &save))
				if (i >= 2 && ncols < MAX_COLS)
					snprintf(cols[ncols++], sizeof(cols[0]), "%s", tok);
		} else if (is_row) {
			if (in_fde && nrows < 4096)
				parse_row(&rows[nrows++], line, cols, ncols);
			else if (!in_fde && in_cie >= 0)
				parse_row(&w->cie_row[in_cie], line, cols, ncols);
		}
		if (strstr(line, " FDE ") || strstr(line, "Contents of"))
			in_cie = -1;
	}
	/* readelf exits 1 on a debug file (it misses the program interpreter there) after
	 * printing everything; the FDE counts the callers check tell whether it worked. */
	pclose(f);
}

static struct cfi_table *table_of(const char *path, struct image *im)
{
	*im = load(path);
	struct cfi_table *t = sonde__cfi_table_from_elf(im->buf, im->len, NULL, 0);
	if (!t)
		FAIL("no table for %s: %s", path, strerror(errno));
	return t;
}

TEST(cfi_split_nofp_matches_readelf)
{
	struct image im;
	struct cfi_table *t = table_of(test_prog("split-nofp"), &im);
	struct walk w = {.t = t};

	ASSERT(sonde__cfi_table_stats(t)->used_hdr);
	check_against_readelf(&w, test_prog("split-nofp"), ".eh_frame");
	ASSERT_INT(w.fdes, >=, 8);
	ASSERT_INT(w.fdes, ==, sonde__cfi_table_stats(t)->fdes);
	printf("%ld FDEs, %ld readelf rows checked, %zu table rows\n", w.fdes, w.rows,
	       sonde__cfi_table_rows(t));
	sonde__cfi_table_free(t);
	free(im.buf);
}

TEST_TIMEOUT(cfi_libc_and_self_match_readelf, 120)
{
	char libc[512], self[512];
	const char *paths[2] = {libc, self};
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	ASSERT(n > 0);
	self[n] = 0; /* readelf runs in another process: /proc/self would be its own */
	libc_path(libc, sizeof(libc));
	for (int i = 0; i < 2; i++) {
		struct image im;
		struct cfi_table *t = table_of(paths[i], &im);
		struct walk *w = calloc(1, sizeof(*w));
		w->t = t;
		check_against_readelf(w, paths[i], ".eh_frame");
		printf("%s: %ld FDEs, %ld rows checked, %zu table rows (%zu bytes)\n", paths[i],
		       w->fdes, w->rows, sonde__cfi_table_rows(t),
		       sonde__cfi_table_rows(t) * sizeof(struct cfi_row));
		ASSERT_INT(w->fdes, >, 100);
		ASSERT_INT(sonde__cfi_table_stats(t)->fdes + sonde__cfi_table_stats(t)->overlapping, ==, w->fdes);
		free(w);
		sonde__cfi_table_free(t);
		free(im.buf);
	}
}

/* libc (out in libc), this test binary (in self) and a small program: the images the
 * lookup tests go through (512-byte buffers). */
static void three_images(const char *paths[3], char *libc, char *self)
{
	ssize_t n = readlink("/proc/self/exe", self, 511);

	ASSERT(n > 0);
	self[n] = 0;
	libc_path(libc, 512);
	paths[0] = libc;
	paths[1] = self;
	paths[2] = test_prog("split-nofp");
}

/* The row a lookup finds, by walking every row: the last one at or below pc, NULL when
 * none is or it ends an FDE. */
static const struct cfi_row *reference_lookup(const struct cfi_table *t, uint64_t vaddr)
{
	const struct cfi_row *best = NULL;
	uint64_t base = sonde__cfi_table_base(t);

	if (vaddr < base || vaddr - base > UINT32_MAX)
		return NULL;
	for (size_t i = 0; i < sonde__cfi_table_rows(t); i++) {
		const struct cfi_row *r = sonde__cfi_table_row(t, i);
		if (r->pc > vaddr - base)
			break;
		best = r;
	}
	if (!best || (best->cfa_kind & CFI_CFA_KIND_MASK) == CFI_CFA_NONE)
		return NULL;
	return best;
}

/* The lookup (through its bucket index on large tables) finds the row a walk over all rows
 * finds, at each row's first byte, the byte before it, the byte after it, before the first
 * row and past the last, for libc, this test binary and a small program. */
TEST(cfi_lookup_matches_a_walk_over_the_rows)
{
	char libc[512], self[512];
	const char *paths[3];

	three_images(paths, libc, self);
	for (int i = 0; i < 3; i++) {
		struct image im;
		struct cfi_table *t = table_of(paths[i], &im);
		uint64_t base = sonde__cfi_table_base(t);
		size_t rows = sonde__cfi_table_rows(t), checked = 0;
		const struct cfi_row *last = sonde__cfi_table_row(t, rows - 1);
		uint64_t ends[] = {0, base ? base - 1 : 0, base + last->pc + 1, base + last->pc + 4096,
				   base + (uint64_t)UINT32_MAX + 1};

		/* walk each row's neighbourhood, with the reference walking from a row near it */
		for (size_t r = 0; r < rows; r++) {
			uint64_t pc = base + sonde__cfi_table_row(t, r)->pc;
			for (int d = -1; d <= 1; d++) {
				uint64_t v = pc + (uint64_t)(int64_t)d;
				const struct cfi_row *want = NULL;
				if (v >= base) {
					/* the last row <= v is r - 1, r or r + 1 (rows ascend strictly) */
					size_t j = r + 1 < rows ? r + 1 : r;
					while (j > 0 && sonde__cfi_table_row(t, j)->pc > v - base)
						j--;
					if (sonde__cfi_table_row(t, j)->pc <= v - base)
						want = sonde__cfi_table_row(t, j);
					if (want && (want->cfa_kind & CFI_CFA_KIND_MASK) == CFI_CFA_NONE)
						want = NULL;
				}
				if (sonde__cfi_table_lookup(t, v) != want)
					FAIL("%s: lookup of %#lx gives row %p, the rows say %p", paths[i],
					     (unsigned long)v, (void *)sonde__cfi_table_lookup(t, v),
					     (void *)want);
				checked++;
			}
		}
		for (size_t e = 0; e < sizeof(ends) / sizeof(ends[0]); e++)
			ASSERT(sonde__cfi_table_lookup(t, ends[e]) == reference_lookup(t, ends[e]));
		printf("%s: %zu rows, %zu lookups checked\n", paths[i], rows, checked);
		ASSERT_UINT(checked, ==, rows * 3);
		sonde__cfi_table_free(t);
		free(im.buf);
	}
}

static bool same_rules_row(const struct cfi_row *a, const struct cfi_row *b)
{
	return a->cfa_kind == b->cfa_kind && a->cfa_off == b->cfa_off && a->cfa_reg == b->cfa_reg &&
	       a->rules == b->rules && !memcmp(a->off, b->off, sizeof(a->off));
}

/* A lazy table (each FDE run at its first lookup) finds the rules the eager table finds
 * at every row's pc and its neighbours, and beyond both ends; a second lookup of a pc finds
 * the very row the first did (the FDE is run once), and so does every pc looked up again
 * after all the others (through the memo of found rows and past it). */
TEST(cfi_lazy_table_finds_what_the_eager_one_finds)
{
	char libc[512], self[512];
	const char *paths[3];

	three_images(paths, libc, self);
	for (int i = 0; i < 3; i++) {
		struct image im;
		struct cfi_table *t = table_of(paths[i], &im);
		char *copy = malloc(im.len);
		ASSERT(copy != NULL);
		memcpy(copy, im.buf, im.len);
		struct cfi_table *lz = sonde__cfi_table_from_elf_lazy(copy, im.len);
		if (!lz)
			FAIL("%s: no lazy table: %s", paths[i], strerror(errno));
		uint64_t base = sonde__cfi_table_base(t);
		size_t rows = sonde__cfi_table_rows(t), found = 0, none = 0;
		ASSERT_UINT(sonde__cfi_table_base(lz), ==, base);
		ASSERT_UINT(sonde__cfi_table_rows(lz), ==, 0);
		/* the FDEs it would run: the eager build's, which found none malformed here */
		ASSERT_UINT(sonde__cfi_table_stats(lz)->fdes, ==, sonde__cfi_table_stats(t)->fdes);
		const struct cfi_row *last = sonde__cfi_table_row(t, rows - 1);
		uint64_t ends[] = {0, base ? base - 1 : 0, base + last->pc + 1,
				   base + last->pc + 4096, base + (uint64_t)UINT32_MAX + 1};
		for (size_t e = 0; e < sizeof(ends) / sizeof(ends[0]); e++)
			ASSERT(sonde__cfi_table_lookup(lz, ends[e]) == NULL &&
			       sonde__cfi_table_lookup(t, ends[e]) == NULL);
		/* backwards, so that most FDEs are first run by a lookup at their end */
		for (size_t r = rows; r-- > 0;) {
			uint64_t pc = base + sonde__cfi_table_row(t, r)->pc;
			for (int d = 1; d >= -1; d--) {
				uint64_t v = pc + (uint64_t)(int64_t)d;
				const struct cfi_row *want = sonde__cfi_table_lookup(t, v);
				const struct cfi_row *got = sonde__cfi_table_lookup(lz, v);
				if (!want != !got || (want && !same_rules_row(want, got)))
					FAIL("%s: lazy lookup of %#lx gives %p, the eager table %p",
					     paths[i], (unsigned long)v, (void *)got, (void *)want);
				if (sonde__cfi_table_lookup(lz, v) != got)
					FAIL("%s: a second lookup of %#lx finds another row",
					     paths[i], (unsigned long)v);
				if (got)
					found++;
				else
					none++;
			}
		}
		/* again forwards: the lookups' memo of found rows, now full of pcs that share its
		 * slots (a thousand of them for tens of thousands of pcs), finds what the rows say */
		size_t again = 0;
		for (size_t r = 0; r < rows; r++) {
			uint64_t pc = base + sonde__cfi_table_row(t, r)->pc;
			for (int d = -1; d <= 1; d++) {
				uint64_t v = pc + (uint64_t)(int64_t)d;
				const struct cfi_row *want = sonde__cfi_table_lookup(t, v);
				const struct cfi_row *got = sonde__cfi_table_lookup(lz, v);
				if (!want != !got || (want && !same_rules_row(want, got)))
					FAIL("%s: lazy lookup of %#lx, again, gives %p, the eager table %p",
					     paths[i], (unsigned long)v, (void *)got, (void *)want);
				again += got != NULL;
			}
		}
		printf("%s: %zu rows; %zu lookups found the same rules, %zu found none in both\n",
		       paths[i], rows, found, none);
		ASSERT_UINT(found, >, rows);
		ASSERT_UINT(again, ==, found);
		sonde__cfi_table_free(lz);
		sonde__cfi_table_free(t);
		free(im.buf);
	}
}

/* A broken .eh_frame_hdr (wrong version) makes the builder scan .eh_frame instead, with
 * exactly the same result. */
TEST(cfi_hdr_and_scan_give_the_same_table)
{
	struct image im;
	struct cfi_table *a = table_of(test_prog("split-nofp"), &im);
	FILE *f;
	char cmd[512];
	unsigned long hdr_off = 0;

	snprintf(cmd, sizeof(cmd), "readelf -SW '%s' | awk '$2==\".eh_frame_hdr\"{print $5}'",
		 test_prog("split-nofp"));
	f = popen(cmd, "r");
	ASSERT(f && fscanf(f, "%lx", &hdr_off) == 1);
	pclose(f);
	ASSERT(hdr_off > 0 && hdr_off < im.len);
	im.buf[hdr_off] = 7;
	struct cfi_table *b = sonde__cfi_table_from_elf(im.buf, im.len, NULL, 0);
	ASSERT(b != NULL);
	ASSERT(sonde__cfi_table_stats(a)->used_hdr);
	ASSERT(!sonde__cfi_table_stats(b)->used_hdr);
	ASSERT_UINT(sonde__cfi_table_rows(a), ==, sonde__cfi_table_rows(b));
	ASSERT_UINT(sonde__cfi_table_base(a), ==, sonde__cfi_table_base(b));
	for (size_t i = 0; i < sonde__cfi_table_rows(a); i++)
		ASSERT(!memcmp(sonde__cfi_table_row(a, i), sonde__cfi_table_row(b, i), sizeof(struct cfi_row)));
	sonde__cfi_table_free(a);
	sonde__cfi_table_free(b);
	free(im.buf);
}

/* CFI only in .debug_frame of a separate debug file: the stripped binary alone knows only
 * the C runtime's .eh_frame; with its debug file every function is covered, as readelf
 * decodes the debug file's .debug_frame. */
TEST(cfi_debug_frame_from_separate_debug_file)
{
	char dbg_path[512];
	struct image bin = load(test_prog("unwind_dbgframe"));
	struct image dbg;

	snprintf(dbg_path, sizeof(dbg_path), "%s.debug", test_prog("unwind_dbgframe"));
	dbg = load(dbg_path);
	struct cfi_table *alone = sonde__cfi_table_from_elf(bin.buf, bin.len, NULL, 0);
	struct cfi_table *t = sonde__cfi_table_from_elf(bin.buf, bin.len, dbg.buf, dbg.len);
	ASSERT(t != NULL);
	ASSERT(sonde__cfi_table_stats(t)->used_debug_frame);
	ASSERT_UINT(sonde__cfi_table_stats(t)->fdes, >, alone ? sonde__cfi_table_stats(alone)->fdes : 0);
	struct walk w = {.t = t};
	check_against_readelf(&w, dbg_path, ".debug_frame");
	ASSERT_INT(w.fdes, >=, 7);
	sonde__cfi_table_free(alone);
	sonde__cfi_table_free(t);
	free(bin.buf);
	free(dbg.buf);
}

/* Hand-assembled .eh_frame: a CIE with every augmentation the parser knows, pointer
 * encodings, and a program using remember/restore_state and the PLT expression. */
TEST(cfi_handmade_eh_frame_rules)
{
	static const uint8_t eh[] = {
		/* CIE at 0: length 0x1c */
		0x1c, 0, 0, 0, 0, 0, 0, 0, 1, 'z', 'P', 'L', 'R', 'S', 0, 1, 0x78, 16,
		/* aug length 7: P = udata4 0x12345678, L = sdata4, R = pcrel|sdata4 */
		7, 0x03, 0x78, 0x56, 0x34, 0x12, 0x0b, 0x1b,
		/* def_cfa rsp+8; offset ra cfa-8; nop */
		0x0c, 7, 8, 0x90, 1, 0,
		/* FDE at 0x20: length 0x2c, CIE pointer 0x24 */
		0x2c, 0, 0, 0, 0x24, 0, 0, 0,
		/* pc_begin pcrel: field at 0x28 (vaddr 0x1028) + 0xfd8 = 0x2000, range 0x40 */
		0xd8, 0x0f, 0, 0, 0x40, 0, 0, 0,
		/* aug length 4: LSDA */
		4, 0, 0, 0, 0,
		/* advance 1; def_cfa_offset 16; offset rbp cfa-16; remember; advance 4;
		 * def_cfa_register rbp; offset rbx cfa-24; advance 4; restore_state */
		0x41, 0x0e, 16, 0x86, 2, 0x0a, 0x44, 0x0d, 6, 0x83, 3, 0x44, 0x0b,
		/* advance 4; def_cfa_expression (PLT) */
		0x44, 0x0f, 11, 0x77, 8, 0x80, 0, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22, 0, 0, 0,
		0, /* padding and terminator */
	};
	struct cfi_table *t = sonde__cfi_table_from_section(eh, sizeof(eh), 0x1000, false);
	const struct cfi_row *r;

	ASSERT(t != NULL);
	ASSERT(sonde__cfi_table_lookup(t, 0x1fff) == NULL);
	r = sonde__cfi_table_lookup(t, 0x2000);
	ASSERT(r && r->cfa_reg == UREG_RSP && r->cfa_off == 8);
	ASSERT(r->cfa_kind == (CFI_CFA_REG | CFI_ROW_SIGNAL));
	ASSERT_UINT(CFI_ROW_RULE(r, CFI_COL_RA), ==, CFI_RULE_OFFSET);
	ASSERT_INT(r->off[CFI_COL_RA], ==, -1);
	r = sonde__cfi_table_lookup(t, 0x2001);
	ASSERT(r && r->cfa_off == 16 && CFI_ROW_RULE(r, CFI_COL_RBP) == CFI_RULE_OFFSET);
	ASSERT_INT(r->off[CFI_COL_RBP], ==, -2);
	r = sonde__cfi_table_lookup(t, 0x2007);
	ASSERT(r && r->cfa_reg == UREG_RBP && r->cfa_off == 16);
	ASSERT_UINT(CFI_ROW_RULE(r, CFI_COL_RBX), ==, CFI_RULE_OFFSET);
	r = sonde__cfi_table_lookup(t, 0x2009); /* restored: rsp+16, rbx back to same value */
	ASSERT(r && r->cfa_reg == UREG_RSP && r->cfa_off == 16);
	ASSERT_UINT(CFI_ROW_RULE(r, CFI_COL_RBX), ==, CFI_RULE_SAME);
	r = sonde__cfi_table_lookup(t, 0x200d);
	ASSERT(r && (r->cfa_kind & CFI_CFA_KIND_MASK) == CFI_CFA_PLT);
	ASSERT_INT(r->cfa_off, ==, 8);
	ASSERT_INT(r->cfa_reg, ==, 11);
	ASSERT(sonde__cfi_table_lookup(t, 0x203f) == r);
	ASSERT(sonde__cfi_table_lookup(t, 0x2040) == NULL);
	sonde__cfi_table_free(t);
}

TEST(cfi_rejects_malformed_input)
{
	static const uint8_t not_elf[64] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
	uint8_t eh[64];

	errno = 0;
	ASSERT(sonde__cfi_table_from_elf(not_elf, sizeof(not_elf), NULL, 0) == NULL);
	ASSERT_INT(errno, ==, EINVAL);
	ASSERT(sonde__cfi_table_from_elf("", 0, NULL, 0) == NULL);
	/* A CIE whose length runs past the section, and one claiming a huge length. */
	memset(eh, 0xff, sizeof(eh));
	ASSERT(sonde__cfi_table_from_section(eh, sizeof(eh), 0x1000, false) == NULL);
	memset(eh, 0, sizeof(eh));
	eh[0] = 0x30;
	ASSERT(sonde__cfi_table_from_section(eh, sizeof(eh), 0x1000, false) == NULL);
	ASSERT(sonde__cfi_table_lookup(NULL, 0x1000) == NULL);
	sonde__cfi_table_free(NULL);
}

/* The vDSO has no file: its table is built from the image in memory (what the recorder
 * reads from the target), and matches readelf on a dump of the same bytes. */
TEST(cfi_vdso_image_from_memory)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	uint64_t lo = 0, hi = 0;

	ASSERT(f != NULL);
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "[vdso]"))
			ASSERT(sscanf(line, "%lx-%lx", &lo, &hi) == 2);
	fclose(f);
	if (!lo)
		SKIP("this process has no vDSO");
	size_t len = (size_t)(hi - lo);
	uint8_t *img = malloc(len);
	ASSERT(img != NULL);
	memcpy(img, (const void *)(uintptr_t)lo, len);
	test_write_file(test_path("vdso.so"), img, len);
	struct cfi_table *t = sonde__cfi_table_from_elf(img, len, NULL, 0);
	ASSERT(t != NULL);
	struct walk w = {.t = t};
	check_against_readelf(&w, test_path("vdso.so"), ".eh_frame");
	ASSERT_INT(w.fdes, >=, 1);
	ASSERT_INT(w.fdes, ==, sonde__cfi_table_stats(t)->fdes);
	sonde__cfi_table_free(t);
	free(img);
}

/* Every DW_EH_PE pointer encoding the parser accepts, and the ones it must refuse. */
TEST(cfi_pointer_encodings)
{
	/* An image whose one segment maps file offset 0 at vaddr 0x5000: a pointer stored at
	 * 0x5008 holds 0x12345678 (for DW_EH_PE_indirect). */
	uint8_t file[16] = {0};
	file[8] = 0x78, file[9] = 0x56, file[10] = 0x34, file[11] = 0x12;
	struct cfi_image img = {.buf = file, .len = sizeof(file), .n_loads = 1};
	img.loads[0] = (struct cfi_load){0x5000, 16, 0, 16, false};
	static const uint8_t bytes[] = {
		0xfe, 0xff,			 /* 0: udata2 0xfffe / sdata2 -2 */
		0xe5, 0x8e, 0x26,		 /* 2: uleb 624485 / sleb */
		0x7f,				 /* 5: sleb -1 */
		0x10, 0,    0,	  0,		 /* 6: sdata4 16 */
		8,    0x50, 0,	  0, 0, 0, 0, 0, /* 10: udata8 0x5008 */
	};
	struct cfi_sec s = {.buf = bytes,
			    .len = sizeof(bytes),
			    .vaddr = 0x1000,
			    .text_base = 0x2000,
			    .data_base = 0x3000,
			    .img = &img};
	struct {
		size_t at;
		uint8_t enc;
		bool ok;
		uint64_t want;
	} cases[] = {
		{0, 0x02, true, 0xfffe},
		{0, 0x0a, true, (uint64_t)-2},
		{2, 0x01, true, 624485},
		{5, 0x09, true, (uint64_t)-1},
		{6, 0x1b, true, 0x1000 + 6 + 16}, /* pcrel sdata4: from the field */
		{6, 0x2b, true, 0x2000 + 16},	  /* textrel */
		{6, 0x3b, true, 0x3000 + 16},	  /* datarel */
		{10, 0x04, true, 0x5008},	  /* udata8 */
		{10, 0x00, true, 0x5008},	  /* absptr is 8 bytes */
		{10, 0x84, true, 0x12345678},	  /* indirect: read from the image */
		{6, 0x83, false, 0},		  /* indirect to an address not in the image */
		{6, 0x05, false, 0},		  /* no such format */
		{6, 0x4b, false, 0},		  /* funcrel: not used by CFI headers */
		{14, 0x04, false, 0},		  /* runs past the end */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct cfi_rd r = {bytes + cases[i].at, bytes + sizeof(bytes), false};
		uint64_t v = 0;
		bool ok = sonde__cfi_rd_encoded(&r, &s, cases[i].enc, &v);
		if (ok != cases[i].ok || (ok && v != cases[i].want))
			FAIL("case %zu (enc 0x%02x): ok %d value 0x%" PRIx64
			     ", want ok %d 0x%" PRIx64,
			     i, cases[i].enc, ok, v, cases[i].ok, cases[i].want);
	}
	struct cfi_rd r = {bytes, bytes, false};
	uint64_t v = 1;
	ASSERT(sonde__cfi_rd_encoded(&r, &s, 0xff, &v) && v == 0); /* omit */
}
