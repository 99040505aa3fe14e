/* TraceConfig parsing (tcfg.h): the consumer's bytes into the fields the service acts on. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/error.h>

#include "base/alloc.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "service/tcfg.h"

enum {
	MAX_DURATION_MS = 7 * 24 * 3600 * 1000u,
	MAX_DURATION_GUARDRAILS_MS = 24 * 3600 * 1000u,
};

static char *dup_bytes(const uint8_t *p, size_t n)
{
	char *s = sonde__malloc(n + 1);

	if (s) {
		memcpy(s, p, n);
		s[n] = 0;
	}
	return s;
}

static int push_str(char ***v, size_t *n, const uint8_t *p, size_t len)
{
	char **nv = sonde__realloc(*v, (*n + 1) * sizeof(**v));

	if (!nv)
		return -ENOMEM;
	*v = nv;
	if (!(nv[*n] = dup_bytes(p, len)))
		return -ENOMEM;
	(*n)++;
	return 0;
}

/* The product of the bounds of re's interval expressions ({m}, {m,}, {m,n}), at most
 * cap + 1. Escaped braces are literal; one in a bracket expression is counted too (the
 * bound errs on the side of refusing). */
static uint64_t repeat_product(const char *re, uint64_t cap)
{
	uint64_t product = 1;

	for (const char *p = re; *p && product <= cap; p++) {
		if (*p == '\\') {
			p += p[1] != 0;
			continue;
		}
		if (*p != '{')
			continue;
		uint64_t bound = 0, m = 0;
		const char *q = p + 1;
		for (; *q >= '0' && *q <= '9'; q++)
			m = m > cap ? m : m * 10 + (uint64_t)(*q - '0');
		bound = m;
		if (*q == ',')
			for (bound = 0, q++; *q >= '0' && *q <= '9'; q++)
				bound = bound > cap ? bound : bound * 10 + (uint64_t)(*q - '0');
		if (bound < m)
			bound = m; /* {m,}: m copies and a star */
		product *= bound > 1 ? bound : 1;
	}
	return product;
}

enum tcfg_regex_refusal sonde__tcfg_regex_refused(const char *re)
{
	if (strlen(re) > SVC_REGEX_MAX_LEN)
		return TCFG_REGEX_TOO_LONG;
	if (repeat_product(re, SVC_REGEX_MAX_REPEAT) > SVC_REGEX_MAX_REPEAT)
		return TCFG_REGEX_TOO_COMPLEX;
	return TCFG_REGEX_OK;
}

regex_t *sonde__tcfg_regex(const char *re, enum tcfg_regex_refusal *why)
{
	size_t n = strlen(re);

	if ((*why = sonde__tcfg_regex_refused(re)))
		return NULL;
	char *anchored = sonde__malloc(n + 5);
	regex_t *rx = sonde__malloc(sizeof(*rx));
	int rc = REG_ESPACE;
	if (anchored && rx) {
		snprintf(anchored, n + 5, "^(%s)$", re);
		rc = regcomp(rx, anchored, REG_EXTENDED | REG_NOSUB);
	}
	sonde__free(anchored);
	if (rc) {
		sonde__free(rx);
		*why = rc == REG_ESPACE ? TCFG_REGEX_NO_MEMORY : TCFG_REGEX_INVALID;
		return NULL;
	}
	return rx;
}

void sonde__tcfg_regex_free(regex_t *rx)
{
	if (!rx)
		return;
	regfree(rx);
	sonde__free(rx);
}

static int parse_ds(struct trace_cfg *c, const struct pb_field *e)
{
	struct pb_reader r = pb_sub(e), cr;
	struct pb_field f, g;
	struct ds_cfg *v = sonde__realloc(c->ds, (c->nds + 1) * sizeof(*v)), *d;

	if (!v)
		return -ENOMEM;
	c->ds = v;
	d = memset(&v[c->nds++], 0, sizeof(*d));
	while (sonde__pb_next(&r, &f) > 0) {
		if (f.wire != PB_LEN)
			continue;
		if (f.num == PF_TC_DATA_SOURCE_CONFIG) {
			d->raw = f.ptr;
			d->raw_len = f.len;
		} else if (f.num == PF_TC_DATA_SOURCE_PRODUCER_NAME_FILTER) {
			if (push_str(&d->name_filter, &d->n_name_filter, f.ptr, f.len) < 0)
				return -ENOMEM;
		} else if (f.num == PF_TC_DATA_SOURCE_PRODUCER_NAME_REGEX_FILTER) {
			regex_t **rx = sonde__realloc(d->regex_rx, (d->n_regex_filter + 1) *
								       sizeof(*d->regex_rx));
			if (!rx)
				return -ENOMEM;
			d->regex_rx = rx;
			if (push_str(&d->regex_filter, &d->n_regex_filter, f.ptr, f.len) < 0)
				return -ENOMEM;
			enum tcfg_regex_refusal why;
			/* compiled once, here (each match compiled it again); past the bound,
			 * not at all (the config is refused: sonde__tcfg_validate) */
			rx[d->n_regex_filter - 1] =
				++c->n_regex > SVC_REGEX_MAX_PER_CONFIG
					? NULL
					: sonde__tcfg_regex(d->regex_filter[d->n_regex_filter - 1],
							    &why);
		} else if (f.num == PF_TC_DATA_SOURCE_MACHINE_NAME_FILTER) {
			if (push_str(&d->machine_filter, &d->n_machine_filter, f.ptr, f.len) < 0)
				return -ENOMEM;
		}
	}
	/* a data source without a config has no bytes (and a NULL pointer) to read */
	cr = d->raw ? pb_reader_init(d->raw, d->raw_len) : pb_reader_init("", 0);
	while (sonde__pb_next(&cr, &g) > 0) {
		if (g.num == PF_DS_CONFIG_NAME && g.wire == PB_LEN) {
			sonde__free(d->name);
			d->name = dup_bytes(g.ptr, g.len);
		} else if (g.num == PF_DS_CONFIG_TARGET_BUFFER && g.wire == PB_VARINT) {
			d->target_buffer = g.u > UINT32_MAX ? UINT32_MAX : (uint32_t)g.u;
		}
	}
	return 0;
}

static void parse_builtin(struct trace_cfg *c, const struct pb_field *e)
{
	struct pb_reader r = pb_sub(e);
	struct pb_field f;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.wire != PB_VARINT)
			continue;
		if (f.num == PF_BUILTIN_DS_DISABLE_CLOCK_SNAPSHOTTING)
			c->no_clock_snapshots = f.u != 0;
		else if (f.num == PF_BUILTIN_DS_DISABLE_TRACE_CONFIG)
			c->no_trace_config = f.u != 0;
		else if (f.num == PF_BUILTIN_DS_DISABLE_SYSTEM_INFO)
			c->no_system_info = f.u != 0;
		else if (f.num == PF_BUILTIN_DS_DISABLE_SERVICE_EVENTS)
			c->no_service_events = f.u != 0;
		else if (f.num == PF_BUILTIN_DS_SNAPSHOT_INTERVAL_MS && f.u)
			c->snapshot_interval_ms = (uint32_t)f.u;
	}
}

static uint64_t sub_varint(const struct pb_field *e, uint32_t num)
{
	struct pb_reader r = pb_sub(e);
	struct pb_field f;
	uint64_t v = 0;

	while (sonde__pb_next(&r, &f) > 0)
		if (f.num == num && f.wire == PB_VARINT)
			v = f.u;
	return v;
}

/* Fields of the top-level TraceConfig that are plain varints. */
static void parse_scalar(struct trace_cfg *c, const struct pb_field *f)
{
	uint32_t v32 = f->u > UINT32_MAX ? UINT32_MAX : (uint32_t)f->u;

	switch (f->num) {
	case PF_TRACE_CONFIG_DURATION_MS:
		c->duration_ms = v32;
		break;
	case PF_TRACE_CONFIG_ENABLE_EXTRA_GUARDRAILS:
		c->extra_guardrails = f->u;
		break;
	case PF_TRACE_CONFIG_WRITE_INTO_FILE:
		c->write_into_file = f->u;
		break;
	case PF_TRACE_CONFIG_FILE_WRITE_PERIOD_MS:
		c->file_write_period_ms = v32;
		break;
	case PF_TRACE_CONFIG_MAX_FILE_SIZE_BYTES:
		c->max_file_size = f->u;
		break;
	case PF_TRACE_CONFIG_DEFERRED_START:
		c->deferred_start = f->u;
		break;
	case PF_TRACE_CONFIG_FLUSH_PERIOD_MS:
		c->flush_period_ms = v32;
		break;
	case PF_TRACE_CONFIG_FLUSH_TIMEOUT_MS:
		c->flush_timeout_ms = v32;
		break;
	case PF_TRACE_CONFIG_DATA_SOURCE_STOP_TIMEOUT_MS:
		c->stop_timeout_ms = v32;
		break;
	default:
		break;
	}
}

static int add_buffer(struct trace_cfg *c, const struct pb_field *f)
{
	uint64_t *v = sonde__realloc(c->bufs, (c->nbufs + 1) * 2 * sizeof(*v));

	if (!v)
		return -ENOMEM;
	c->bufs = v;
	v[c->nbufs * 2] = sub_varint(f, PF_BUFFER_CONFIG_SIZE_KB);
	v[c->nbufs * 2 + 1] = sub_varint(f, PF_BUFFER_CONFIG_FILL_POLICY) == PF_FILL_POLICY_DISCARD;
	c->nbufs++;
	return 0;
}

/* A length-delimited top-level field. */
static int parse_len(struct trace_cfg *c, const struct pb_field *f)
{
	char **str = NULL;

	switch (f->num) {
	case PF_TRACE_CONFIG_BUFFERS:
		return add_buffer(c, f);
	case PF_TRACE_CONFIG_DATA_SOURCES:
		return parse_ds(c, f);
	case PF_TRACE_CONFIG_BUILTIN_DATA_SOURCES:
		parse_builtin(c, f);
		return 0;
	case PF_TRACE_CONFIG_INCREMENTAL_STATE_CONFIG:
		c->clear_period_ms =
			(uint32_t)sub_varint(f, PF_INCREMENTAL_STATE_CONFIG_CLEAR_PERIOD_MS);
		return 0;
	case PF_TRACE_CONFIG_UNIQUE_SESSION_NAME:
		str = &c->unique_name;
		break;
	case PF_TRACE_CONFIG_OUTPUT_PATH:
		str = &c->output_path;
		break;
	default:
		return 0;
	}
	sonde__free(*str);
	*str = dup_bytes(f->ptr, f->len);
	return *str ? 0 : -ENOMEM;
}

const char *sonde__tcfg_parse(const uint8_t *cfg, size_t len, struct trace_cfg *c)
{
	struct pb_reader r = pb_reader_init(cfg, len);
	struct pb_field f;
	int rc;

	memset(c, 0, sizeof(*c));
	while ((rc = sonde__pb_next(&r, &f)) > 0) {
		if (f.wire == PB_VARINT)
			parse_scalar(c, &f);
		else if (f.wire == PB_LEN && parse_len(c, &f) < 0)
			return "out of memory";
	}
	return rc < 0 ? "malformed TraceConfig" : NULL;
}

const char *sonde__tcfg_validate(const struct trace_cfg *c, size_t max_buffers)
{
	if (c->duration_ms > (c->extra_guardrails ? MAX_DURATION_GUARDRAILS_MS : MAX_DURATION_MS))
		return "duration_ms is too long";
	if (c->nbufs > max_buffers)
		return "too many buffers";
	if (c->extra_guardrails && c->deferred_start)
		return "deferred_start is not allowed with enable_extra_guardrails";
	if (c->n_regex > SVC_REGEX_MAX_PER_CONFIG)
		return "too many producer_name_regex_filter entries (at most 16 in a config)";
	for (size_t i = 0; i < c->nds; i++)
		for (size_t k = 0; k < c->ds[i].n_regex_filter; k++)
			switch (sonde__tcfg_regex_refused(c->ds[i].regex_filter[k])) {
			case TCFG_REGEX_TOO_LONG:
				return "producer_name_regex_filter is too long (at most 128 bytes)";
			case TCFG_REGEX_TOO_COMPLEX:
				return "producer_name_regex_filter is too complex (its interval "
				       "bounds multiply to more than 256)";
			default: /* one that does not compile matches no producer */
				break;
			}
	return NULL;
}

int sonde__tcfg_parse_data_sources(const uint8_t *cfg, size_t len, struct trace_cfg *c)
{
	struct pb_reader r = pb_reader_init(cfg, len);
	struct pb_field f;
	int rc;

	sonde__tcfg_free_data_sources(c);
	while ((rc = sonde__pb_next(&r, &f)) > 0)
		if (f.num == PF_TRACE_CONFIG_DATA_SOURCES && f.wire == PB_LEN &&
		    parse_ds(c, &f) < 0)
			return -ENOMEM;
	return rc < 0 ? -SONDE_E_FORMAT : 0;
}

static void free_strs(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sonde__free(v[i]);
	sonde__free(v);
}

void sonde__tcfg_free_data_sources(struct trace_cfg *c)
{
	for (size_t i = 0; i < c->nds; i++) {
		free_strs(c->ds[i].name_filter, c->ds[i].n_name_filter);
		for (size_t k = 0; c->ds[i].regex_rx && k < c->ds[i].n_regex_filter; k++)
			sonde__tcfg_regex_free(c->ds[i].regex_rx[k]);
		sonde__free(c->ds[i].regex_rx);
		free_strs(c->ds[i].regex_filter, c->ds[i].n_regex_filter);
		free_strs(c->ds[i].machine_filter, c->ds[i].n_machine_filter);
		sonde__free(c->ds[i].name);
	}
	sonde__free(c->ds);
	c->ds = NULL;
	c->nds = 0;
	c->n_regex = 0;
}

void sonde__tcfg_free(struct trace_cfg *c)
{
	sonde__tcfg_free_data_sources(c);
	sonde__free(c->bufs);
	sonde__free(c->unique_name);
	sonde__free(c->output_path);
	memset(c, 0, sizeof(*c));
}
