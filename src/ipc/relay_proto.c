#include <errno.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <sonde/error.h>

#include "base/pb.h"
#include "ipc/protos.h"
#include "ipc/relay_proto.h"

/* ---------------------------------------------------------------- SystemInfo */

static struct relay_str str_of(const char *s)
{
	return (struct relay_str){s, s ? strlen(s) : 0};
}

void sonde__relay_system_info_local(struct relay_system_info *si, struct utsname *uts,
				    const char *service_version)
{
	time_t now = time(NULL);
	struct tm tm;

	memset(si, 0, sizeof(*si));
	if (uname(uts) == 0) {
		si->sysname = str_of(uts->sysname);
		si->version = str_of(uts->version);
		si->release = str_of(uts->release);
		si->machine = str_of(uts->machine);
	}
	si->tracing_service_version = str_of(service_version);
	si->hz = sysconf(_SC_CLK_TCK) > 0 ? sysconf(_SC_CLK_TCK) : 0;
	si->page_size = sysconf(_SC_PAGESIZE) > 0 ? (uint32_t)sysconf(_SC_PAGESIZE) : 0;
	si->num_cpus =
		sysconf(_SC_NPROCESSORS_CONF) > 0 ? (uint32_t)sysconf(_SC_NPROCESSORS_CONF) : 0;
	if (localtime_r(&now, &tm)) {
		si->has_timezone = true;
		si->timezone_off_mins = (int32_t)(tm.tm_gmtoff / 60);
	}
}

static void put_str(struct buf *b, uint32_t field, struct relay_str s)
{
	if (s.s)
		sonde__pb_put_bytes(b, field, s.s, s.len);
}

void sonde__relay_system_info_put(struct buf *b, const struct relay_system_info *si)
{
	if (si->sysname.s || si->version.s || si->release.s || si->machine.s) {
		size_t m = sonde__pb_begin(b, PF_SYSTEM_INFO_UTSNAME);
		put_str(b, PF_UTSNAME_SYSNAME, si->sysname);
		put_str(b, PF_UTSNAME_VERSION, si->version);
		put_str(b, PF_UTSNAME_RELEASE, si->release);
		put_str(b, PF_UTSNAME_MACHINE, si->machine);
		sonde__pb_end(b, m);
	}
	if (si->hz)
		sonde__pb_put_varint(b, PF_SYSTEM_INFO_HZ, (uint64_t)si->hz);
	put_str(b, PF_SYSTEM_INFO_TRACING_SERVICE_VERSION, si->tracing_service_version);
	if (si->page_size)
		sonde__pb_put_varint(b, PF_SYSTEM_INFO_PAGE_SIZE, si->page_size);
	if (si->has_timezone)
		sonde__pb_put_varint(b, PF_SYSTEM_INFO_TIMEZONE_OFF_MINS,
				     (uint64_t)(int64_t)si->timezone_off_mins);
	if (si->num_cpus)
		sonde__pb_put_varint(b, PF_SYSTEM_INFO_NUM_CPUS, si->num_cpus);
}

static int take_str(const struct pb_field *f, struct relay_str *out)
{
	if (f->wire != PB_LEN || f->len > RELAY_MAX_STRING)
		return -SONDE_E_FORMAT;
	out->s = (const char *)f->ptr;
	out->len = f->len;
	return 0;
}

static int decode_utsname(struct pb_reader r, struct relay_system_info *si)
{
	struct pb_field f;
	int rc;

	while ((rc = sonde__pb_next(&r, &f)) > 0) {
		struct relay_str *to = f.num == PF_UTSNAME_SYSNAME   ? &si->sysname
				       : f.num == PF_UTSNAME_VERSION ? &si->version
				       : f.num == PF_UTSNAME_RELEASE ? &si->release
				       : f.num == PF_UTSNAME_MACHINE ? &si->machine
								     : NULL;
		if (to && take_str(&f, to) < 0)
			return -SONDE_E_FORMAT;
	}
	return rc;
}

/* A varint field of SystemInfo: refused when of another wire type, so a value is never
 * read from bytes meant as something else. */
static int take_varint(const struct pb_field *f, uint64_t *v)
{
	if (f->wire != PB_VARINT)
		return -SONDE_E_FORMAT;
	*v = f->u;
	return 0;
}

static int decode_si_field(const struct pb_field *f, struct relay_system_info *si)
{
	uint64_t v;

	switch (f->num) {
	case PF_SYSTEM_INFO_UTSNAME:
		return f->wire == PB_LEN ? decode_utsname(pb_sub(f), si) : -SONDE_E_FORMAT;
	case PF_SYSTEM_INFO_TRACING_SERVICE_VERSION:
		return take_str(f, &si->tracing_service_version);
	case PF_SYSTEM_INFO_HZ:
		if (take_varint(f, &v) < 0)
			return -SONDE_E_FORMAT;
		si->hz = (int64_t)v;
		return 0;
	case PF_SYSTEM_INFO_PAGE_SIZE:
	case PF_SYSTEM_INFO_NUM_CPUS:
		if (take_varint(f, &v) < 0 || v > UINT32_MAX)
			return -SONDE_E_FORMAT;
		*(f->num == PF_SYSTEM_INFO_PAGE_SIZE ? &si->page_size : &si->num_cpus) =
			(uint32_t)v;
		return 0;
	case PF_SYSTEM_INFO_TIMEZONE_OFF_MINS:
		if (take_varint(f, &v) < 0)
			return -SONDE_E_FORMAT;
		si->has_timezone = true;
		si->timezone_off_mins = (int32_t)v;
		return 0;
	default:
		/* Android fields and later ones: kept in raw, checked only for shape */
		return f->wire == PB_LEN && f->len > RELAY_MAX_STRING ? -SONDE_E_FORMAT : 0;
	}
}

static int decode_system_info(const struct pb_field *outer, struct relay_system_info *si)
{
	struct pb_reader r = pb_sub(outer);
	struct pb_field f;
	int rc;

	if (outer->wire != PB_LEN || outer->len > RELAY_MAX_SYSTEM_INFO)
		return -SONDE_E_FORMAT;
	memset(si, 0, sizeof(*si));
	si->raw = outer->ptr;
	si->raw_len = outer->len;
	while ((rc = sonde__pb_next(&r, &f)) > 0)
		if (decode_si_field(&f, si) < 0)
			return -SONDE_E_FORMAT;
	return rc < 0 ? -SONDE_E_FORMAT : 0;
}

/* ---------------------------------------------------------------- InitRelay */

int sonde__relay_init_req_encode(struct buf *b, const struct relay_system_info *si)
{
	size_t m = sonde__pb_begin(b, PF_INIT_RELAY_REQ_SYSTEM_INFO);

	sonde__relay_system_info_put(b, si);
	sonde__pb_end(b, m);
	return buf_error(b) < 0 ? -ENOMEM : 0;
}

int sonde__relay_init_req_decode(const void *p, size_t n, struct relay_init_req *r)
{
	struct pb_reader rd = pb_reader_init(p, n);
	struct pb_field f;
	int rc;

	memset(r, 0, sizeof(*r));
	while ((rc = sonde__pb_next(&rd, &f)) > 0) {
		if (f.num != PF_INIT_RELAY_REQ_SYSTEM_INFO)
			continue;
		/* a repeated singular message field: the last one wins, whole */
		if (decode_system_info(&f, &r->si) < 0)
			return -SONDE_E_FORMAT;
		r->has_system_info = true;
	}
	return rc < 0 ? -SONDE_E_FORMAT : 0;
}

/* ---------------------------------------------------------------- SyncClock */

int sonde__relay_sync_req_encode(struct buf *b, const struct relay_sync_req *r)
{
	if ((r->phase != RELAY_SYNC_PING && r->phase != RELAY_SYNC_UPDATE) ||
	    r->n_clocks > RELAY_MAX_CLOCKS)
		return -SONDE_E_RANGE;
	sonde__pb_put_varint(b, PF_SYNC_CLOCK_REQ_PHASE, (uint64_t)r->phase);
	for (size_t i = 0; i < r->n_clocks; i++) {
		size_t m = sonde__pb_begin(b, PF_SYNC_CLOCK_REQ_CLOCKS);
		sonde__pb_put_varint(b, PF_SYNC_CLOCK_CLOCK_ID, r->clocks[i].clock_id);
		sonde__pb_put_varint(b, PF_SYNC_CLOCK_TIMESTAMP, r->clocks[i].timestamp);
		sonde__pb_end(b, m);
	}
	return buf_error(b) < 0 ? -ENOMEM : 0;
}

static int decode_clock(const struct pb_field *outer, struct relay_clock *c)
{
	struct pb_reader r = pb_sub(outer);
	struct pb_field f;
	bool has_id = false, has_ts = false;
	int rc;

	if (outer->wire != PB_LEN)
		return -SONDE_E_FORMAT;
	memset(c, 0, sizeof(*c));
	while ((rc = sonde__pb_next(&r, &f)) > 0) {
		if (f.num != PF_SYNC_CLOCK_CLOCK_ID && f.num != PF_SYNC_CLOCK_TIMESTAMP)
			continue;
		if (f.wire != PB_VARINT)
			return -SONDE_E_FORMAT;
		if (f.num == PF_SYNC_CLOCK_CLOCK_ID) {
			if (f.u == 0 || f.u > UINT32_MAX)
				return -SONDE_E_FORMAT;
			c->clock_id = (uint32_t)f.u;
			has_id = true;
		} else {
			c->timestamp = f.u;
			has_ts = true;
		}
	}
	return rc < 0 || !has_id || !has_ts ? -SONDE_E_FORMAT : 0;
}

static bool clock_seen(const struct relay_sync_req *r, uint32_t id)
{
	for (size_t i = 0; i < r->n_clocks; i++)
		if (r->clocks[i].clock_id == id)
			return true;
	return false;
}

int sonde__relay_sync_req_decode(const void *p, size_t n, struct relay_sync_req *r)
{
	struct pb_reader rd = pb_reader_init(p, n);
	struct pb_field f;
	struct relay_clock c;
	int rc;

	memset(r, 0, sizeof(*r));
	while ((rc = sonde__pb_next(&rd, &f)) > 0) {
		if (f.num == PF_SYNC_CLOCK_REQ_PHASE) {
			if (f.wire != PB_VARINT ||
			    (f.u != RELAY_SYNC_PING && f.u != RELAY_SYNC_UPDATE))
				return -SONDE_E_FORMAT;
			r->phase = (enum relay_sync_phase)f.u;
		} else if (f.num == PF_SYNC_CLOCK_REQ_CLOCKS) {
			if (decode_clock(&f, &c) < 0 || r->n_clocks == RELAY_MAX_CLOCKS ||
			    clock_seen(r, c.clock_id))
				return -SONDE_E_FORMAT;
			r->clocks[r->n_clocks++] = c;
		}
	}
	return rc < 0 || !r->phase ? -SONDE_E_FORMAT : 0;
}

/* ---------------------------------------------------------------- responses */

int sonde__relay_resp_encode(struct buf *b)
{
	return buf_error(b) < 0 ? -ENOMEM : 0;
}

int sonde__relay_resp_decode(const void *p, size_t n)
{
	struct pb_reader r = pb_reader_init(p, n);
	struct pb_field f;
	int rc;

	while ((rc = sonde__pb_next(&r, &f)) > 0)
		;
	return rc < 0 ? -SONDE_E_FORMAT : 0;
}

/* ---------------------------------------------------------------- clocks */

size_t sonde__relay_clocks_read(struct relay_clock *out, size_t max)
{
	static const struct {
		clockid_t id;
		uint32_t builtin;
	} clocks[] = {
		{CLOCK_BOOTTIME, PF_CLOCK_BOOTTIME},
		{CLOCK_REALTIME_COARSE, PF_CLOCK_REALTIME_COARSE},
		{CLOCK_MONOTONIC_COARSE, PF_CLOCK_MONOTONIC_COARSE},
		{CLOCK_REALTIME, PF_CLOCK_REALTIME},
		{CLOCK_MONOTONIC, PF_CLOCK_MONOTONIC},
		{CLOCK_MONOTONIC_RAW, PF_CLOCK_MONOTONIC_RAW},
	};
	enum { N = sizeof(clocks) / sizeof(clocks[0]) };
	struct timespec ts[N];
	size_t n = 0;

	/* all read first, then stored: the readings stay as close together as they can */
	for (size_t i = 0; i < N; i++)
		if (clock_gettime(clocks[i].id, &ts[i]) < 0)
			ts[i].tv_sec = -1;
	for (size_t i = 0; i < N && n < max; i++) {
		if (ts[i].tv_sec < 0)
			continue;
		out[n].clock_id = clocks[i].builtin;
		out[n++].timestamp = (uint64_t)ts[i].tv_sec * 1000000000u + (uint64_t)ts[i].tv_nsec;
	}
	return n;
}
