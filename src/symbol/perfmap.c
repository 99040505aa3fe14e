#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sonde/error.h>

#include "base/alloc.h"
#include "base/array.h"
#include "proc/proc.h"
#include "symbol/perfmap.h"

/* strtoull(p, &end, 16) over a bounded buffer: optional blanks, an optional 0x when a hex
 * digit follows it, then hex digits (saturating). Returns the characters used. */
static size_t hex_prefix(const char *p, size_t len, uint64_t *v)
{
	size_t i = 0, start;
	uint64_t x = 0;
	int overflow = 0;

	while (i < len && (p[i] == ' ' || p[i] == '\t'))
		i++;
	if (i + 2 < len && p[i] == '0' && (p[i + 1] == 'x' || p[i + 1] == 'X') &&
	    isxdigit((unsigned char)p[i + 2]))
		i += 2;
	start = i;
	for (; i < len; i++) {
		int d = p[i] >= '0' && p[i] <= '9'   ? p[i] - '0'
			: p[i] >= 'a' && p[i] <= 'f' ? p[i] - 'a' + 10
			: p[i] >= 'A' && p[i] <= 'F' ? p[i] - 'A' + 10
						     : -1;
		if (d < 0)
			break;
		if (x > (UINT64_MAX >> 4))
			overflow = 1;
		x = (x << 4) | (uint64_t)d;
	}
	if (i == start) { /* no digits: strtoull consumes nothing */
		*v = 0;
		return 0;
	}
	*v = overflow ? UINT64_MAX : x;
	return i;
}

static int add_line(struct perfmap *pm, uint64_t start, uint64_t size, const char *name,
		    size_t name_len)
{
	if (sonde__array_grow(&pm->lines, &pm->cap_lines, pm->n_lines + 1,
			       sizeof(*pm->lines), 64) < 0)
		return -ENOMEM;
	const char *n = sonde__strpool_addn(&pm->names, name, name_len);
	if (!n)
		return -ENOMEM;
	/* end 0 marks "size 0: up to the next entry", settled in sonde__perfmap_index */
	uint64_t end = size ? (start + size < start ? UINT64_MAX : start + size) : 0;
	pm->lines[pm->n_lines++] = (struct perfmap_entry){start, end, n};
	return 0;
}

/* One line without its newline, with perf's (line_len, len) arithmetic. */
static int parse_line(struct perfmap *pm, const char *line, size_t line_len)
{
	uint64_t start, size;
	size_t len = hex_prefix(line, line_len, &start) + 1;

	if (len + 2 >= line_len)
		return 0;
	len += hex_prefix(line + len, line_len - len, &size) + 1;
	if (len + 2 >= line_len)
		return 0;
	return add_line(pm, start, size, line + len, line_len - len);
}

ssize_t sonde__perfmap_parse(struct perfmap *pm, const char *buf, size_t len, int at_eof)
{
	size_t pos = 0;

	while (pos < len) {
		const char *nl = memchr(buf + pos, '\n', len - pos);
		if (!nl) {
			pm->n_complete = pm->n_lines;
			if (at_eof && parse_line(pm, buf + pos, len - pos) < 0)
				return -ENOMEM;
			break;
		}
		if (parse_line(pm, buf + pos, (size_t)(nl - (buf + pos))) < 0)
			return -ENOMEM;
		pos = (size_t)(nl - buf) + 1;
		pm->n_complete = pm->n_lines;
	}
	return (ssize_t)pos;
}

static int ent_by_start(const void *pa, const void *pb)
{
	const struct perfmap_entry *const *a = pa, *const *b = pb;

	if ((*a)->start != (*b)->start)
		return (*a)->start < (*b)->start ? -1 : 1;
	return *a < *b ? -1 : *a > *b;
}

static int u64_cmp(const void *pa, const void *pb)
{
	uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;

	return a < b ? -1 : a > b;
}

/* A max-heap of line indexes: the latest line wins. */
struct heap {
	size_t *v, n;
};

static void heap_push(struct heap *h, size_t x)
{
	size_t i = h->n++;

	h->v[i] = x;
	while (i && h->v[(i - 1) / 2] < h->v[i]) {
		size_t p = (i - 1) / 2, t = h->v[p];
		h->v[p] = h->v[i];
		h->v[i] = t;
		i = p;
	}
}

static void heap_pop(struct heap *h)
{
	size_t i = 0;

	h->v[0] = h->v[--h->n];
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < h->n && h->v[l] > h->v[m])
			m = l;
		if (r < h->n && h->v[r] > h->v[m])
			m = r;
		if (m == i)
			break;
		size_t t = h->v[m];
		h->v[m] = h->v[i];
		h->v[i] = t;
		i = m;
	}
}

static void emit(struct perfmap *pm, uint64_t lo, uint64_t hi, const char *name)
{
	struct perfmap_entry *last = pm->n_segs ? &pm->segs[pm->n_segs - 1] : NULL;

	if (last && last->end == lo && last->name == name)
		last->end = hi;
	else
		pm->segs[pm->n_segs++] = (struct perfmap_entry){lo, hi, name};
}

/* Sweeps the sorted boundaries; in each elementary range the active line with the
 * highest index (the latest in the file) is the one that counts. */
static void paint(struct perfmap *pm, struct perfmap_entry **by_start, uint64_t *coords,
		  size_t n_coords, struct heap *h)
{
	size_t j = 0, n = pm->n_lines;

	for (size_t k = 0; k + 1 < n_coords; k++) {
		uint64_t c = coords[k];
		while (j < n && by_start[j]->start <= c)
			heap_push(h, (size_t)(by_start[j++] - pm->lines));
		while (h->n && pm->lines[h->v[0]].end <= c)
			heap_pop(h);
		if (h->n)
			emit(pm, c, coords[k + 1], pm->lines[h->v[0]].name);
	}
}

static void settle_zero_sizes(struct perfmap *pm, struct perfmap_entry **by_start)
{
	for (size_t i = 0; i < pm->n_lines; i++) {
		struct perfmap_entry *e = by_start[i];
		if (e->end)
			continue;
		size_t k = i + 1;
		while (k < pm->n_lines && by_start[k]->start == e->start)
			k++;
		e->end = k < pm->n_lines ? by_start[k]->start
					 : (e->start == UINT64_MAX ? UINT64_MAX : e->start + 1);
	}
}

int sonde__perfmap_index(struct perfmap *pm)
{
	size_t n = pm->n_lines, n_coords = 0;
	struct perfmap_entry **by_start = sonde__malloc((n ? n : 1) * sizeof(*by_start));
	uint64_t *coords = sonde__malloc((2 * n + 1) * sizeof(*coords));
	struct heap h = {.v = sonde__malloc((n ? n : 1) * sizeof(size_t))};
	struct perfmap_entry *segs = sonde__malloc((2 * n + 1) * sizeof(*segs));
	int r = -ENOMEM;

	if (!by_start || !coords || !h.v || !segs)
		goto out;
	for (size_t i = 0; i < n; i++)
		by_start[i] = &pm->lines[i];
	qsort(by_start, n, sizeof(*by_start), ent_by_start);
	settle_zero_sizes(pm, by_start);
	for (size_t i = 0; i < n; i++) {
		coords[n_coords++] = pm->lines[i].start;
		coords[n_coords++] = pm->lines[i].end;
	}
	qsort(coords, n_coords, sizeof(*coords), u64_cmp);
	sonde__free(pm->segs);
	pm->segs = segs;
	pm->n_segs = 0;
	segs = NULL;
	paint(pm, by_start, coords, n_coords, &h);
	r = 0;
out:
	sonde__free(segs);
	sonde__free(h.v);
	sonde__free(coords);
	sonde__free(by_start);
	return r;
}

const struct perfmap_entry *sonde__perfmap_find(const struct perfmap *pm, uint64_t addr)
{
	size_t lo = 0, hi = pm->n_segs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (pm->segs[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo && addr < pm->segs[lo - 1].end)
		return &pm->segs[lo - 1];
	return NULL;
}

void sonde__perfmap_reset(struct perfmap *pm)
{
	/* names stay in the pool: frames handed out earlier may still point at them */
	pm->n_lines = 0;
	pm->n_complete = 0;
	pm->n_segs = 0;
	pm->parsed = 0;
	pm->read = (struct perfmap_file){0};
}

/* A piece read into buf[0..room); bytes read, 0 at the end, or -errno. */
static ssize_t pread_piece(void *ctx, char *buf, size_t room, uint64_t off)
{
	int fd = *(const int *)ctx;

	for (;;) {
		ssize_t r = pread(fd, buf, room, (off_t)off);
		if (r >= 0 || errno != EINTR)
			return r < 0 ? -errno : r;
	}
}

/* While skipping a line too long to keep: drops buf up to and including its newline.
 * Returns true when the newline was there. */
static bool skip_to_newline(char *buf, size_t *have, uint64_t *base)
{
	const char *nl = memchr(buf, '\n', *have);
	size_t k = nl ? (size_t)(nl - buf) + 1 : *have;

	memmove(buf, buf + k, *have - k);
	*base += k;
	*have -= k;
	return nl != NULL;
}

int sonde__perfmap_read(struct perfmap *pm, perfmap_read_fn fill, void *ctx, uint64_t size, size_t piece)
{
	char *buf = sonde__malloc(piece ? piece : 1);
	uint64_t base = pm->parsed, off = pm->parsed; /* buf[0] is the byte at base */
	size_t have = 0;
	bool skipping = false;
	ssize_t r = 0;

	if (!buf || !piece) {
		sonde__free(buf);
		return -ENOMEM;
	}
	/* an unterminated last line read before is dropped and read again */
	pm->n_lines = pm->n_complete;
	while (off < size) {
		size_t room = piece - have < size - off ? piece - have : (size_t)(size - off);
		if ((r = fill(ctx, buf + have, room, off)) <= 0)
			break;
		have += (size_t)r;
		off += (uint64_t)r;
		if (skipping) {
			if (!skip_to_newline(buf, &have, &base))
				continue;
			pm->parsed = base;
			skipping = false;
		}
		if ((r = sonde__perfmap_parse(pm, buf, have, off >= size)) < 0)
			break;
		/* a full buffer without a newline: a line too long to keep */
		skipping = r == 0 && have == piece;
		if (skipping)
			r = (ssize_t)have;
		else
			pm->parsed = base + (uint64_t)r;
		memmove(buf, buf + r, have - (size_t)r);
		base += (uint64_t)r;
		have -= (size_t)r;
	}
	sonde__free(buf);
	return r < 0 ? (int)r : sonde__perfmap_index(pm);
}

static struct perfmap_file file_of(const struct stat *st)
{
	return (struct perfmap_file){
		.ino = (uint64_t)st->st_ino,
		.dev = (uint64_t)st->st_dev,
		.size = (uint64_t)st->st_size,
		.mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec,
		.ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec,
	};
}

static bool same_file(const struct perfmap_file *a, const struct perfmap_file *b)
{
	return a->ino == b->ino && a->dev == b->dev && a->size == b->size &&
	       a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns;
}

static bool is_refusal(int err)
{
	return err == -ELOOP || err == -SONDE_E_NOT_REGULAR || err == -EFBIG ||
	       err == -SONDE_E_OWNER;
}

/* Anyone can create /tmp/perf-PID.map for any pid, so a map counts only when root or the
 * process's own user wrote it. perf takes root's and its own user's (dso__load, "not owned
 * by current user or root"); read as root on another user's behalf, "its own user" has to
 * be the process's: its effective uid, the one its files are created with. Looked up when
 * the file is opened, so a pid now held by another process is judged by that one. */
static uid_t map_owner(pid_t pid)
{
	uid_t ruid, euid;

	return sonde__proc_read_uids(pid, &ruid, &euid) == 0 ? euid : geteuid();
}

int sonde__perfmap_refresh(struct perfmap *pm, const char *path, pid_t pid,
		    struct regfile_refusals *refusals)
{
	struct regfile_rules rr = {
		.what = "perf map",
		.max_size = PERFMAP_MAX_BYTES,
		.refusals = refusals,
	};
	struct perfmap_file now;
	struct stat st;
	int fd, r;

	/* The cheap check on every lookup; a JIT keeps appending to its map. */
	if (lstat(path, &st) < 0)
		return -errno;
	now = file_of(&st);
	if (S_ISREG(st.st_mode) && same_file(&now, &pm->read))
		return 0;
	if (pm->refused_err && same_file(&now, &pm->refused))
		return pm->refused_err;
	rr.check_owner = true;
	rr.owner = map_owner(pid);
	fd = sonde__regfile_open(path, &rr, &st);
	if (fd < 0) {
		if (is_refusal(fd)) {
			pm->refused = now;
			pm->refused_err = fd;
		}
		return fd;
	}
	pm->refused_err = 0;
	now = file_of(&st);
	if (now.ino != pm->read.ino || now.dev != pm->read.dev || now.size < pm->read.size)
		sonde__perfmap_reset(pm);
	r = sonde__perfmap_read(pm, pread_piece, &fd, now.size, PERFMAP_MAX_LINE);
	close(fd);
	pm->read = now;
	return r;
}

void sonde__perfmap_free(struct perfmap *pm)
{
	if (!pm)
		return;
	sonde__free(pm->lines);
	sonde__free(pm->segs);
	sonde__strpool_free(&pm->names);
	memset(pm, 0, sizeof(*pm));
}
