/* trigger_config and ActivateTriggers (perfetto-wire.md §2.7; trigger.c). */
#ifndef SONDE_SERVICE_TRIGGER_H
#define SONDE_SERVICE_TRIGGER_H

#include <regex.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "service/tbuf.h"

struct pb_field;
struct req;
struct session;
struct svc;
struct trig_global;

/* One TraceConfig.trigger_config.triggers entry. */
struct trig_def {
	char *name;
	regex_t *rx; /* producer_name_regex, anchored; NULL matches every producer */
	uint32_t stop_delay_ms, max_per_24h;
	double skip_probability;
};

struct trig_cfg {
	bool present; /* the config had a trigger_config */
	uint32_t mode, timeout_ms;
	struct trig_def *defs;
	size_t ndefs;
	uint32_t nreceived; /* triggers recorded so far */
	uint64_t timer;	    /* the trigger timeout, then the stop delay */
	struct buf pkts;    /* Trigger packets not emitted yet: u32 length + bytes each */
};

/* Parses TraceConfig.trigger_config into ss->trig; returns an error message or NULL. */
const char *sonde__trigger_parse(struct session *ss, const struct pb_field *trigger_config);
/* The trigger guardrails of §3.3 (after the whole config is parsed); message or NULL. */
const char *sonde__trigger_validate(const struct session *ss);
/* START_TRACING: the session waits for a trigger instead of starting. */
bool sonde__trigger_defers_start(const struct session *ss);
/* The session has triggers and none arrived yet: reads return nothing (§2.7). */
bool sonde__trigger_waiting(const struct session *ss);
/* Arms the trigger timeout of a new session. */
void sonde__trigger_session_enabled(struct svc *s, struct session *ss);
void sonde__trigger_session_free(struct svc *s, struct session *ss);
void sonde__trigger_svc_free(struct svc *s);
/* ProducerPort.ActivateTriggers. */
int sonde__trigger_activate(struct svc *s, struct req *r);
/* Appends to the TraceConfig packet being written what differs from the consumer's bytes:
 * with STOP_TRACING, duration_ms = trigger_timeout_ms (§6.3; last value wins). */
void sonde__trigger_config_fixup(const struct session *ss, struct buf *config);
/* Emits the Trigger packets not emitted yet (§6.3 step 4). */
void sonde__trigger_emit(struct session *ss, tbuf_packet_fn fn, void *ctx);

#endif
