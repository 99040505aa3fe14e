/* FtraceConfig decoding. See ftrace_config.h. */
#include "base/alloc.h"
#include "probes/ftrace_config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/error.h>

#include "base/array.h"
#include "base/pb.h"
#include "probes/cfg_unsupported.h"

static bool valid_event(const uint8_t *p, size_t n)
{
	if (n == 0 || n >= FTRACE_EVENT_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		uint8_t c = p[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '/' || c == '*' || c == '-'))
			return false;
	}
	/* No "..": names become paths under events/. */
	return !memmem(p, n, "..", 2);
}

/* The bool field of the sub-message f, or dflt when the message does not set it. */
static bool sub_bool(const struct pb_field *f, uint32_t field, bool dflt)
{
	struct pb_reader r = pb_sub(f);
	struct pb_field g;
	bool v = dflt;

	while (sonde__pb_next(&r, &g) > 0)
		if (g.num == field && g.wire == PB_VARINT)
			v = g.u != 0;
	return v;
}

int sonde__ftrace_config_parse(const void *buf, size_t len, struct ftrace_config *c)
{
	struct pb_reader r = pb_reader_init(buf, len);
	struct pb_field f;
	size_t cap = 0;
	int rc;

	memset(c, 0, sizeof(*c));
	/* CompactSchedConfig.enabled is on unless a config sets it false, as in traced_probes
	 * since v42: its readers (trace processor among them) expect a default config's
	 * sched events compact. */
	c->compact_sched = true;
	while ((rc = sonde__pb_next(&r, &f)) > 0) {
		bool v = f.wire == PB_VARINT, l = f.wire == PB_LEN;
		if (f.num == 1 && l) {
			if (!valid_event(f.ptr, f.len)) {
				rc = -SONDE_E_RANGE;
				break;
			}
			if (sonde__array_grow(&c->events, &cap, c->nevents + 1, sizeof(*c->events), 8) <
			    0) {
				rc = -ENOMEM;
				break;
			}
			memcpy(c->events[c->nevents], f.ptr, f.len);
			c->events[c->nevents++][f.len] = '\0';
		} else if (f.num == 10 && v) {
			c->buffer_size_kb = f.u > UINT32_MAX ? UINT32_MAX : (uint32_t)f.u;
		} else if (f.num == 11 && v) {
			c->drain_period_ms = f.u > UINT32_MAX ? UINT32_MAX : (uint32_t)f.u;
		} else if (f.num == 29 && v) {
			c->drain_buffer_percent = f.u > 100 ? 100 : (uint32_t)f.u;
		} else if (f.num == 12 && l) {
			c->compact_sched = sub_bool(&f, 1, true);
		} else if (f.num == 16 && v) {
			c->disable_generic_events = f.u != 0;
		} else if (f.num == 24 && v) {
			c->use_monotonic_raw_clock = f.u != 0;
		} else {
			sonde__probes_unsupported_mark(sonde__ftrace_unsupported, &f,
						       &c->unsupported);
		}
	}
	if (rc < 0) {
		sonde__ftrace_config_free(c);
		return rc;
	}
	return 0;
}

void sonde__ftrace_config_free(struct ftrace_config *c)
{
	if (!c)
		return;
	sonde__free(c->events);
	memset(c, 0, sizeof(*c));
}
