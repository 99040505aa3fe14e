/* Accumulated judging of split's profile; see split_util.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../test.h"
#include "../util.h"
#include "split_util.h"

enum { MAX_COUNTS = 4 };

const char *const split_kinds[3] = {"hot", "warm", "cool"};
const double split_want[3] = {60.0, 30.0, 10.0};

void split_add_folded(struct split_counts *c, const char *folded)
{
	char *text = ASSERT_NOT_NULL(strdup(folded)), *save;

	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *sp = strrchr(line, ' '), *end;
		if (!sp)
			FAIL("not a folded line: %s", line);
		*sp = 0;
		uint64_t n = strtoull(sp + 1, &end, 10);
		if (end == sp + 1 || *end)
			FAIL("not a folded count: %s", sp + 1);
		c->all += n;
		for (int k = 0; k < 3; k++) {
			char leaf[32], path[96];
			snprintf(leaf, sizeof(leaf), "compute_%s", split_kinds[k]);
			snprintf(path, sizeof(path), "main;run;path_%s;compute_%s", split_kinds[k],
				 split_kinds[k]);
			const char *at = strstr(line, leaf);
			if (!at || (at != line && at[-1] != ';') ||
			    (at[strlen(leaf)] != 0 && at[strlen(leaf)] != ';'))
				continue;
			const char *p = strstr(line, path);
			if (!p || (p != line && p[-1] != ';') ||
			    p + strlen(path) != at + strlen(leaf))
				FAIL("%" PRIu64 " samples in %s do not come through %s: %s", n,
				     leaf, path, line);
			c->n[k] += n;
		}
	}
	free(text);
}

void split_add_spool(struct split_counts *c, const char *spool, const char *flags)
{
	struct test_output o;

	test_runf(&o, 120, "%s report --folded %s %s", test_bin("sonde"), flags, spool);
	if (o.status != 0)
		FAIL("sonde report --folded %s exited %d: %s", spool, o.status, o.err);
	split_add_folded(c, o.out);
	test_output_free(&o);
}

void split_add(struct split_counts *to, const struct split_counts *c)
{
	for (int k = 0; k < 3; k++)
		to->n[k] += c->n[k];
	to->all += c->all;
}

double split_pct(const struct split_counts *c, int k, bool of_compute)
{
	uint64_t of = of_compute ? c->n[0] + c->n[1] + c->n[2] : c->all;

	return of ? 100.0 * (double)c->n[k] / (double)of : 0;
}

const char *split_str(const struct split_counts *c, bool of_compute)
{
	static char s[160];

	snprintf(s, sizeof(s), "%" PRIu64 " samples: hot %.1f%%, warm %.1f%%, cool %.1f%%", c->all,
		 split_pct(c, 0, of_compute), split_pct(c, 1, of_compute),
		 split_pct(c, 2, of_compute));
	return s;
}

static bool settled(const struct split_judge *j, const struct split_counts *acc, int n)
{
	for (int i = 0; i < n; i++) {
		if (acc[i].all < j->min_samples)
			return false;
		for (int k = 0; k < 3; k++) {
			double d = split_pct(&acc[i], k, j->of_compute) - split_want[k];
			if (d < -j->tolerance || d > j->tolerance)
				return false;
		}
	}
	return true;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void split_settle(const struct split_judge *j,
		  void (*record)(void *ctx, int seconds, struct split_counts *add), void *ctx,
		  struct split_counts *acc, int n_counts)
{
	int max = j->max_recordings ? j->max_recordings : 4;
	int seconds = j->seconds ? j->seconds : 3;
	double deadline = now_s() + (j->deadline_s ? j->deadline_s : 90);

	ASSERT(n_counts >= 1 && n_counts <= MAX_COUNTS);
	memset(acc, 0, sizeof(*acc) * (size_t)n_counts);
	for (int r = 1;; r++) {
		struct split_counts add[MAX_COUNTS] = {0};
		record(ctx, seconds, add);
		uint64_t fewest = UINT64_MAX;
		for (int i = 0; i < n_counts; i++) {
			split_add(&acc[i], &add[i]);
			fewest = add[i].all < fewest ? add[i].all : fewest;
			printf("recording %d (%d s) [%d]: %s", r, seconds, i,
			       split_str(&add[i], j->of_compute));
			printf("; accumulated %s\n", split_str(&acc[i], j->of_compute));
		}
		if (settled(j, acc, n_counts) || r >= max || now_s() >= deadline)
			break;
		if (fewest < j->min_samples) {
			uint64_t s = fewest ? (uint64_t)seconds * j->min_samples / fewest + 1 : 30;
			seconds = s > 30 ? 30 : s < (uint64_t)seconds ? seconds : (int)s;
		}
	}
	for (int i = 0; i < n_counts; i++)
		for (int k = 0; k < 3; k++)
			ASSERT_DOUBLE_NEAR(split_pct(&acc[i], k, j->of_compute), split_want[k],
					   j->tolerance);
}

/* Functions of a program's C runtime objects that carry no CFI. */
static bool without_cfi(const char *fn, size_t len)
{
	static const char *const names[] = {"_init",	    "_fini",
					    "frame_dummy", "__do_global_dtors_aux",
					    "register_tm_clones", "deregister_tm_clones"};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strlen(names[i]) == len && strncmp(fn, names[i], len) == 0)
			return true;
	return false;
}

void split_assert_cfi_only(const char *record_err, const char *folded)
{
	unsigned long long cfi = 0, fp = 0, no_row = 0, crt = 0;
	const char *p = strstr(record_err, " frames by DWARF CFI, ");

	ASSERT(p != NULL);
	while (p > record_err && p[-1] != ' ')
		p--;
	ASSERT(sscanf(p, "%llu frames by DWARF CFI, %llu by frame pointers", &cfi, &fp) == 2);
	ASSERT_UINT(cfi, >, 0);
	if (!fp)
		return;
	/* the fallbacks, when there were any: "CFI fallbacks: no-row N" and nothing else */
	const char *fb = strstr(p, "CFI fallbacks: ");
	ASSERT(fb != NULL);
	ASSERT(sscanf(fb, "CFI fallbacks: no-row %llu", &no_row) == 1);
	const char *eol = strchr(fb, '\n');
	ASSERT_UINT(no_row, >=, fp); /* a fallback whose frame-pointer step failed ended its stack */
	ASSERT(!memchr(fb, ',', eol ? (size_t)(eol - fb) : strlen(fb)));
	for (const char *l = folded; *l;) {
		const char *end = strchr(l, '\n'), *sp;
		if (!end)
			end = l + strlen(l);
		for (sp = end; sp > l && sp[-1] != ' '; sp--)
			;
		unsigned long long n = strtoull(sp, NULL, 10);
		for (const char *f = l; f < sp;) {
			const char *semi = memchr(f, ';', (size_t)(sp - 1 - f));
			const char *fe = semi ? semi : sp - 1;
			crt += without_cfi(f, (size_t)(fe - f)) ? n : 0;
			f = fe + 1;
		}
		l = *end ? end + 1 : end;
	}
	if (fp > crt)
		FAIL("%llu frames unwound by frame pointers, %llu frames of code without CFI in the "
		     "stacks: CFI missed a row it has",
		     fp, crt);
}
