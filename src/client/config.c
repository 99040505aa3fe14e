/* TraceConfig builder and the summary of a binary TraceConfig. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sonde/client.h>
#include <sonde/error.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/opts.h"
#include "base/pb.h"
#include "ipc/protos.h"

/* The config is kept serialized as it grows: repeated fields are appended in call order,
 * scalars are written once at encode time. */
struct sonde_trace_config {
	struct sonde_trace_config_opts opts;
	char *unique_session_name;
	char *output_path;
	struct buf repeated; /* buffers, data_sources and producers, already encoded */
	struct buf machines; /* machine_name_filter fields for the data sources added next */
	int num_buffers;
};

struct sonde_trace_config *sonde_trace_config__new(const struct sonde_trace_config_opts *opts)
{
	struct sonde_trace_config *cfg;

	if (!OPTS_VALID(opts, sonde_trace_config_opts)) {
		errno = EINVAL;
		return NULL;
	}
	if (!(cfg = sonde__calloc(1, sizeof(*cfg))))
		return NULL;
	OPTS_COPY(&cfg->opts, opts);
	if (cfg->opts.unique_session_name &&
	    !(cfg->unique_session_name = sonde__strdup(cfg->opts.unique_session_name)))
		goto fail;
	if (cfg->opts.output_path && !(cfg->output_path = sonde__strdup(cfg->opts.output_path)))
		goto fail;
	return cfg;
fail:
	sonde_trace_config__free(cfg);
	errno = ENOMEM;
	return NULL;
}

void sonde_trace_config__free(struct sonde_trace_config *cfg)
{
	if (!cfg)
		return;
	sonde__free(cfg->unique_session_name);
	sonde__free(cfg->output_path);
	sonde__buf_free(&cfg->repeated);
	sonde__buf_free(&cfg->machines);
	sonde__free(cfg);
}

int sonde_trace_config__add_buffer(struct sonde_trace_config *cfg, uint32_t size_kb,
				   enum sonde_fill_policy policy)
{
	size_t m = sonde__pb_begin(&cfg->repeated, PF_TRACE_CONFIG_BUFFERS);
	sonde__pb_put_varint(&cfg->repeated, PF_BUFFER_CONFIG_SIZE_KB, size_kb);
	if (policy)
		sonde__pb_put_varint(&cfg->repeated, PF_BUFFER_CONFIG_FILL_POLICY, policy);
	sonde__pb_end(&cfg->repeated, m);
	if (buf_error(&cfg->repeated))
		return -ENOMEM;
	return cfg->num_buffers++;
}

int sonde_trace_config__add_data_source(struct sonde_trace_config *cfg, const char *name,
					uint32_t target_buffer, const void *extra, size_t extra_len)
{
	if (!name || !*name)
		return -EINVAL;
	size_t ds = sonde__pb_begin(&cfg->repeated, PF_TRACE_CONFIG_DATA_SOURCES);
	size_t c = sonde__pb_begin(&cfg->repeated, PF_TC_DATA_SOURCE_CONFIG);
	sonde__pb_put_string(&cfg->repeated, PF_DS_CONFIG_NAME, name);
	sonde__pb_put_varint(&cfg->repeated, PF_DS_CONFIG_TARGET_BUFFER, target_buffer);
	if (extra && extra_len)
		sonde__buf_append(&cfg->repeated, extra, extra_len);
	sonde__pb_end(&cfg->repeated, c);
	sonde__buf_append(&cfg->repeated, cfg->machines.data, cfg->machines.len);
	sonde__pb_end(&cfg->repeated, ds);
	return buf_error(&cfg->repeated);
}

int sonde_trace_config__add_machine_name(struct sonde_trace_config *cfg, const char *machine)
{
	if (!machine || !*machine)
		return -EINVAL;
	sonde__pb_put_string(&cfg->machines, PF_TC_DATA_SOURCE_MACHINE_NAME_FILTER, machine);
	return buf_error(&cfg->machines);
}

int sonde_trace_config__add_producer(struct sonde_trace_config *cfg, const char *name,
				     uint32_t shm_size_kb, uint32_t page_size_kb)
{
	size_t m = sonde__pb_begin(&cfg->repeated, PF_TRACE_CONFIG_PRODUCERS);
	sonde__pb_put_string(&cfg->repeated, PF_PRODUCER_CONFIG_PRODUCER_NAME, name);
	if (shm_size_kb)
		sonde__pb_put_varint(&cfg->repeated, PF_PRODUCER_CONFIG_SHM_SIZE_KB, shm_size_kb);
	if (page_size_kb)
		sonde__pb_put_varint(&cfg->repeated, PF_PRODUCER_CONFIG_PAGE_SIZE_KB, page_size_kb);
	sonde__pb_end(&cfg->repeated, m);
	return buf_error(&cfg->repeated);
}

static void put_u32_if(struct buf *b, uint32_t field, uint64_t v)
{
	if (v)
		sonde__pb_put_varint(b, field, v);
}

int sonde_trace_config__encode(const struct sonde_trace_config *cfg, uint8_t **out, size_t *out_len)
{
	const struct sonde_trace_config_opts *o = &cfg->opts;
	struct buf b = BUF_INIT;

	sonde__buf_append(&b, cfg->repeated.data, cfg->repeated.len);
	put_u32_if(&b, PF_TRACE_CONFIG_DURATION_MS, o->duration_ms);
	put_u32_if(&b, PF_TRACE_CONFIG_FLUSH_PERIOD_MS, o->flush_period_ms);
	put_u32_if(&b, PF_TRACE_CONFIG_FLUSH_TIMEOUT_MS, o->flush_timeout_ms);
	put_u32_if(&b, PF_TRACE_CONFIG_DATA_SOURCE_STOP_TIMEOUT_MS, o->data_source_stop_timeout_ms);
	put_u32_if(&b, PF_TRACE_CONFIG_FILE_WRITE_PERIOD_MS, o->file_write_period_ms);
	put_u32_if(&b, PF_TRACE_CONFIG_MAX_FILE_SIZE_BYTES, o->max_file_size_bytes);
	if (o->write_into_file)
		sonde__pb_put_bool(&b, PF_TRACE_CONFIG_WRITE_INTO_FILE, true);
	if (o->deferred_start)
		sonde__pb_put_bool(&b, PF_TRACE_CONFIG_DEFERRED_START, true);
	sonde__pb_put_string(&b, PF_TRACE_CONFIG_UNIQUE_SESSION_NAME, cfg->unique_session_name);
	sonde__pb_put_string(&b, PF_TRACE_CONFIG_OUTPUT_PATH, cfg->output_path);
	buf_put_u8(&b, 0); /* never return a NULL buffer for an empty config */
	if (buf_error(&b)) {
		sonde__buf_free(&b);
		return -ENOMEM;
	}
	*out = b.data;
	*out_len = b.len - 1;
	return 0;
}

static int summarize_data_source(struct pb_field *ds, struct sonde_trace_config_summary *s)
{
	struct pb_reader r = pb_sub(ds);
	struct pb_field f;
	int n;

	while ((n = sonde__pb_next(&r, &f)) > 0) {
		if (f.num != PF_TC_DATA_SOURCE_CONFIG || f.wire != PB_LEN)
			continue;
		/* the config must itself be a message */
		struct pb_reader c = pb_sub(&f);
		struct pb_field g;
		while ((n = sonde__pb_next(&c, &g)) > 0)
			;
		if (n < 0)
			return n;
	}
	if (n == 0)
		s->num_data_sources++;
	return n;
}

static int summarize_buffer(struct pb_field *bf, struct sonde_trace_config_summary *s)
{
	struct pb_reader r = pb_sub(bf);
	struct pb_field f;
	int n;

	while ((n = sonde__pb_next(&r, &f)) > 0)
		if (f.num == PF_BUFFER_CONFIG_SIZE_KB && f.wire == PB_VARINT)
			s->total_buffer_kb += (uint32_t)f.u;
	if (n == 0)
		s->num_buffers++;
	return n;
}

int sonde_trace_config__summarize(const void *cfg, size_t len, struct sonde_trace_config_summary *s)
{
	struct pb_reader r = pb_reader_init(cfg, len);
	struct pb_field f;
	int n;

	memset(s, 0, sizeof(*s));
	while ((n = sonde__pb_next(&r, &f)) > 0) {
		bool v = f.wire == PB_VARINT, l = f.wire == PB_LEN;
		if (f.num == PF_TRACE_CONFIG_BUFFERS && l)
			n = summarize_buffer(&f, s);
		else if (f.num == PF_TRACE_CONFIG_DATA_SOURCES && l)
			n = summarize_data_source(&f, s);
		else if (f.num == PF_TRACE_CONFIG_DURATION_MS && v)
			s->duration_ms = (uint32_t)f.u;
		else if (f.num == PF_TRACE_CONFIG_WRITE_INTO_FILE && v)
			s->write_into_file = f.u != 0;
		else if (f.num == PF_TRACE_CONFIG_DEFERRED_START && v)
			s->deferred_start = f.u != 0;
		else if (f.num == PF_TRACE_CONFIG_OUTPUT_PATH && l)
			s->has_output_path = f.len > 0;
		else if (f.num == PF_TRACE_CONFIG_TRIGGER_CONFIG && l)
			s->has_triggers = true;
		else if (f.num == PF_TRACE_CONFIG_FLUSH_TIMEOUT_MS && v)
			s->flush_timeout_ms = (uint32_t)f.u;
		else if (f.num == PF_TRACE_CONFIG_DATA_SOURCE_STOP_TIMEOUT_MS && v)
			s->data_source_stop_timeout_ms = (uint32_t)f.u;
		if (n < 0)
			return n;
	}
	return n;
}
