/* sonde report: where a recording spent its samples.
 *
 * Samples are first counted per stack node (the spool's interned call paths), so every
 * distinct stack is symbolized and walked once however many samples share it. Each frame
 * is resolved once through the symbolizer into one or more functions (inline frames are
 * functions of their own unless --no-inline); functions are interned by (label, module).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/error.h>
#include <sonde/record.h>
#include <sonde/spool_reader.h>
#include <sonde/symbolize.h>

#include "base/buf.h"
#include "cli.h"
#include "output.h"

enum { MAX_INLINE = 16, MAX_CPU = 1 << 16 };

/* --sort keys; each groups the report by one property of the samples. Only cpu so far:
 * functions are what the tables sort by without --sort. */
enum sort_key { SORT_NONE, SORT_CPU };

struct func {
	char *label;  /* name, plus " (file:line)" with --lines */
	char *module; /* basename of the module, or "[unknown]" */
	uint64_t self, total;
	uint64_t stamp; /* last node counted into total: counts once per stack */
};

struct frame_res {
	uint32_t first; /* index into report.frame_funcs */
	uint8_t n;	/* 0: not resolved yet */
};

struct report {
	const char *path;
	const char *buildid_cache; /* NULL: the default the recorder writes to */
	int folded, lines, no_inline;
	long top;
	struct sonde_spool *spool;
	struct sonde_spool_info info;
	struct sonde_symbolizer *sym;

	struct func *funcs;
	size_t n_funcs, funcs_cap;
	uint32_t *ftab; /* hash slot -> func index + 1 */
	size_t ftab_size;

	struct frame_res *frames; /* by frame id */
	struct buf frame_funcs;	  /* uint32_t func ids, innermost first, per frame */
	uint64_t resolved;	  /* distinct frames looked up */
	uint64_t unresolved;	  /* of those, the ones the symbolizer could not name */
	uint64_t *node_count;	  /* samples per stack node */
	uint32_t *node_pid;	  /* pid of a sample of that node (for raw addresses) */
	struct buf stack;	  /* uint32_t func ids of the stack being walked, leaf first */

	int *cpus; /* --cpu: only samples of these CPUs; NULL: all */
	size_t n_cpus;
	const char *cpu_list;
	enum sort_key sort;
	uint64_t selected;   /* samples counted (all, or those of the --cpu CPUs) */
	uint64_t *cpu_count; /* samples per CPU, [MAX_CPU] for samples without one */
	uint32_t cpu_max;    /* highest CPU seen + 1 */
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: sonde report [--folded] [--top N] [--lines] [--no-inline]\n"
		"                    [--buildid-cache DIR] [--cpu LIST] [--sort cpu] FILE\n\n"
		"Summarizes a spool written by 'sonde record': the functions with the most\n"
		"samples, by self (the sampled function itself) and by total (anywhere on the\n"
		"stack, counted once per sample even when recursive).\n\n"
		"  --folded      print 'outer;...;inner COUNT' lines (flamegraph.pl, speedscope)\n"
		"  --top N       rows per table (default 20)\n"
		"  --lines       add file:line to each function when debug info has it\n"
		"  --no-inline   attribute inlined code to the function it was inlined into\n"
		"  --buildid-cache DIR  where 'sonde record --buildid-cache DIR' kept deleted or\n"
		"                replaced images (default $SONDE_BUILDID_CACHE, else\n"
		"                $XDG_CACHE_HOME/sonde/buildid, else ~/.cache/sonde/buildid)\n"
		"  --cpu LIST    only samples taken on these CPUs (perf's list syntax: 0,2-3)\n"
		"  --sort cpu    samples by CPU instead of by function\n"
		"  -h, --help    this help\n");
}

static uint64_t str_hash(const char *a, const char *b)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (; *a; a++)
		h = (h ^ (uint8_t)*a) * 0x100000001b3ULL;
	h = (h ^ 0xff) * 0x100000001b3ULL;
	for (; *b; b++)
		h = (h ^ (uint8_t)*b) * 0x100000001b3ULL;
	return h;
}

static int ftab_grow(struct report *r)
{
	size_t size = r->ftab_size ? r->ftab_size * 2 : 1024;
	uint32_t *t = calloc(size, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < r->n_funcs; i++) {
		size_t j = str_hash(r->funcs[i].label, r->funcs[i].module) & (size - 1);
		while (t[j])
			j = (j + 1) & (size - 1);
		t[j] = (uint32_t)i + 1;
	}
	free(r->ftab);
	r->ftab = t;
	r->ftab_size = size;
	return 0;
}

/* The id of function (label, module), added if new; -ENOMEM on failure. */
static long func_intern(struct report *r, const char *label, const char *module)
{
	if ((r->n_funcs + 1) * 2 > r->ftab_size && ftab_grow(r) < 0)
		return -ENOMEM;
	size_t mask = r->ftab_size - 1, j = str_hash(label, module) & mask;
	for (; r->ftab[j]; j = (j + 1) & mask) {
		const struct func *f = &r->funcs[r->ftab[j] - 1];
		if (!strcmp(f->label, label) && !strcmp(f->module, module))
			return r->ftab[j] - 1;
	}
	if (r->n_funcs == r->funcs_cap) {
		size_t cap = r->funcs_cap ? r->funcs_cap * 2 : 256;
		struct func *n = realloc(r->funcs, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		r->funcs = n;
		r->funcs_cap = cap;
	}
	struct func *f = &r->funcs[r->n_funcs];
	*f = (struct func){.label = strdup(label), .module = strdup(module), .stamp = UINT64_MAX};
	if (!f->label || !f->module) {
		free(f->label);
		free(f->module);
		return -ENOMEM;
	}
	r->ftab[j] = (uint32_t)++r->n_funcs;
	return (long)r->n_funcs - 1;
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s && s[1] ? s + 1 : path;
}

/* Symbolizes one frame: fills out[] innermost first, returns how many. */
static int symbolize_frame(struct report *r, uint32_t frame_id, uint32_t pid,
			   struct sonde_sym_frame *out, const char **module)
{
	struct sonde_spool_frame f;
	struct sonde_spool_module m;

	*module = "[unknown]";
	if (sonde_spool__get_frame(r->spool, frame_id, &f) < 0)
		return -ERANGE;
	if (f.module == 0)
		return sonde_symbolizer__symbolize_raw(r->sym, pid, f.addr, out, MAX_INLINE);
	if (sonde_spool__get_module(r->spool, f.module, &m) < 0)
		return -ERANGE;
	*module = m.def.path && m.def.path[0] ? base_name(m.def.path) : "[anonymous]";
	struct sonde_sym_module sm = {
		.pid = m.def.pid,
		.flags = m.def.flags,
		.start = m.def.start,
		.end = m.def.end,
		.pgoff = m.def.pgoff,
		.dev = m.def.dev,
		.inode = m.def.inode,
		.build_id = m.def.build_id,
		.build_id_len = m.def.build_id_len,
		.path = m.def.path,
	};
	return sonde_symbolizer__symbolize(r->sym, &sm, f.addr, out, MAX_INLINE);
}

/* Resolves frame_id into function ids (cached); returns 0 or -errno. */
static int resolve_frame(struct report *r, uint32_t frame_id, uint32_t pid)
{
	struct sonde_sym_frame out[MAX_INLINE];
	const char *module;
	char label[1024];
	char fallback[64];
	int n = symbolize_frame(r, frame_id, pid, out, &module);

	if (n < 0) {
		/* the symbolizer refused the frame: name it by its number, still counted */
		snprintf(fallback, sizeof(fallback), "[frame %" PRIu32 "]", frame_id);
		out[0] = (struct sonde_sym_frame){.name = fallback};
		n = 1;
	}
	r->resolved++;
	if (out[0].origin == SONDE_SYM_ORIGIN_NONE)
		r->unresolved++;
	int first = r->no_inline ? n - 1 : 0;
	r->frames[frame_id].first = (uint32_t)(r->frame_funcs.len / sizeof(uint32_t));
	r->frames[frame_id].n = (uint8_t)(n - first);
	for (int i = first; i < n; i++) {
		const struct sonde_sym_frame *s = &out[i];
		if (r->lines && s->file && s->line)
			snprintf(label, sizeof(label), "%s (%s:%" PRIu32 ")", s->name,
				 base_name(s->file), s->line);
		else
			snprintf(label, sizeof(label), "%s", s->name);
		long id = func_intern(r, label, s->module ? base_name(s->module) : module);
		if (id < 0)
			return (int)id;
		uint32_t v = (uint32_t)id;
		sonde__buf_append(&r->frame_funcs, &v, sizeof(v));
	}
	return buf_error(&r->frame_funcs);
}

/* Expands stack node `node` into r->stack: function ids, leaf first. */
static int expand_stack(struct report *r, uint32_t node)
{
	uint32_t parent, frame;

	r->stack.len = 0;
	for (; node; node = parent) {
		if (sonde_spool__get_node(r->spool, node, &parent, &frame) < 0)
			return -ERANGE;
		if (!r->frames[frame].n) {
			int e = resolve_frame(r, frame, r->node_pid[node]);
			if (e < 0)
				return e;
		}
		const uint32_t *ids =
			(const uint32_t *)r->frame_funcs.data + r->frames[frame].first;
		sonde__buf_append(&r->stack, ids, r->frames[frame].n * sizeof(uint32_t));
	}
	return buf_error(&r->stack);
}

static bool cpu_selected(const struct report *r, uint32_t cpu)
{
	if (!r->cpus)
		return true;
	for (size_t i = 0; i < r->n_cpus; i++)
		if ((uint32_t)r->cpus[i] == cpu)
			return true;
	return false;
}

/* Counts samples per stack node (and per CPU), remembering a pid for each node. */
static int count_nodes(struct report *r)
{
	struct sonde_spool_sample smp;
	struct sonde_spool_thread t;

	r->node_count = calloc((size_t)r->info.stacks + 1, sizeof(*r->node_count));
	r->node_pid = calloc((size_t)r->info.stacks + 1, sizeof(*r->node_pid));
	r->frames = calloc((size_t)r->info.frames + 1, sizeof(*r->frames));
	r->cpu_count = calloc(MAX_CPU + 1, sizeof(*r->cpu_count));
	if (!r->node_count || !r->node_pid || !r->frames || !r->cpu_count)
		return -ENOMEM;
	for (uint64_t i = 0; sonde_spool__get_sample(r->spool, i, &smp) == 0; i++) {
		if (!cpu_selected(r, smp.cpu))
			continue;
		r->selected++;
		uint32_t c = smp.cpu < MAX_CPU ? smp.cpu : MAX_CPU;
		r->cpu_count[c]++;
		if (c < MAX_CPU && c >= r->cpu_max)
			r->cpu_max = c + 1;
		if (!r->node_count[smp.stack]++ &&
		    sonde_spool__get_thread(r->spool, smp.thread, &t) == 0)
			r->node_pid[smp.stack] = t.pid;
	}
	return 0;
}

/* Self and total per function. */
static int attribute(struct report *r)
{
	for (uint32_t node = 1; node <= r->info.stacks; node++) {
		uint64_t c = r->node_count[node];
		if (!c)
			continue;
		int e = expand_stack(r, node);
		if (e < 0)
			return e;
		const uint32_t *ids = (const uint32_t *)r->stack.data;
		size_t n = r->stack.len / sizeof(uint32_t);
		r->funcs[ids[0]].self += c;
		for (size_t i = 0; i < n; i++) {
			struct func *f = &r->funcs[ids[i]];
			if (f->stamp != node) {
				f->stamp = node;
				f->total += c;
			}
		}
	}
	return 0;
}

static const struct report *sort_ctx;
static int by_self(const void *a, const void *b)
{
	const struct func *x = &sort_ctx->funcs[*(const uint32_t *)a];
	const struct func *y = &sort_ctx->funcs[*(const uint32_t *)b];
	if (x->self != y->self)
		return x->self < y->self ? 1 : -1;
	return strcmp(x->label, y->label);
}
static int by_total(const void *a, const void *b)
{
	const struct func *x = &sort_ctx->funcs[*(const uint32_t *)a];
	const struct func *y = &sort_ctx->funcs[*(const uint32_t *)b];
	if (x->total != y->total)
		return x->total < y->total ? 1 : -1;
	return strcmp(x->label, y->label);
}

static void print_table(const struct report *r, uint32_t *order, int self)
{
	double all = r->selected ? (double)r->selected : 1;
	size_t rows = 0;

	sort_ctx = r;
	qsort(order, r->n_funcs, sizeof(*order), self ? by_self : by_total);
	printf("\nTop functions by %s samples:\n", self ? "self" : "total");
	printf("%8s %9s %8s %9s  %s\n", "self%", "self", "total%", "total", "function [module]");
	for (size_t i = 0; i < r->n_funcs && rows < (size_t)r->top; i++) {
		const struct func *f = &r->funcs[order[i]];
		if (!(self ? f->self : f->total))
			break;
		/* names that are already bracketed ([kernel.kallsyms], [vdso]) are not wrapped
		 * again */
		bool bracketed = f->module[0] == '[' && f->module[strlen(f->module) - 1] == ']';
		printf("%7.2f%% %9" PRIu64 " %7.2f%% %9" PRIu64 "  %s %s%s%s\n",
		       100.0 * f->self / all, f->self, 100.0 * f->total / all, f->total, f->label,
		       bracketed ? "" : "[", f->module, bracketed ? "" : "]");
		rows++;
	}
}

/* --sort cpu: one row per CPU that has samples (as perf report --sort cpu). */
static void print_cpus(const struct report *r)
{
	double all = r->selected ? (double)r->selected : 1;

	printf("\nSamples by CPU:\n%8s %9s  %s\n", "samples%", "samples", "cpu");
	for (uint32_t c = 0; c < r->cpu_max; c++)
		if (r->cpu_count[c])
			printf("%7.2f%% %9" PRIu64 "  %" PRIu32 "\n", 100.0 * r->cpu_count[c] / all,
			       r->cpu_count[c], c);
	if (r->cpu_count[MAX_CPU])
		printf("%7.2f%% %9" PRIu64 "  [unknown]\n", 100.0 * r->cpu_count[MAX_CPU] / all,
		       r->cpu_count[MAX_CPU]);
}

static int print_report(const struct report *r)
{
	uint32_t *order = malloc((r->n_funcs + 1) * sizeof(*order));
	const struct sonde_spool_info *in = &r->info;
	double secs = in->samples ? (in->last_time_ns - in->first_time_ns) / 1e9 : 0;

	if (!order)
		return -ENOMEM;
	for (size_t i = 0; i < r->n_funcs; i++)
		order[i] = (uint32_t)i;
	printf("%s: %" PRIu64 " samples over %.2f s", r->path, in->samples, secs);
	if (in->header.sample_period_ns)
		printf(" at %.0f Hz", 1e9 / in->header.sample_period_ns);
	printf(", %" PRIu32 " threads, %" PRIu32 " modules, %" PRIu32 " distinct stacks\n",
	       in->threads, in->modules, in->stacks);
	if (r->cpus)
		printf("%" PRIu64 " samples on CPUs %s\n", r->selected, r->cpu_list);
	if (r->node_count[0])
		printf("%" PRIu64 " samples (%.2f%%) have an empty stack\n", r->node_count[0],
		       100.0 * r->node_count[0] / (double)(r->selected ? r->selected : 1));
	if (r->sort == SORT_CPU) {
		print_cpus(r);
	} else {
		print_table(r, order, 1);
		print_table(r, order, 0);
	}
	printf("\nunresolved frames: %" PRIu64 " of %" PRIu64 "\n", r->unresolved, r->resolved);
	free(order);
	return 0;
}

struct folded_line {
	char *text;
	uint64_t count;
};

static int by_text(const void *a, const void *b)
{
	return strcmp(((const struct folded_line *)a)->text, ((const struct folded_line *)b)->text);
}

/* One "outer;...;inner" string for the stack in r->stack. */
static char *folded_text(const struct report *r)
{
	const uint32_t *ids = (const uint32_t *)r->stack.data;
	size_t n = r->stack.len / sizeof(uint32_t);
	struct buf b = BUF_INIT;

	for (size_t i = n; i-- > 0;) {
		const char *label = r->funcs[ids[i]].label;
		sonde__buf_append(&b, label, strlen(label));
		buf_put_u8(&b, i ? ';' : 0);
	}
	if (buf_error(&b)) {
		sonde__buf_free(&b);
		return NULL;
	}
	return (char *)b.data;
}

/* Stacks whose functions are the same (different addresses in one function) merge. */
static int print_folded(struct report *r)
{
	struct folded_line *lines = calloc((size_t)r->info.stacks + 1, sizeof(*lines));
	size_t n = 0;
	int err = 0;

	if (!lines)
		return -ENOMEM;
	for (uint32_t node = 1; node <= r->info.stacks && !err; node++) {
		if (!r->node_count[node])
			continue;
		if ((err = expand_stack(r, node)) < 0)
			break;
		lines[n].text = folded_text(r);
		lines[n].count = r->node_count[node];
		err = lines[n++].text ? 0 : -ENOMEM;
	}
	if (!err) {
		qsort(lines, n, sizeof(*lines), by_text);
		for (size_t i = 0; i < n;) {
			uint64_t c = 0;
			size_t j = i;
			for (; j < n && !strcmp(lines[j].text, lines[i].text); j++)
				c += lines[j].count;
			printf("%s %" PRIu64 "\n", lines[i].text, c);
			i = j;
		}
	}
	for (size_t i = 0; i < n; i++)
		free(lines[i].text);
	free(lines);
	return err;
}

static void report_free(struct report *r)
{
	for (size_t i = 0; i < r->n_funcs; i++) {
		free(r->funcs[i].label);
		free(r->funcs[i].module);
	}
	free(r->funcs);
	free(r->ftab);
	free(r->frames);
	free(r->node_count);
	free(r->node_pid);
	free(r->cpu_count);
	free(r->cpus);
	sonde__buf_free(&r->frame_funcs);
	sonde__buf_free(&r->stack);
	sonde_symbolizer__free(r->sym);
	sonde_spool__close(r->spool);
}

/* Opens the spool, printing the one-line error or truncation warning. */
static int open_spool(struct report *r)
{
	uint64_t off = 0;

	r->spool = sonde_spool__open(r->path, &off);
	if (!r->spool) {
		int e = errno;
		if (e == SONDE_E_MAGIC)
			cli_error("report", "%s: not a sonde spool file", r->path);
		else if (e >= SONDE_E_BASE && e != SONDE_E_TRUNCATED)
			cli_error("report", "%s: corrupt spool: %s at byte %" PRIu64, r->path,
				  sonde_strerror(e), off);
		else
			cli_error("report", "%s: %s", r->path, sonde_strerror(e));
		cli_hint_unfinished("report", r->path);
		return -e;
	}
	sonde_spool__get_info(r->spool, &r->info);
	if (!r->info.complete)
		cli_error("report",
			  "%s: truncated at byte %" PRIu64 ", recovered %" PRIu64 " samples",
			  r->path, r->info.valid_bytes, r->info.samples);
	return 0;
}

static int parse_args(struct report *r, int argc, char **argv)
{
	static const struct option opts[] = {
		{"folded", no_argument, NULL, 'f'},
		{"top", required_argument, NULL, 't'},
		{"lines", no_argument, NULL, 'l'},
		{"no-inline", no_argument, NULL, 'n'},
		{"buildid-cache", required_argument, NULL, 'B'},
		{"cpu", required_argument, NULL, 'C'},
		{"sort", required_argument, NULL, 's'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	char *end;
	int c;

	r->top = 20;
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'f':
			r->folded = 1;
			break;
		case 't':
			errno = 0;
			r->top = strtol(optarg, &end, 10);
			if (errno || *end || r->top < 1) {
				cli_error("report", "--top wants a positive number, not '%s'",
					  optarg);
				return CLI_USAGE;
			}
			break;
		case 'l':
			r->lines = 1;
			break;
		case 'n':
			r->no_inline = 1;
			break;
		case 'B':
			r->buildid_cache = optarg;
			break;
		case 'C':
			free(r->cpus);
			r->cpus = NULL;
			if (sonde_cpu_list__parse(optarg, &r->cpus, &r->n_cpus) < 0) {
				cli_error("report",
					  "--cpu wants a CPU list such as 0,2-3, not '%s'", optarg);
				return CLI_USAGE;
			}
			r->cpu_list = optarg;
			break;
		case 's':
			if (strcmp(optarg, "cpu") != 0) {
				cli_error("report", "unknown --sort key '%s' (known: cpu)", optarg);
				return CLI_USAGE;
			}
			r->sort = SORT_CPU;
			break;
		case 'h':
			usage(stdout);
			return CLI_OK;
		default:
			usage(stderr);
			return CLI_USAGE;
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
		return CLI_USAGE;
	}
	r->path = argv[optind];
	return -1;
}

/* One line on stderr when files were refused: their names are missing from the report,
 * and the warnings said which files (docs/symbolize.md). */
static void note_refused(const struct report *r)
{
	struct sonde_symbolizer_stats st = {.sz = sizeof(st)};
	uint64_t n;

	if (sonde_symbolizer__get_stats(r->sym, &st) < 0)
		return;
	n = st.refused_symlink + st.refused_not_regular + st.refused_too_big + st.refused_owner;
	if (n)
		fprintf(stderr,
			"sonde report: %llu file%s ignored (%llu symbolic links, %llu not regular "
			"files, %llu too big, %llu of another owner): their names are missing\n",
			(unsigned long long)n, n == 1 ? "" : "s",
			(unsigned long long)st.refused_symlink,
			(unsigned long long)st.refused_not_regular,
			(unsigned long long)st.refused_too_big,
			(unsigned long long)st.refused_owner);
}

static int cmd_report(int argc, char **argv)
{
	struct report r = {0};
	int rc = parse_args(&r, argc, argv), err;

	if (rc >= 0)
		return rc;
	if (open_spool(&r) < 0)
		return CLI_FAILURE;
	struct sonde_symbolizer_opts so = {.sz = sizeof(so), .buildid_cache_dir = r.buildid_cache};
	r.sym = sonde_symbolizer__new(&so);
	if (!r.sym) {
		cli_error("report", "cannot create the symbolizer: %s", strerror(errno));
		report_free(&r);
		return CLI_FAILURE;
	}
	err = count_nodes(&r);
	if (!err && r.sort == SORT_CPU && r.folded) {
		cli_error("report", "--sort cpu and --folded do not go together");
		report_free(&r);
		return CLI_USAGE;
	}
	if (!err)
		err = r.folded ? print_folded(&r) : attribute(&r);
	if (!err && !r.folded)
		err = print_report(&r);
	note_refused(&r);
	if (err < 0)
		cli_error("report", "%s: %s", r.path, sonde_strerror(err));
	report_free(&r);
	if (fflush(stdout) != 0)
		err = -errno;
	return err < 0 ? CLI_FAILURE : CLI_OK;
}

SONDE_COMMAND("report", "summarize a recording: top functions, folded stacks", cmd_report)
