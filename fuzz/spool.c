/* Fuzz target: the spool readers over arbitrary bytes.
 *
 * The whole-file reader opens the input and every accessor is walked over everything it
 * reports. The decoder is then run twice, over the whole buffer and fed in small growing
 * steps as a tail reader would; both must see the same records and end the same way, or
 * the target traps. */
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>

#include <sonde/spool_reader.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void walk(const struct sonde_spool *s)
{
	struct sonde_spool_info in;
	struct sonde_spool_sample smp;
	struct sonde_spool_frame f;
	struct sonde_spool_module m;
	struct sonde_spool_thread t;
	uint32_t frames[64], parent, frame;
	volatile uint64_t sink = 0;

	sonde_spool__get_info(s, &in);
	for (uint64_t i = 0; sonde_spool__get_sample(s, i, &smp) == 0; i++) {
		int depth = sonde_spool__get_stack(s, smp.stack, frames, 64);
		if (depth < 0 || sonde_spool__get_thread(s, smp.thread, &t) < 0)
			__builtin_trap(); /* the decoder let a bad reference through */
		for (int k = 0; k < depth && k < 64; k++)
			if (sonde_spool__get_frame(s, frames[k], &f) < 0)
				__builtin_trap();
		sink += smp.time_ns;
	}
	struct sonde_spool_offcpu o;
	for (uint64_t i = 0; sonde_spool__get_offcpu(s, i, &o) == 0; i++) {
		if (sonde_spool__get_stack(s, o.stack, frames, 64) < 0 ||
		    sonde_spool__get_thread(s, o.thread, &t) < 0 ||
		    o.switch_in_ns < o.switch_out_ns)
			__builtin_trap();
		sink += o.switch_in_ns - o.switch_out_ns;
	}
	for (uint64_t i = 0; sonde_spool__get_unknown(s, i, &o) == 0; i++) {
		if (sonde_spool__get_stack(s, o.stack, frames, 64) < 0 ||
		    sonde_spool__get_thread(s, o.thread, &t) < 0 ||
		    o.switch_in_ns < o.switch_out_ns)
			__builtin_trap();
		sink += o.switch_in_ns - o.switch_out_ns;
	}
	struct sonde_spool_offcpu_short sh;
	for (uint64_t i = 0; sonde_spool__get_offcpu_short(s, i, &sh) == 0; i++) {
		if (sonde_spool__get_thread(s, sh.thread, &t) < 0)
			__builtin_trap();
		sink += sh.total_ns;
	}
	struct sonde_spool_account a;
	if (sonde_spool__get_account(s, &a) == 0) {
		if (a.kernel_time > 1)
			__builtin_trap(); /* the decoder let a bad value through */
		sink += a.lost_records + a.lost_samples + a.offcpu_dropped + a.kernel_error;
	}
	for (uint32_t i = 1; sonde_spool__get_node(s, i, &parent, &frame) == 0; i++)
		sink += parent + frame;
	for (uint32_t i = 1; sonde_spool__get_frame(s, i, &f) == 0; i++) {
		if (f.module && sonde_spool__get_module(s, f.module, &m) < 0)
			__builtin_trap();
		sink += f.addr;
	}
	for (uint32_t i = 1; sonde_spool__get_module(s, i, &m) == 0; i++)
		for (const char *p = m.def.path; *p; p++)
			sink += (uint8_t)*p;
	for (uint32_t i = 1; sonde_spool__get_thread(s, i, &t) == 0; i++)
		for (const char *p = t.comm; *p; p++)
			sink += (uint8_t)*p;
	(void)sink;
}

/* Decodes data in steps of `step` more bytes (0: all at once). Returns the number of
 * records; *end gets the final status (0 or an error) and *pos the bytes consumed. */
static size_t decode_all(const uint8_t *data, size_t size, size_t step, int *end, size_t *pos)
{
	struct sonde_spool_decoder *d = sonde_spool_decoder__new();
	struct sonde_spool_record rec;
	size_t records = 0, avail = step ? 0 : size;

	*end = 0;
	*pos = 0;
	if (!d)
		return 0;
	for (;;) {
		int r = sonde_spool_decoder__decode(d, data + *pos, avail - *pos, &rec);
		if (r < 0) {
			*end = r;
			break;
		}
		if (r > 0) {
			*pos += (size_t)r;
			records++;
			continue;
		}
		if (avail == size)
			break;
		avail = avail + step < size ? avail + step : size;
	}
	sonde_spool_decoder__free(d);
	return records;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t off;
	struct sonde_spool *s = sonde_spool__open_mem(data, size, &off);

	if (s) {
		walk(s);
		sonde_spool__close(s);
	}
	int end_a, end_b;
	size_t pos_a, pos_b;
	size_t a = decode_all(data, size, 0, &end_a, &pos_a);
	size_t b = decode_all(data, size, 1 + (size ? data[size / 2] % 13 : 0), &end_b, &pos_b);
	if (a != b || end_a != end_b || pos_a != pos_b)
		__builtin_trap();
	return 0;
}
