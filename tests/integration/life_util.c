#include <errno.h>
#include <string.h>

#include <sonde/error.h>
#include <sonde/view_source.h>

#include "../test.h"
#include "life_util.h"

static void open_common(struct life_spool *ls)
{
	struct sonde_symbolizer_opts o = {.sz = sizeof(o)};

	sonde_spool__get_info(ls->s, &ls->info);
	ls->sym = sonde_symbolizer__new(&o);
	if (!ls->sym)
		FAIL("cannot create a symbolizer: %s", sonde_strerror(errno));
}

void life_open(struct life_spool *ls, const char *path)
{
	uint64_t off = 0;

	memset(ls, 0, sizeof(*ls));
	ls->s = sonde_spool__open(path, &off);
	if (!ls->s)
		FAIL("cannot read %s: %s at offset %llu", path, sonde_strerror(errno),
		     (unsigned long long)off);
	open_common(ls);
	if (!ls->info.complete)
		FAIL("%s is not a complete recording", path);
}

void life_open_mem(struct life_spool *ls, const void *buf, size_t len)
{
	uint64_t off = 0;

	memset(ls, 0, sizeof(*ls));
	ls->s = sonde_spool__open_mem(buf, len, &off);
	if (!ls->s)
		FAIL("cannot read the recording: %s at offset %llu", sonde_strerror(errno),
		     (unsigned long long)off);
	open_common(ls);
}

void life_close(struct life_spool *ls)
{
	sonde_symbolizer__free(ls->sym);
	sonde_spool__close(ls->s);
	memset(ls, 0, sizeof(*ls));
}

/* The function frame id is in (the outermost of its inline chain), and its module. */
static void resolve(struct life_spool *ls, uint32_t frame_id, uint32_t pid, const char **fn,
		    const char **mod)
{
	struct sonde_spool_frame f;
	struct sonde_spool_module m;
	struct sonde_sym_frame out[16];

	ASSERT_OK(sonde_spool__get_frame(ls->s, frame_id, &f));
	*mod = "";
	if (f.module) {
		ASSERT_OK(sonde_spool__get_module(ls->s, f.module, &m));
		*mod = m.def.path ? m.def.path : "";
	}
	int n = sonde_spool__symbolize_frame(ls->s, ls->sym, frame_id, pid, out, 16);
	ASSERT_INT(n, >=, 1);
	*fn = out[n - 1].name;
}

void life_sample(struct life_spool *ls, uint64_t i, struct life_sample *out)
{
	struct sonde_spool_sample smp;
	struct sonde_spool_thread th;
	uint32_t frames[LIFE_MAX_FRAMES];

	ASSERT_OK(sonde_spool__get_sample(ls->s, i, &smp));
	ASSERT_OK(sonde_spool__get_thread(ls->s, smp.thread, &th));
	int depth = ASSERT_OK(sonde_spool__get_stack(ls->s, smp.stack, frames, LIFE_MAX_FRAMES));
	out->pid = th.pid;
	out->tid = th.tid;
	out->comm = th.comm;
	out->depth = depth < LIFE_MAX_FRAMES ? depth : LIFE_MAX_FRAMES;
	for (int k = 0; k < out->depth; k++)
		resolve(ls, frames[k], th.pid, &out->fn[k], &out->mod[k]);
}

int life_sample_outer(struct life_spool *ls, uint64_t i, struct life_sample *out, uint32_t *flags)
{
	struct sonde_spool_sample smp;
	struct sonde_spool_thread th;
	static uint32_t frames[4096];

	ASSERT_OK(sonde_spool__get_sample(ls->s, i, &smp));
	ASSERT_OK(sonde_spool__get_thread(ls->s, smp.thread, &th));
	int depth = ASSERT_OK(sonde_spool__get_stack(ls->s, smp.stack, frames, 4096));
	ASSERT_INT(depth, <=, 4096);
	int skip = depth > LIFE_MAX_FRAMES ? depth - LIFE_MAX_FRAMES : 0;
	out->pid = th.pid;
	out->tid = th.tid;
	out->comm = th.comm;
	out->depth = depth - skip;
	for (int k = 0; k < out->depth; k++)
		resolve(ls, frames[skip + k], th.pid, &out->fn[k], &out->mod[k]);
	*flags = smp.flags;
	return depth;
}

bool life_is_file(const char *path, const char *name)
{
	const char *slash = strrchr(path, '/');

	return strcmp(slash ? slash + 1 : path, name) == 0;
}

int life_find(const struct life_sample *s, const char *fn)
{
	for (int k = 0; k < s->depth; k++)
		if (strcmp(s->fn[k], fn) == 0)
			return k;
	return -1;
}
