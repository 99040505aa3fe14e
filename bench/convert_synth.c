/* Writes a spool of N samples made of the real stacks of another spool, cycled in order,
 * for bench/convert.sh: a recording of a million samples would take this shared machine
 * far too long, while the cost of a conversion depends on the number of samples and on
 * the stacks, which are real here.
 *
 * usage: bench-convert-synth IN.spool OUT.spool N
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/spool.h>
#include <sonde/spool_reader.h>

static int copy_defs(struct sonde_spool *in, const struct sonde_spool_info *info,
		     struct sonde_spool_writer *w, uint32_t *mod_map, uint32_t *thr_map)
{
	for (uint32_t i = 1; i <= info->modules; i++) {
		struct sonde_spool_module m;
		int err = sonde_spool__get_module(in, i, &m);
		if (!err)
			err = sonde_spool_writer__add_module(w, info->first_time_ns, &m.def, &mod_map[i]);
		if (err)
			return err;
	}
	for (uint32_t i = 1; i <= info->threads; i++) {
		struct sonde_spool_thread t;
		int err = sonde_spool__get_thread(in, i, &t);
		if (!err)
			err = sonde_spool_writer__add_thread(w, info->first_time_ns, t.pid, t.tid, t.comm,
						     &thr_map[i]);
		if (err)
			return err;
	}
	return 0;
}

static int copy_samples(struct sonde_spool *in, const struct sonde_spool_info *info,
			struct sonde_spool_writer *w, const uint32_t *mod_map,
			const uint32_t *thr_map, uint64_t n)
{
	static uint32_t ids[SONDE_SPOOL_MAX_DEPTH];
	static struct sonde_spool_frame frames[SONDE_SPOOL_MAX_DEPTH];
	uint64_t period = info->header.sample_period_ns ? info->header.sample_period_ns : 1000000;

	for (uint64_t i = 0; i < n; i++) {
		struct sonde_spool_sample s;
		int err = sonde_spool__get_sample(in, i % info->samples, &s);
		int depth =
			err ? err : sonde_spool__get_stack(in, s.stack, ids, SONDE_SPOOL_MAX_DEPTH);
		if (depth < 0)
			return depth;
		for (int d = 0; d < depth; d++) {
			err = sonde_spool__get_frame(in, ids[d], &frames[d]);
			if (err)
				return err;
			frames[d].module = mod_map[frames[d].module];
		}
		err = sonde_spool_writer__add_sample(w, info->first_time_ns + i * period, thr_map[s.thread],
					     frames, (size_t)depth, s.flags);
		if (err)
			return err;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct sonde_spool_info info;
	uint64_t bad;

	if (argc != 4) {
		fprintf(stderr, "usage: bench-convert-synth IN.spool OUT.spool N\n");
		return 2;
	}
	struct sonde_spool *in = sonde_spool__open(argv[1], &bad);
	if (!in) {
		fprintf(stderr, "%s: %s\n", argv[1], sonde_strerror(errno));
		return 1;
	}
	sonde_spool__get_info(in, &info);
	if (!info.samples) {
		fprintf(stderr, "%s: no samples\n", argv[1]);
		return 1;
	}
	int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	uint32_t *mod_map = calloc(info.modules + 1, sizeof(*mod_map));
	uint32_t *thr_map = calloc(info.threads + 1, sizeof(*thr_map));
	struct sonde_spool_writer *w =
		fd < 0 ? NULL
		       : sonde_spool_writer__new(sonde_spool_writer__write_fd, (void *)(intptr_t)fd,
						&info.header);
	int err = !w || !mod_map || !thr_map ? -ENOMEM : 0;
	if (!err)
		err = copy_defs(in, &info, w, mod_map, thr_map);
	if (!err)
		err = copy_samples(in, &info, w, mod_map, thr_map, strtoull(argv[3], NULL, 10));
	if (!err)
		err = sonde_spool_writer__finish(w);
	if (err)
		fprintf(stderr, "%s: %s\n", argv[2], sonde_strerror(err));
	sonde_spool_writer__free(w);
	free(mod_map);
	free(thr_map);
	if (fd >= 0)
		close(fd);
	sonde_spool__close(in);
	return err ? 1 : 0;
}
