/* Triggers (perfetto-wire.md §2.7, §3.3, §6.3): TraceConfig.trigger_config, the
 * START_TRACING / STOP_TRACING / CLONE_SNAPSHOT reactions to ActivateTriggers, their
 * timeouts, the service-wide max_per_24_h history, and the Trigger packets.
 *
 * Any producer may send ActivateTriggers, so the work one request can cause is bounded:
 * at most TRIG_MAX_NAMES names are looked at per request, each producer spends one token
 * of a bucket per name (refilled at TRIG_RATE per second up to TRIG_BURST), names longer
 * than TRIG_MAX_NAME_LEN are ignored, producer regexes are compiled once at EnableTracing,
 * and a session records at most TRIG_MAX_RECORDED triggers. */
#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <sonde/log.h>

#include "base/alloc.h"
#include "base/array.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "service/flush.h"
#include "service/internal.h"
#include "service/session.h"

enum {
	TRIG_MAX_DEFS = 64,	    /* triggers[] entries per config */
	TRIG_MAX_NAME_LEN = 256,    /* longer names match nothing and are ignored */
	TRIG_MAX_NAMES = 64,	    /* names looked at per ActivateTriggers */
	TRIG_BURST = 128,	    /* token bucket per producer */
	TRIG_RATE = 64,		    /* tokens per second */
	TRIG_MAX_RECORDED = 256,    /* Trigger packets kept per session */
	TRIG_MAX_HISTORY = 1 << 16, /* applied triggers remembered for max_per_24_h */
	TRIG_MAX_TIMEOUT_MS = 7 * 24 * 3600 * 1000u,
};

#define DAY_NS (24ull * 3600 * 1000000000ull)

struct trig_hist {
	uint64_t name_hash, ns;
};

/* Service-wide state: the history of applied triggers and the skip_probability PRNG. */
struct trig_global {
	struct trig_hist *hist;
	size_t nhist, cap;
	uint64_t rng;
	uint64_t dropped; /* names refused by the per-producer throttle */
};

/* ------------------------------------------------------------------ config */

static const char *parse_def(struct trig_def *d, const struct pb_field *e)
{
	struct pb_reader r = pb_sub(e);
	struct pb_field f;
	char *regex = NULL;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == PF_TRIGGER_NAME && f.wire == PB_LEN) {
			sonde__free(d->name);
			d->name = sonde__svc_strndup(f.ptr, f.len);
		} else if (f.num == PF_TRIGGER_PRODUCER_NAME_REGEX && f.wire == PB_LEN) {
			sonde__free(regex);
			regex = sonde__svc_strndup(f.ptr, f.len);
		} else if (f.num == PF_TRIGGER_STOP_DELAY_MS && f.wire == PB_VARINT) {
			d->stop_delay_ms = f.u > UINT32_MAX ? UINT32_MAX : (uint32_t)f.u;
		} else if (f.num == PF_TRIGGER_MAX_PER_24_H && f.wire == PB_VARINT) {
			d->max_per_24h = f.u > UINT32_MAX ? UINT32_MAX : (uint32_t)f.u;
		} else if (f.num == PF_TRIGGER_SKIP_PROBABILITY && f.wire == PB_FIXED64) {
			memcpy(&d->skip_probability, &f.u, sizeof(double));
		}
	}
	if (!d->name || !d->name[0] || strlen(d->name) > TRIG_MAX_NAME_LEN) {
		sonde__free(regex);
		return "a trigger needs a name (at most 256 bytes)";
	}
	if (regex && regex[0]) {
		/* Perfetto uses std::regex_match: the whole producer name must match */
		enum tcfg_regex_refusal why;
		d->rx = sonde__tcfg_regex(regex, &why);
		if (!d->rx) {
			sonde__free(regex);
			return why == TCFG_REGEX_TOO_LONG
				       ? "trigger producer_name_regex is too long (at most 128 bytes)"
			       : why == TCFG_REGEX_TOO_COMPLEX
				       ? "trigger producer_name_regex is too complex (its interval "
					 "bounds multiply to more than 256)"
				       : "invalid trigger producer_name_regex";
		}
	}
	sonde__free(regex);
	return NULL;
}

const char *sonde__trigger_parse(struct session *ss, const struct pb_field *e)
{
	struct pb_reader r = pb_sub(e);
	struct pb_field f;
	struct trig_cfg *t = &ss->trig;

	t->present = true;
	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == PF_TRIGGER_CONFIG_TRIGGER_MODE && f.wire == PB_VARINT) {
			t->mode = f.u > UINT32_MAX ? UINT32_MAX : (uint32_t)f.u;
		} else if (f.num == PF_TRIGGER_CONFIG_TRIGGER_TIMEOUT_MS && f.wire == PB_VARINT) {
			t->timeout_ms = f.u > UINT32_MAX ? UINT32_MAX : (uint32_t)f.u;
		} else if (f.num == PF_TRIGGER_CONFIG_TRIGGERS && f.wire == PB_LEN) {
			if (t->ndefs >= TRIG_MAX_DEFS)
				return "too many triggers";
			struct trig_def *v = sonde__realloc(t->defs, (t->ndefs + 1) * sizeof(*v));
			if (!v)
				return "out of memory";
			t->defs = v;
			memset(&v[t->ndefs], 0, sizeof(*v));
			const char *err = parse_def(&v[t->ndefs++], &f);
			if (err)
				return err;
		}
	}
	return NULL;
}

/* The guardrails of §3.3 for trigger configs; NULL if acceptable. */
const char *sonde__trigger_validate(const struct session *ss)
{
	const struct trig_cfg *t = &ss->trig;

	if (!t->present)
		return NULL;
	if (t->mode != PF_TRIGGER_MODE_START_TRACING && t->mode != PF_TRIGGER_MODE_STOP_TRACING &&
	    t->mode != PF_TRIGGER_MODE_CLONE_SNAPSHOT)
		return "trigger_config needs trigger_mode START_TRACING, STOP_TRACING or "
		       "CLONE_SNAPSHOT";
	if (!t->ndefs)
		return "trigger_config has no triggers";
	if (!t->timeout_ms || t->timeout_ms > TRIG_MAX_TIMEOUT_MS)
		return "trigger_timeout_ms must be between 1 ms and 7 days";
	if (ss->cfg.duration_ms)
		return "duration_ms cannot be combined with trigger_config (use trigger_timeout_ms "
		       "and stop_delay_ms)";
	if (ss->cfg.write_into_file && t->mode != PF_TRIGGER_MODE_START_TRACING)
		return "write_into_file can only be combined with START_TRACING triggers";
	for (size_t i = 0; i < t->ndefs; i++)
		for (size_t j = i + 1; j < t->ndefs; j++)
			if (!strcmp(t->defs[i].name, t->defs[j].name))
				return "trigger names must be unique";
	return NULL;
}

bool sonde__trigger_defers_start(const struct session *ss)
{
	return ss->trig.ndefs && ss->trig.mode == PF_TRIGGER_MODE_START_TRACING;
}

bool sonde__trigger_waiting(const struct session *ss)
{
	return ss->trig.ndefs && !ss->trig.nreceived;
}

/* ------------------------------------------------------------------ timers */

static void cancel(struct svc *s, struct trig_cfg *t)
{
	if (t->timer)
		sonde__loop_timer_del(&s->loop, t->timer);
	t->timer = 0;
}

static void on_timeout(void *ctx, uint64_t id)
{
	struct svc *s = ctx;
	struct session *ss = sonde__svc_session(s, id);

	if (!ss)
		return;
	ss->trig.timer = 0;
	if (ss->state == SESS_DISABLED || ss->state == SESS_STOPPING)
		return;
	sonde_info("session %llu: %s", (unsigned long long)id,
		   ss->trig.nreceived ? "trigger stop delay elapsed" : "no trigger before timeout");
	if (ss->state == SESS_CONFIGURED)
		sonde__session_disable(s, ss, false);
	else
		sonde__session_flush(s, ss, 0, 0, 0, true); /* flush first, then disable */
}

void sonde__trigger_session_enabled(struct svc *s, struct session *ss)
{
	if (ss->trig.ndefs)
		ss->trig.timer = sonde__loop_timer_add(&s->loop, ss->trig.timeout_ms, on_timeout, ss->id);
}

void sonde__trigger_session_free(struct svc *s, struct session *ss)
{
	struct trig_cfg *t = &ss->trig;

	cancel(s, t);
	for (size_t i = 0; i < t->ndefs; i++) {
		sonde__free(t->defs[i].name);
		sonde__tcfg_regex_free(t->defs[i].rx);
	}
	sonde__free(t->defs);
	sonde__buf_free(&t->pkts);
	memset(t, 0, sizeof(*t));
}

/* ------------------------------------------------------------------ history, randomness */

static struct trig_global *global(struct svc *s)
{
	if (!s->trig) {
		s->trig = sonde__calloc(1, sizeof(*s->trig));
		if (!s->trig)
			return NULL;
		if (getrandom(&s->trig->rng, sizeof(s->trig->rng), GRND_NONBLOCK) !=
		    sizeof(s->trig->rng))
			s->trig->rng = sonde__svc_boottime_ns();
		s->trig->rng |= 1;
	}
	return s->trig;
}

void sonde__trigger_svc_free(struct svc *s)
{
	if (s->trig)
		sonde__free(s->trig->hist);
	sonde__free(s->trig);
	s->trig = NULL;
}

/* A uniform double in [0, 1) from xorshift64*. */
static double draw(struct trig_global *g)
{
	g->rng ^= g->rng >> 12;
	g->rng ^= g->rng << 25;
	g->rng ^= g->rng >> 27;
	return (double)((g->rng * 0x2545F4914F6CDD1Dull) >> 11) / (double)(1ull << 53);
}

static uint64_t name_hash(const char *n)
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */

	for (; *n; n++)
		h = (h ^ (uint8_t)*n) * 0x100000001b3ull;
	return h;
}

/* Drops entries older than 24 h (the history is in time order). */
static void prune(struct trig_global *g, uint64_t now)
{
	size_t k = 0;

	while (k < g->nhist && g->hist[k].ns + DAY_NS <= now)
		k++;
	if (k) {
		memmove(g->hist, g->hist + k, (g->nhist - k) * sizeof(*g->hist));
		g->nhist -= k;
	}
}

static uint32_t count_last_day(const struct trig_global *g, uint64_t h)
{
	uint32_t n = 0;

	for (size_t i = 0; i < g->nhist; i++)
		n += g->hist[i].name_hash == h;
	return n;
}

static void remember(struct trig_global *g, uint64_t h, uint64_t now)
{
	if (g->nhist == TRIG_MAX_HISTORY) { /* forget the oldest rather than grow forever */
		memmove(g->hist, g->hist + 1, (g->nhist - 1) * sizeof(*g->hist));
		g->nhist--;
	}
	if (sonde__array_grow(&g->hist, &g->cap, g->nhist + 1, sizeof(*g->hist), 64) < 0)
		return;
	g->hist[g->nhist++] = (struct trig_hist){h, now};
}

/* ------------------------------------------------------------------ activation */

static void record(struct svc *s, struct session *ss, const struct trig_def *d,
		   const struct conn *c)
{
	struct buf *b = &s->scratch;

	if (ss->trig.nreceived >= TRIG_MAX_RECORDED)
		return;
	ss->trig.nreceived++;
	sonde__buf_reset(b);
	sonde__pb_put_varint(b, PF_PACKET_TIMESTAMP, sonde__svc_boottime_ns());
	size_t m = sonde__pb_begin(b, PF_PACKET_TRIGGER);
	sonde__pb_put_string(b, PF_TRIGGER_PACKET_TRIGGER_NAME, d->name);
	sonde__pb_put_string(b, PF_TRIGGER_PACKET_PRODUCER_NAME, c->p.name);
	if (!c->remote || c->vouched)
		sonde__pb_put_varint(b, PF_TRIGGER_PACKET_TRUSTED_PRODUCER_UID,
				     (uint64_t)(int64_t)(int32_t)c->ch.peer_uid);
	sonde__pb_put_varint(b, PF_TRIGGER_PACKET_STOP_DELAY_MS, d->stop_delay_ms);
	sonde__pb_end(b, m);
	sonde__pb_put_varint(b, PF_PACKET_TRUSTED_UID, s->uid);
	sonde__pb_put_varint(b, PF_PACKET_TRUSTED_PACKET_SEQUENCE_ID, 1);
	sonde__pb_put_varint(b, PF_PACKET_TIMESTAMP_CLOCK_ID, PF_CLOCK_BOOTTIME);
	sonde__svcpkt_queue(&ss->trig.pkts, b);
}

/* Applies a matching trigger to one session; returns whether it changed the session. */
static bool apply(struct svc *s, struct session *ss, const struct trig_def *d, const struct conn *c)
{
	struct trig_cfg *t = &ss->trig;
	bool first = t->nreceived == 0;

	record(s, ss, d, c);
	sonde_info("session %llu: trigger \"%s\" from producer \"%s\"", (unsigned long long)ss->id,
		   d->name, c->p.name);
	switch (t->mode) {
	case PF_TRIGGER_MODE_START_TRACING:
		if (ss->state != SESS_CONFIGURED)
			return false;
		cancel(s, t);
		ss->cfg.duration_ms = d->stop_delay_ms; /* 0: runs until stopped */
		sonde__session_start(s, ss);
		return true;
	case PF_TRIGGER_MODE_STOP_TRACING:
		if (!first || ss->state != SESS_STARTED)
			return false;
		cancel(s, t);
		t->timer = sonde__loop_timer_add(&s->loop, d->stop_delay_ms, on_timeout, ss->id);
		return true;
	case PF_TRIGGER_MODE_CLONE_SNAPSHOT:
		if (ss->state != SESS_STARTED)
			return false;
		sonde__clone_trigger_hit(s, ss, d->name, c, sonde__svc_boottime_ns(), d->stop_delay_ms);
		return true;
	default:
		return false;
	}
}

static void activate_one(struct svc *s, struct trig_global *g, const struct conn *c,
			 const char *name, uint64_t now)
{
	uint64_t h = name_hash(name);
	bool applied = false;

	for (size_t i = 0; i < s->nsessions; i++) {
		struct session *ss = s->sessions[i];
		if (!ss->trig.ndefs || ss->state == SESS_DISABLED || ss->read_only)
			continue;
		for (size_t k = 0; k < ss->trig.ndefs; k++) {
			const struct trig_def *d = &ss->trig.defs[k];
			if (strcmp(d->name, name))
				continue;
			if (d->rx && regexec(d->rx, c->p.name, 0, NULL, 0) != 0)
				break;
			if (draw(g) < d->skip_probability)
				break;
			if (d->max_per_24h && count_last_day(g, h) >= d->max_per_24h) {
				sonde_info("trigger \"%s\": max_per_24_h reached", name);
				break;
			}
			applied |= apply(s, ss, d, c);
			break;
		}
	}
	if (applied)
		remember(g, h, now);
}

/* Takes one token of the producer's bucket; false if it is empty. */
static bool take_token(struct producer *p, uint64_t now)
{
	if (!p->trig_refill_ns) {
		p->trig_tokens = TRIG_BURST;
		p->trig_refill_ns = now;
	}
	const uint64_t period = 1000000000ull / TRIG_RATE;
	uint64_t add = (now - p->trig_refill_ns) / period;

	if (add) {
		uint64_t t = p->trig_tokens + (add > TRIG_BURST ? TRIG_BURST : add);
		p->trig_tokens = t > TRIG_BURST ? TRIG_BURST : (uint32_t)t;
		p->trig_refill_ns += add * period;
	}
	if (!p->trig_tokens)
		return false;
	p->trig_tokens--;
	return true;
}

int sonde__trigger_activate(struct svc *s, struct req *r)
{
	struct pb_reader rd = pb_reader_init(r->args, r->args_len);
	struct trig_global *g = global(s);
	struct pb_field f;
	/* the rate limit and the 24 h history are measured on the service's clock; the
	 * Trigger packets carry BOOTTIME */
	uint64_t now = sonde__svc_now(s);
	size_t seen = 0;
	char name[TRIG_MAX_NAME_LEN + 1];

	if (!g)
		return -ENOMEM;
	prune(g, now);
	while (sonde__pb_next(&rd, &f) > 0 && seen < TRIG_MAX_NAMES) {
		if (f.num != PF_ACTIVATE_TRIGGERS_REQ_NAMES || f.wire != PB_LEN)
			continue;
		seen++;
		if (!f.len || f.len > TRIG_MAX_NAME_LEN || memchr(f.ptr, 0, f.len))
			continue;
		if (!take_token(&r->c->p, now)) {
			if (g->dropped++ % 1024 == 0)
				sonde_warn("producer \"%s\" sends too many triggers: dropping them",
					   r->c->p.name);
			continue;
		}
		memcpy(name, f.ptr, f.len);
		name[f.len] = 0;
		activate_one(s, g, r->c, name, now);
	}
	return sonde__svc_reply(r, NULL, false);
}

/* ------------------------------------------------------------------ packets */

void sonde__trigger_config_fixup(const struct session *ss, struct buf *config)
{
	if (ss->trig.ndefs && ss->trig.mode == PF_TRIGGER_MODE_STOP_TRACING)
		sonde__pb_put_varint(config, PF_TRACE_CONFIG_DURATION_MS, ss->trig.timeout_ms);
}

void sonde__trigger_emit(struct session *ss, tbuf_packet_fn fn, void *ctx)
{
	struct buf *q = &ss->trig.pkts;

	if (ss->cfg.no_trace_config) { /* §6.3: Trigger packets go with the config */
		sonde__buf_reset(q);
		return;
	}
	sonde__svcpkt_emit_queue(q, fn, ctx);
}
