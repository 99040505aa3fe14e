#include <errno.h>
#include <linux/perf_event.h>
#include <string.h>

#include <sonde/error.h>

#include "perf/decode.h"

/* A bounds-checked reader over one record. */
struct cur {
	const uint8_t *p, *end;
	bool short_read;
};

static uint64_t get_u64(struct cur *c)
{
	uint64_t v = 0;

	if (c->end - c->p < 8) {
		c->short_read = true;
		c->p = c->end;
		return 0;
	}
	memcpy(&v, c->p, 8);
	c->p += 8;
	return v;
}

/* Two u32 packed in one u64 slot (pid/tid, cpu/res). */
static void get_u32_pair(struct cur *c, uint32_t *a, uint32_t *b)
{
	uint64_t v = get_u64(c);

	*a = (uint32_t)v;
	if (b)
		*b = (uint32_t)(v >> 32);
}

/* perf's x86-64 register index -> DWARF register number (see unwind.h). */
static const int8_t perf_to_dwarf[24] = {
	[0] = UREG_RAX, [1] = UREG_RBX, [2] = UREG_RCX, [3] = UREG_RDX, [4] = UREG_RSI,
	[5] = UREG_RDI, [6] = UREG_RBP, [7] = UREG_RSP, [8] = UREG_RIP, [9] = -1,
	[10] = -1,	[11] = -1,	[12] = -1,	[13] = -1,	[14] = -1,
	[15] = -1,	[16] = 8,	[17] = 9,	[18] = 10,	[19] = 11,
	[20] = 12,	[21] = 13,	[22] = 14,	[23] = 15,
};

int sonde__perf_layout_check(const struct perf_layout *l)
{
	if (l->sample_type & ~(uint64_t)PERF_DECODE_SAMPLE_TYPES)
		return -EINVAL;
	if (l->regs_mask >> 24)
		return -EINVAL;
	return 0;
}

static size_t trailer_size(const struct perf_layout *l)
{
	static const uint64_t bits[] = {PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
					PERF_SAMPLE_ID,	 PERF_SAMPLE_STREAM_ID,
					PERF_SAMPLE_CPU, PERF_SAMPLE_IDENTIFIER};
	size_t n = 0;

	if (!l->sample_id_all)
		return 0;
	for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++)
		n += (l->sample_type & bits[i]) ? 8 : 0;
	return n;
}

/* Reads the sample_id trailer that ends every non-sample record. */
static void decode_trailer(struct cur c, const struct perf_layout *l, struct perf_rec *out)
{
	uint64_t t = l->sample_type;

	if (!l->sample_id_all)
		return;
	if (t & PERF_SAMPLE_TID)
		get_u32_pair(&c, &out->pid, &out->tid);
	if (t & PERF_SAMPLE_TIME)
		out->time = get_u64(&c);
	if (t & PERF_SAMPLE_ID)
		out->id = get_u64(&c);
	if (t & PERF_SAMPLE_STREAM_ID)
		get_u64(&c);
	if (t & PERF_SAMPLE_CPU)
		get_u32_pair(&c, &out->cpu, NULL);
	if (t & PERF_SAMPLE_IDENTIFIER)
		out->id = get_u64(&c);
	out->has_id = !c.short_read && (t & PERF_SAMPLE_TIME);
}

static void decode_regs(struct cur *c, uint64_t mask, struct perf_sample *s)
{
	s->regs_abi = get_u64(c);
	if (s->regs_abi == PERF_SAMPLE_REGS_ABI_NONE)
		return;
	for (int i = 0; i < 24; i++) {
		if (!(mask & (1ull << i)))
			continue;
		uint64_t v = get_u64(c);
		int d = perf_to_dwarf[i];
		if (d >= 0) {
			s->regs.r[d] = v;
			s->regs.valid |= 1u << d;
		}
	}
}

static int decode_stack(struct cur *c, struct perf_sample *s)
{
	uint64_t size = get_u64(c);

	if (c->short_read || size == 0)
		return 0;
	if (size > (uint64_t)(c->end - c->p) || size % 8)
		return -SONDE_E_FORMAT;
	const uint8_t *data = c->p;
	c->p += size;
	uint64_t dyn = get_u64(c);
	if (dyn > size)
		return -SONDE_E_FORMAT;
	s->stack = data;
	s->stack_len = dyn;
	return 0;
}

static int decode_sample(struct cur c, const struct perf_layout *l, struct perf_rec *out)
{
	struct perf_sample *s = &out->sample; /* zeroed by sonde__perf_decode */
	uint64_t t = l->sample_type;

	if (t & PERF_SAMPLE_IDENTIFIER)
		s->id = get_u64(&c);
	if (t & PERF_SAMPLE_IP)
		s->ip = get_u64(&c);
	if (t & PERF_SAMPLE_TID)
		get_u32_pair(&c, &s->pid, &s->tid);
	if (t & PERF_SAMPLE_TIME)
		s->time = get_u64(&c);
	if (t & PERF_SAMPLE_ID)
		s->id = get_u64(&c);
	if (t & PERF_SAMPLE_STREAM_ID)
		get_u64(&c);
	if (t & PERF_SAMPLE_CPU)
		get_u32_pair(&c, &s->cpu, NULL);
	if (t & PERF_SAMPLE_PERIOD)
		s->period = get_u64(&c);
	if (t & PERF_SAMPLE_CALLCHAIN) {
		uint64_t nr = get_u64(&c);
		if (nr > (uint64_t)(c.end - c.p) / 8)
			return -SONDE_E_FORMAT;
		s->callchain = c.p;
		s->callchain_nr = nr;
		c.p += nr * 8;
	}
	if (t & PERF_SAMPLE_RAW) {
		/* a u32 size, the data, padding to 8 bytes (the size counts the data only) */
		uint32_t size;
		if (c.end - c.p < 4)
			return -SONDE_E_TRUNCATED;
		memcpy(&size, c.p, 4);
		if (size > (uint64_t)(c.end - c.p) - 4)
			return -SONDE_E_FORMAT;
		s->raw = c.p + 4;
		s->raw_size = size;
		c.p += ((uint64_t)size + 4 + 7) & ~7ull;
		if (c.p > c.end)
			return -SONDE_E_FORMAT;
	}
	if (t & PERF_SAMPLE_REGS_USER)
		decode_regs(&c, l->regs_mask, s);
	if (t & PERF_SAMPLE_STACK_USER) {
		int err = decode_stack(&c, s);
		if (err)
			return err;
	}
	if (c.short_read)
		return -SONDE_E_TRUNCATED;
	out->has_id = (t & PERF_SAMPLE_TIME) != 0;
	out->time = s->time;
	out->id = s->id;
	out->pid = s->pid;
	out->tid = s->tid;
	out->cpu = s->cpu;
	return 0;
}

/* A NUL-terminated string filling the rest of the body (padded to 8 bytes by the kernel). */
static const char *get_string(struct cur *c)
{
	const char *s = (const char *)c->p;
	const void *nul = memchr(c->p, 0, (size_t)(c->end - c->p));

	if (!nul) {
		c->short_read = true;
		return NULL;
	}
	c->p = c->end;
	return s;
}

static void decode_mmap2(struct cur *c, uint16_t misc, struct perf_mmap2 *m)
{
	memset(m, 0, sizeof(*m));
	get_u32_pair(c, &m->pid, &m->tid);
	m->addr = get_u64(c);
	m->len = get_u64(c);
	m->pgoff = get_u64(c);
	if (misc & PERF_RECORD_MISC_MMAP_BUILD_ID) {
		if (c->end - c->p < 24) {
			c->short_read = true;
			return;
		}
		m->has_build_id = true;
		m->build_id_len = c->p[0] > 20 ? 20 : c->p[0];
		m->build_id = c->p + 4;
		c->p += 24;
	} else {
		get_u32_pair(c, &m->maj, &m->min);
		m->ino = get_u64(c);
		m->ino_generation = get_u64(c);
	}
	get_u32_pair(c, &m->prot, &m->flags);
	m->filename = get_string(c);
}

static void decode_body(struct cur *c, uint32_t type, uint16_t misc, struct perf_rec *out)
{
	switch (type) {
	case PERF_RECORD_MMAP2:
		decode_mmap2(c, misc, &out->mmap2);
		break;
	case PERF_RECORD_COMM:
		get_u32_pair(c, &out->comm.pid, &out->comm.tid);
		out->comm.comm = get_string(c);
		out->comm.exec = (misc & PERF_RECORD_MISC_COMM_EXEC) != 0;
		break;
	case PERF_RECORD_FORK:
	case PERF_RECORD_EXIT:
		get_u32_pair(c, &out->task.pid, &out->task.ppid);
		get_u32_pair(c, &out->task.tid, &out->task.ptid);
		out->task.time = get_u64(c);
		break;
	case PERF_RECORD_LOST:
		out->lost.id = get_u64(c);
		out->lost.lost = get_u64(c);
		break;
	case PERF_RECORD_LOST_SAMPLES:
		out->lost.id = 0;
		out->lost.lost = get_u64(c);
		break;
	default:
		break;
	}
}

int sonde__perf_decode(const void *buf, size_t len, const struct perf_layout *l,
		       struct perf_rec *out)
{
	struct perf_event_header h;

	memset(out, 0, sizeof(*out));
	if (len < sizeof(h))
		return -SONDE_E_TRUNCATED;
	memcpy(&h, buf, sizeof(h));
	if (h.size < sizeof(h) || h.size > len)
		return -SONDE_E_FORMAT;
	out->type = h.type;
	out->misc = h.misc;

	struct cur c = {(const uint8_t *)buf + sizeof(h), (const uint8_t *)buf + h.size, false};
	if (h.type == PERF_RECORD_SAMPLE)
		return decode_sample(c, l, out);

	size_t tsz = trailer_size(l);
	if ((size_t)(c.end - c.p) < tsz)
		return -SONDE_E_TRUNCATED;
	struct cur trailer = {c.end - tsz, c.end, false};
	c.end -= tsz;
	decode_trailer(trailer, l, out);
	decode_body(&c, h.type, h.misc, out);
	if (c.short_read)
		return -SONDE_E_TRUNCATED;
	return 0;
}
