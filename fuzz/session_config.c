/* Fuzz target: a consumer's TraceConfig through the service's parser (tcfg.c) and its
 * guardrails, and the parts that the session features parse: trigger_config (names, producer regexes compiled with regcomp, delays, probabilities)
 * with its guardrails, and the data-source table ChangeTraceConfig rebuilds. The input is
 * a TraceConfig. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/pb.h"
#include "ipc/protos.h"
#include "service/internal.h"
#include "service/session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct svc s; /* no timers are armed: the service state is never touched */
	struct session ss;
	struct pb_reader r = pb_reader_init(data, size);
	struct pb_field f;
	const char *err = NULL;

	memset(&ss, 0, sizeof(ss));
	while (!err && sonde__pb_next(&r, &f) > 0) {
		if (f.num == PF_TRACE_CONFIG_TRIGGER_CONFIG && f.wire == PB_LEN)
			err = sonde__trigger_parse(&ss, &f); /* the service refuses the config then */
		if (f.num == PF_TRACE_CONFIG_DURATION_MS && f.wire == PB_VARINT)
			ss.cfg.duration_ms = (uint32_t)f.u;
	}
	if (!err && !sonde__trigger_validate(&ss)) {
		/* an accepted config has named, unique triggers and a bounded timeout */
		for (size_t i = 0; i < ss.trig.ndefs; i++)
			if (!ss.trig.defs[i].name || !ss.trig.defs[i].name[0])
				abort();
		if (ss.trig.present && (!ss.trig.timeout_ms || ss.cfg.duration_ms))
			abort();
	}
	sonde__trigger_session_free(&s, &ss);

	ss.config = (uint8_t *)data;
	ss.config_len = size;
	sonde__session_parse_data_sources(&ss);
	for (size_t i = 0; i < ss.cfg.nds; i++)
		if (ss.cfg.ds[i].raw_len &&
		    (ss.cfg.ds[i].raw < data || ss.cfg.ds[i].raw + ss.cfg.ds[i].raw_len > data + size))
			abort();
	sonde__session_free_data_sources(&ss);

	struct trace_cfg c;
	if (!sonde__tcfg_parse(data, size, &c)) {
		(void)sonde__tcfg_validate(&c, SVC_MAX_BUFFERS_PER_SESSION);
		for (size_t i = 0; i < c.nds; i++)
			if (c.ds[i].raw_len &&
			    (c.ds[i].raw < data || c.ds[i].raw + c.ds[i].raw_len > data + size))
				abort();
	}
	sonde__tcfg_free(&c);
	return 0;
}
