/* sonde trace: record a trace from a Perfetto-compatible tracing service (sonded or traced),
 * in the spirit of the `perfetto` command. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <sonde/client.h>
#include <sonde/error.h>

#include "base/pb.h"
#include "cli.h"

#define CMD "trace"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: sonde trace -o FILE -c CONFIG [--txt]\n"
		"       sonde trace -o FILE [-d DURATION] [-b SIZE] [--machine NAME...] "
		"DATA_SOURCE...\n"
		"       sonde trace --query\n"
		"       sonde trace --trigger NAME [--trigger NAME...]\n"
		"       sonde trace --clone ID|NAME -o FILE\n"
		"\n"
		"Records a trace from a Perfetto-compatible tracing service (sonded, traced).\n"
		"Ctrl-C flushes the data sources and stops the session cleanly.\n"
		"\n"
		"  -c, --config FILE    trace config: binary TraceConfig protobuf, or protobuf "
		"text\n"
		"                       format with --txt ('-' reads standard input)\n"
		"      --txt            the config is in text format\n"
		"      --config-only    write the binary TraceConfig -c would send to -o FILE\n"
		"                       and exit, without a service (text to binary)\n"
		"  -o, --output FILE    write the trace to FILE (required to trace)\n"
		"  -d, --duration DURATION  session length, e.g. 10s, 500ms, 2m (default 10s);\n"
		"                       -t, --time DURATION is the same (perfetto's name)\n"
		"  -b, --buffer SIZE    central buffer size, e.g. 64mb, 512kb (default 32mb)\n"
		"      --socket PATH    the service's consumer socket (default\n"
		"                       $PERFETTO_CONSUMER_SOCK_NAME, else /run/perfetto/\n"
		"                       traced-consumer.sock or /tmp/perfetto-consumer)\n"
		"  -q, --query          list the service's machines, producers, data sources and\n"
		"                       sessions\n"
		"      --machine NAME   start the DATA_SOURCEs only on the machine NAME\n"
		"                       (repeatable; \"host\" is the service's own), for a\n"
		"                       service with relays (machine_name_filter)\n"
		"      --trigger NAME   activate the trigger NAME (repeatable) as producer\n"
		"                       \"perfetto_cmd_producer\", then exit (perfetto --trigger)\n"
		"      --clone ID|NAME  write a snapshot of the running session with this id or\n"
		"                       unique_session_name to -o (CloneSession; root or the\n"
		"                       session's uid)\n"
		"      --producer-socket PATH  the service's producer socket, for --trigger\n"
		"                       (default $PERFETTO_PRODUCER_SOCK_NAME, else the usual\n"
		"                       path)\n"
		"      --trust-uid UID  also trust a service running as UID (default: only root\n"
		"                       or your own uid; $SONDE_TRUST_UID does the same)\n"
		"  -h, --help           show this help\n"
		"\n"
		"-d, -b and DATA_SOURCE names build a config with one ring buffer; they cannot be\n"
		"combined with -c. A data source no producer of the service offers records\n"
		"nothing: sonde trace warns about each one. See docs/trace.md for the text format\n"
		"sonde understands.\n");
}

struct opts {
	const char *config, *out, *socket, *producer_socket, *clone;
	const char *triggers[32];
	size_t n_triggers;
	const char *machines[32];
	size_t n_machines;
	bool txt, query, quick, trust_uid_set, config_only;
	uint32_t trust_uid;
	uint32_t duration_ms;
	uint32_t buffer_kb;
	char **sources;
	int n_sources;
};

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted++;
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* "10s", "500ms", "2m", "1h", bare numbers are seconds. */
static int parse_duration(const char *s, uint32_t *ms)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	double mul = 1000;
	if (errno || end == s || v < 0)
		return -1;
	if (!strcasecmp(end, "ms"))
		mul = 1;
	else if (!*end || !strcasecmp(end, "s"))
		mul = 1000;
	else if (!strcasecmp(end, "m"))
		mul = 60000;
	else if (!strcasecmp(end, "h"))
		mul = 3600000;
	else
		return -1;
	if (v * mul > 7 * 24 * 3600000.0)
		return -1;
	*ms = (uint32_t)(v * mul);
	return 0;
}

/* "64mb", "512kb", "1gb", "4096" (KiB); the result is in KiB. */
static int parse_size_kb(const char *s, uint32_t *kb)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	double mul = 1;
	if (errno || end == s || v <= 0)
		return -1;
	if (!*end || !strcasecmp(end, "k") || !strcasecmp(end, "kb"))
		mul = 1;
	else if (!strcasecmp(end, "m") || !strcasecmp(end, "mb"))
		mul = 1024;
	else if (!strcasecmp(end, "g") || !strcasecmp(end, "gb"))
		mul = 1024 * 1024;
	else if (!strcasecmp(end, "b"))
		mul = 1.0 / 1024;
	else
		return -1;
	if (v * mul < 4 || v * mul > 4.0 * 1024 * 1024)
		return -1;
	*kb = (uint32_t)(v * mul);
	return 0;
}

static int parse_uid(const char *s, uint32_t *uid)
{
	char *end;

	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v >= UINT32_MAX)
		return -1;
	*uid = (uint32_t)v;
	return 0;
}

/* A service refused as untrusted (EPERM from the client library): one line that names it
 * and says how to trust it. */
static void untrusted(const char *path, uint32_t uid)
{
	cli_error(CMD,
		  "not talking to the service at %s: it runs as uid %u, which is neither root "
		  "nor yours (uid %u); if it is the service you meant, pass --trust-uid %u",
		  path, (unsigned)uid, (unsigned)geteuid(), (unsigned)uid);
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	enum {
		OPT_TXT = 256,
		OPT_SOCKET,
		OPT_TRIGGER,
		OPT_PRODUCER_SOCKET,
		OPT_CLONE,
		OPT_TRUST,
		OPT_MACHINE,
		OPT_CONFIG_ONLY
	};
	static const struct option longopts[] = {
		{"config", required_argument, NULL, 'c'},
		{"txt", no_argument, NULL, OPT_TXT},
		{"config-only", no_argument, NULL, OPT_CONFIG_ONLY},
		{"output", required_argument, NULL, 'o'},
		{"duration", required_argument, NULL, 'd'},
		{"time", required_argument, NULL, 't'},
		{"buffer", required_argument, NULL, 'b'},
		{"socket", required_argument, NULL, OPT_SOCKET},
		{"query", no_argument, NULL, 'q'},
		{"trigger", required_argument, NULL, OPT_TRIGGER},
		{"clone", required_argument, NULL, OPT_CLONE},
		{"producer-socket", required_argument, NULL, OPT_PRODUCER_SOCKET},
		{"trust-uid", required_argument, NULL, OPT_TRUST},
		{"machine", required_argument, NULL, OPT_MACHINE},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}};
	int c;

	o->duration_ms = 10000;
	o->buffer_kb = 32 * 1024;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":c:o:d:t:b:qh", longopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			o->config = optarg;
			break;
		case OPT_TXT:
			o->txt = true;
			break;
		case OPT_CONFIG_ONLY:
			o->config_only = true;
			break;
		case 'o':
			o->out = optarg;
			break;
		case 'd':
		case 't':
			o->quick = true;
			if (parse_duration(optarg, &o->duration_ms) < 0) {
				cli_error(CMD, "bad duration '%s' (e.g. 10s, 500ms, 2m)", optarg);
				return CLI_USAGE;
			}
			break;
		case 'b':
			o->quick = true;
			if (parse_size_kb(optarg, &o->buffer_kb) < 0) {
				cli_error(CMD, "bad buffer size '%s' (e.g. 64mb, 512kb)", optarg);
				return CLI_USAGE;
			}
			break;
		case OPT_SOCKET:
			o->socket = optarg;
			break;
		case 'q':
			o->query = true;
			break;
		case OPT_TRIGGER:
			if (o->n_triggers == sizeof(o->triggers) / sizeof(o->triggers[0])) {
				cli_error(CMD, "too many --trigger names");
				return CLI_USAGE;
			}
			o->triggers[o->n_triggers++] = optarg;
			break;
		case OPT_CLONE:
			o->clone = optarg;
			break;
		case OPT_MACHINE:
			if (o->n_machines == sizeof(o->machines) / sizeof(o->machines[0])) {
				cli_error(CMD, "too many --machine names");
				return CLI_USAGE;
			}
			o->machines[o->n_machines++] = optarg;
			break;
		case OPT_PRODUCER_SOCKET:
			o->producer_socket = optarg;
			break;
		case OPT_TRUST:
			if (parse_uid(optarg, &o->trust_uid) < 0) {
				cli_error(CMD, "bad uid '%s' for --trust-uid", optarg);
				return CLI_USAGE;
			}
			o->trust_uid_set = true;
			break;
		case 'h':
			usage(stdout);
			return -1;
		default:
			return cli_bad_option(CMD, c, argv);
		}
	}
	o->sources = argv + optind;
	o->n_sources = argc - optind;
	return 0;
}

static int check_args(const struct opts *o)
{
	if (o->n_triggers && (o->query || o->out || o->config || o->n_sources)) {
		cli_error(CMD, "--trigger only activates triggers: it takes no other option");
		return CLI_USAGE;
	}
	if (o->query || o->n_triggers)
		return 0;
	if (o->clone && (o->config || o->n_sources || o->quick)) {
		cli_error(CMD, "--clone reads an existing session: it takes no config");
		return CLI_USAGE;
	}
	if (!o->out) {
		cli_error(CMD, "-o FILE is required (see 'sonde trace --help')");
		return CLI_USAGE;
	}
	if (o->n_machines && !o->n_sources) {
		cli_error(CMD, "--machine applies to the data sources named on the command line");
		return CLI_USAGE;
	}
	if (o->config && (o->quick || o->n_sources)) {
		cli_error(CMD, "-c cannot be combined with -d, -b or data source names");
		return CLI_USAGE;
	}
	if (o->config_only && !o->config) {
		cli_error(CMD, "--config-only needs -c FILE");
		return CLI_USAGE;
	}
	if (o->txt && !o->config) {
		cli_error(CMD, "--txt needs -c FILE");
		return CLI_USAGE;
	}
	if (!o->config && !o->n_sources && !o->clone) {
		cli_error(CMD, "give a config (-c FILE) or at least one data source name");
		return CLI_USAGE;
	}
	return 0;
}

static char *read_all(const char *path, size_t *len)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap + 1);

	if (!f || !buf) {
		if (f && f != stdin)
			fclose(f);
		free(buf);
		return NULL;
	}
	for (size_t k; (k = fread(buf + n, 1, cap - n, f)) > 0;) {
		n += k;
		if (n == cap) {
			char *nb = realloc(buf, 2 * cap + 1);
			if (!nb) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
			cap *= 2;
		}
	}
	int err = ferror(f) ? errno : 0;
	if (f != stdin)
		fclose(f);
	if (err || !buf) {
		free(buf);
		errno = err ? err : ENOMEM;
		return NULL;
	}
	buf[n] = 0;
	*len = n;
	return buf;
}

static int quick_config(const struct opts *o, uint8_t **cfg, size_t *len)
{
	struct sonde_trace_config_opts co = {.sz = sizeof(co), .duration_ms = o->duration_ms};
	struct sonde_trace_config *c = sonde_trace_config__new(&co);
	int r = -ENOMEM;

	if (!c)
		return -ENOMEM;
	if (sonde_trace_config__add_buffer(c, o->buffer_kb, SONDE_FILL_RING_BUFFER) < 0)
		goto out;
	for (size_t i = 0; i < o->n_machines; i++)
		if ((r = sonde_trace_config__add_machine_name(c, o->machines[i])) < 0)
			goto out;
	for (int i = 0; i < o->n_sources; i++)
		if ((r = sonde_trace_config__add_data_source(c, o->sources[i], 0, NULL, 0)) < 0)
			goto out;
	r = sonde_trace_config__encode(c, cfg, len);
out:
	sonde_trace_config__free(c);
	return r;
}

/* The config to send, as binary TraceConfig. Returns 0 or an exit code. */
static int load_config(const struct opts *o, uint8_t **cfg, size_t *len,
		       struct sonde_trace_config_summary *sum)
{
	if (!o->config) {
		if (quick_config(o, cfg, len) < 0) {
			cli_error(CMD, "out of memory");
			return CLI_FAILURE;
		}
	} else {
		size_t n;
		char *text = read_all(o->config, &n);
		if (!text) {
			cli_error(CMD, "cannot read config %s: %s", o->config, strerror(errno));
			return CLI_FAILURE;
		}
		if (o->txt) {
			struct sonde_txt_error e;
			int r = sonde_trace_config__from_text(text, n, cfg, len, &e);
			free(text);
			if (r < 0) {
				cli_error(CMD, "%s:%d:%d: %s", o->config, e.line, e.column, e.msg);
				return CLI_FAILURE;
			}
		} else {
			*cfg = (uint8_t *)text;
			*len = n;
		}
	}
	if (sonde_trace_config__summarize(*cfg, *len, sum) < 0) {
		cli_error(CMD, "%s is not a binary TraceConfig%s", o->config,
			  o->txt ? "" : " (is it text? add --txt)");
		goto fail;
	}
	if (sum->has_output_path) {
		cli_error(CMD, "the config sets output_path, which makes the service write the "
			       "trace itself; remove it and use -o");
		goto fail;
	}
	if (!sum->num_data_sources) {
		cli_error(CMD, "the config enables no data source");
		goto fail;
	}
	return 0;
fail:
	free(*cfg);
	*cfg = NULL;
	return CLI_FAILURE;
}

static struct sonde_consumer *connect_service(const struct opts *o)
{
	uint32_t uid = 0;
	struct sonde_consumer_opts co = {.sz = sizeof(co),
					 .socket = o->socket,
					 .trust_uid_set = o->trust_uid_set,
					 .trust_uid = o->trust_uid,
					 .untrusted_uid = &uid};
	struct sonde_consumer *c = sonde_consumer__new(&co);

	if (!c) {
		int e = errno;
		const char *path = sonde_consumer__socket_path(&co);
		if (e == EPERM)
			untrusted(path, uid);
		else if (e == EINVAL)
			cli_error(CMD, "SONDE_TRUST_UID is not a uid");
		else if (e == ENOENT || e == ECONNREFUSED)
			cli_error(CMD,
				  "no tracing service at %s (%s): start sonded, or point "
				  "--socket or PERFETTO_CONSUMER_SOCK_NAME at a running service",
				  path, strerror(e));
		else
			cli_error(CMD, "cannot connect to the tracing service at %s: %s", path,
				  strerror(e));
	}
	return c;
}

/* The machines the producers are on: the service's own (0) and each relayed one, with
 * its name and number of producers; a service without relays has the host alone. */
static void print_machines(const struct sonde_service_state *s)
{
	uint32_t ids[64];
	size_t n = 0, count[64] = {0}, host = 0;
	const char *names[64];

	for (size_t i = 0; i < s->n_producers; i++) {
		const struct sonde_service_producer *p = &s->producers[i];
		size_t k = 0;
		if (!p->machine_id) {
			host++;
			continue;
		}
		while (k < n && ids[k] != p->machine_id)
			k++;
		if (k == n && n == 64)
			continue;
		if (k == n) {
			ids[n] = p->machine_id;
			names[n++] = p->machine_name;
		}
		count[k]++;
	}
	printf("machines (%zu):\n", n + 1);
	printf("  %-4u %-32s %zu producer%s\n", 0u, "host", host, host == 1 ? "" : "s");
	for (size_t k = 0; k < n; k++)
		printf("  %-4u %-32s %zu producer%s\n", ids[k],
		       names[k][0] ? names[k] : "(unnamed)", count[k], count[k] == 1 ? "" : "s");
}

static int run_query(const struct opts *o)
{
	struct sonde_consumer *c = connect_service(o);
	struct sonde_service_state *s = NULL;

	if (!c)
		return CLI_FAILURE;
	int r = sonde_consumer__query_service_state_sync(c, &s, 10000);
	sonde_consumer__free(c);
	if (r < 0) {
		cli_error(CMD, "QueryServiceState failed: %s", sonde_strerror(r));
		return CLI_FAILURE;
	}
	if (s->version[0])
		printf("service: %s\n", s->version);
	print_machines(s);
	printf("producers (%zu):\n", s->n_producers);
	for (size_t i = 0; i < s->n_producers; i++) {
		const struct sonde_service_producer *p = &s->producers[i];
		char who[48] = "remote", where[32] = "";
		/* a network peer's uid and pid are unknown (the service leaves them out) */
		if (p->uid >= 0 && p->pid > 0)
			snprintf(who, sizeof(who), "uid %d pid %d", p->uid, p->pid);
		else if (p->uid >= 0)
			snprintf(who, sizeof(who), "uid %d", p->uid);
		if (p->machine_id)
			snprintf(where, sizeof(where), " machine %u", p->machine_id);
		printf("  %-4d %-32s %s%s%s%s\n", p->id, p->name, who, where,
		       p->sdk_version[0] ? "  " : "", p->sdk_version);
	}
	printf("data sources (%zu):\n", s->n_data_sources);
	for (size_t i = 0; i < s->n_data_sources; i++)
		printf("  %-32s producer %d\n", s->data_sources[i].name,
		       s->data_sources[i].producer_id);
	printf("sessions: %d (%d started)\n", s->num_sessions, s->num_sessions_started);
	for (size_t i = 0; i < s->n_sessions; i++)
		printf("  #%llu %-10s uid %d, %llu KiB, %u ms, %u data sources%s%s\n",
		       (unsigned long long)s->sessions[i].id, s->sessions[i].state,
		       s->sessions[i].consumer_uid,
		       (unsigned long long)s->sessions[i].buffer_size_kb,
		       s->sessions[i].duration_ms, s->sessions[i].num_data_sources,
		       s->sessions[i].unique_session_name[0] ? ", " : "",
		       s->sessions[i].unique_session_name);
	sonde_service_state__free(s);
	return CLI_OK;
}

/* perfetto --trigger: connect as a producer, send ActivateTriggers, make sure the bytes
 * left, and exit (the service handles a connection's requests before its close). */
static int run_triggers(const struct opts *o)
{
	uint32_t uid = 0;
	struct sonde_producer_opts po = {.sz = sizeof(po),
					 .name = "perfetto_cmd_producer",
					 .socket = o->producer_socket,
					 .trust_uid_set = o->trust_uid_set,
					 .trust_uid = o->trust_uid,
					 .untrusted_uid = &uid};
	struct sonde_producer *p = sonde_producer__new(&po);
	uint64_t start = now_ms();
	int r;

	if (!p && errno == EPERM) {
		untrusted(sonde_producer__socket_path(&po), uid);
		return CLI_FAILURE;
	}
	if (!p) {
		cli_error(CMD, "cannot connect to the producer socket %s: %s",
			  sonde_producer__socket_path(&po), strerror(errno));
		return CLI_FAILURE;
	}
	/* Wait for the InitializeConnection reply: closing while the service still has a reply
	 * to send would make that send fail and the service drop the connection, maybe before
	 * it read ActivateTriggers. Nothing else is sent to a producer without data sources. */
	r = 0;
	while (r >= 0 && !sonde_producer__connected(p) && now_ms() - start < 5000)
		r = sonde_producer__poll(p, 100);
	if (r >= 0 && !sonde_producer__connected(p))
		r = -ETIMEDOUT;
	if (r >= 0)
		r = sonde_producer__activate_triggers(p, o->triggers, o->n_triggers);
	while (r >= 0 && sonde_producer__want_write(p) && now_ms() - start < 5000) {
		struct pollfd pf = {.fd = sonde_producer__fd(p), .events = POLLOUT};
		if (poll(&pf, 1, 100) > 0)
			r = sonde_producer__process(p);
	}
	if (r >= 0 && sonde_producer__want_write(p))
		r = -ETIMEDOUT;
	sonde_producer__free(p);
	if (r < 0) {
		cli_error(CMD, "ActivateTriggers failed: %s", sonde_strerror(r));
		return CLI_FAILURE;
	}
	fprintf(stderr, "sonde trace: activated %zu trigger%s\n", o->n_triggers,
		o->n_triggers == 1 ? "" : "s");
	return CLI_OK;
}

struct sink {
	FILE *f;
	uint64_t packets, bytes;
	int err;
	unsigned profiler_errors;
};

/* What a system data source said in the trace (sonde probes' linux.perf, linux.ftrace,
 * linux.process_stats and linux.sys_stats write android_log events tagged with their name:
 * errors such as a refused target, config or consumer, warnings such as a fallback or the
 * guardrail stop) is the consumer's business: printed, and errors make the exit status 1. */
static void report_profiler_errors(struct sink *s, const void *pkt, size_t len)
{
	struct pb_reader r = pb_reader_init(pkt, len), lr, er;
	struct pb_field f, g, h;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num != 39 || f.wire != PB_LEN) /* TracePacket.android_log */
			continue;
		for (lr = pb_sub(&f); sonde__pb_next(&lr, &g) > 0;) {
			const uint8_t *tag = NULL, *msg = NULL;
			size_t tag_len = 0, msg_len = 0;
			uint64_t prio = 0;
			if (g.num != 1 || g.wire != PB_LEN)
				continue;
			for (er = pb_sub(&g); sonde__pb_next(&er, &h) > 0;) {
				if (h.num == 6 && h.wire == PB_LEN)
					tag = h.ptr, tag_len = h.len;
				else if (h.num == 7 && h.wire == PB_VARINT)
					prio = h.u;
				else if (h.num == 8 && h.wire == PB_LEN)
					msg = h.ptr, msg_len = h.len;
			}
			if (!msg || tag_len < 7 || tag_len > 64 || memcmp(tag, "linux.", 6) ||
			    prio < 5)
				continue;
			cli_error(CMD, "%.*s: %s%.*s", (int)tag_len, (const char *)tag,
				  prio == 5 ? "warning: " : "", (int)msg_len, (const char *)msg);
			s->profiler_errors += prio >= 6;
		}
	}
}

/* Trace file framing: each packet is a `Trace.packet` field (0x0A varint(len) bytes). */
static void write_packet(void *ctx, const void *pkt, size_t len)
{
	struct sink *s = ctx;
	uint8_t hdr[11] = {0x0a};
	size_t n = 1;
	uint64_t v = len;

	do {
		hdr[n++] = (uint8_t)(v | (v >= 0x80 ? 0x80 : 0));
		v >>= 7;
	} while (v);
	if (fwrite(hdr, 1, n, s->f) != n || fwrite(pkt, 1, len, s->f) != len)
		s->err = errno ? errno : EIO;
	report_profiler_errors(s, pkt, len);
	s->packets++;
	s->bytes += n + len;
}

static void flushed_then_stop(void *ctx, int status)
{
	struct sonde_consumer *c = ctx;
	if (status < 0)
		cli_error(CMD, "flush before stopping failed: %s", sonde_strerror(status));
	sonde_consumer__disable_tracing(c);
}

/* Runs the consumer loop until the session ends; Ctrl-C flushes and stops it. */
static int wait_session(struct sonde_consumer *c, uint32_t duration_ms)
{
	/* as perfetto does: give up well after the session should have ended */
	uint64_t limit_ms = duration_ms ? (uint64_t)duration_ms + 60000 + 10000 : 0;
	uint64_t start = now_ms();
	bool stopping = false;

	while (!sonde_consumer__disabled(c)) {
		if (interrupted > 1)
			return -EINTR;
		if (interrupted && !stopping) {
			stopping = true;
			fprintf(stderr, "sonde trace: stopping (Ctrl-C again to abort)\n");
			if (sonde_consumer__flush(c, 0, flushed_then_stop, c) < 0)
				sonde_consumer__disable_tracing(c);
		}
		struct pollfd p = {.fd = sonde_consumer__fd(c), .events = POLLIN};
		if (sonde_consumer__want_write(c))
			p.events |= POLLOUT;
		int r = poll(&p, 1, 200);
		if (r < 0 && errno != EINTR)
			return -errno;
		/* the client ends the session when the connection goes: lost, not ended */
		if (r > 0 && (r = sonde_consumer__process(c)) < 0)
			return sonde_consumer__disabled(c) ? -ECONNRESET : r;
		if (limit_ms && now_ms() - start > limit_ms)
			return -ETIMEDOUT;
	}
	return 0;
}

static int open_output(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		cli_error(CMD, "cannot create %s: %s", path, strerror(errno));
	return fd;
}

/* --config-only: the config as it would be sent, into path; takes cfg. */
static int write_config(const char *path, uint8_t *cfg, size_t len)
{
	int fd = open_output(path), rc = CLI_FAILURE;
	size_t off = 0;

	while (fd >= 0 && off < len) {
		ssize_t n = write(fd, cfg + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			cli_error(CMD, "cannot write %s: %s", path, strerror(n < 0 ? errno : EIO));
			break;
		}
		off += (size_t)n;
	}
	if (fd >= 0 && close(fd) < 0 && off == len)
		cli_error(CMD, "cannot write %s: %s", path, strerror(errno));
	else if (fd >= 0 && off == len)
		rc = 0;
	free(cfg);
	return rc;
}

/* The session did not end normally (lost connection, abort, timeout): what the file holds
 * (the service's writes, for write_into_file; else nothing yet) stays, and is incomplete. */
static void lost(const struct opts *o, int fd, int r, bool into_file)
{
	const char *why = r == -EINTR	    ? "aborted"
			  : r == -ECONNRESET ? "the connection to the service was lost"
					     : sonde_strerror(r);
	off_t size = lseek(fd, 0, SEEK_END);

	if (into_file)
		cli_error(CMD, "%s: %s holds the %lld bytes the service wrote; the trace is "
			       "incomplete",
			  why, o->out, (long long)(size > 0 ? size : 0));
	else
		cli_error(CMD, "%s before the trace was read: nothing was written to %s; the "
			       "trace is incomplete",
			  why, o->out);
}

/* After the session ended: drain it into the file, unless the service wrote it. */
static int collect(struct sonde_consumer *c, const struct opts *o, int fd, bool into_file)
{
	struct sink s = {0};

	if (into_file) {
		off_t size = lseek(fd, 0, SEEK_END);
		fprintf(stderr, "sonde trace: the service wrote %lld bytes to %s\n",
			(long long)size, o->out);
		return CLI_OK;
	}
	if (!(s.f = fdopen(dup(fd), "wb"))) {
		cli_error(CMD, "%s: %s", o->out, strerror(errno));
		return CLI_FAILURE;
	}
	struct sonde_consumer_cbs cbs = {.sz = sizeof(cbs), .on_packet = write_packet, .ctx = &s};
	sonde_consumer__set_callbacks(c, &cbs);
	int r = sonde_consumer__read_buffers_sync(c, 60000);
	if (fclose(s.f) != 0 && !s.err)
		s.err = errno;
	if (s.err) {
		cli_error(CMD, "writing %s: %s", o->out, strerror(s.err));
		return CLI_FAILURE;
	}
	/* every packet that arrived is in the file, whole: keep it, and say it is partial */
	if (r < 0) {
		cli_error(CMD, "%s while reading: wrote %llu packets, %llu bytes to %s; the trace "
			       "is incomplete",
			  r == -ECONNRESET ? "the connection to the service was lost"
					   : sonde_strerror(r),
			  (unsigned long long)s.packets, (unsigned long long)s.bytes, o->out);
		return CLI_FAILURE;
	}
	fprintf(stderr, "sonde trace: wrote %llu packets, %llu bytes to %s\n",
		(unsigned long long)s.packets, (unsigned long long)s.bytes, o->out);
	if (s.profiler_errors) {
		cli_error(CMD, "the trace holds %u data source error%s (above)", s.profiler_errors,
			  s.profiler_errors == 1 ? "" : "s");
		return CLI_FAILURE;
	}
	return CLI_OK;
}

/* perfetto --clone: a read-only copy of a running session (by id or unique_session_name),
 * written to -o. */
static int run_clone(const struct opts *o)
{
	struct sonde_clone_result res;
	struct sonde_consumer *c = connect_service(o);
	char *end;
	uint64_t id = strtoull(o->clone, &end, 10);
	int fd = -1, rc = CLI_FAILURE, r;

	if (!c)
		return CLI_FAILURE;
	if (*end || end == o->clone)
		id = 0; /* not a number: a unique_session_name */
	r = sonde_consumer__clone_session_sync(c, id, id ? NULL : o->clone, &res, 60000);
	if (r < 0) {
		cli_error(CMD, "CloneSession failed: %s",
			  r == -SONDE_E_UNSUPPORTED ? "the service does not support it"
						    : sonde_strerror(r));
	} else if (!res.success) {
		cli_error(CMD, "cannot clone session %s: %s", o->clone, res.error);
	} else if ((fd = open_output(o->out)) >= 0) {
		rc = collect(c, o, fd, false);
	}
	if (fd >= 0)
		close(fd);
	sonde_consumer__free(c);
	return rc;
}

/* Calls fn with each data source name of a binary TraceConfig (data_sources = 2,
 * DataSource.config = 1, DataSourceConfig.name = 1). */
static void config_source_names(const uint8_t *cfg, size_t len,
				void (*fn)(const char *name, size_t n, void *ctx), void *ctx)
{
	struct pb_reader r = pb_reader_init(cfg, len);
	struct pb_field f, g, h;

	while (sonde__pb_next(&r, &f) == 1) {
		if (f.num != 2 || f.wire != PB_LEN)
			continue;
		struct pb_reader ds = pb_sub(&f);
		while (sonde__pb_next(&ds, &g) == 1) {
			if (g.num != 1 || g.wire != PB_LEN)
				continue;
			struct pb_reader dc = pb_sub(&g);
			while (sonde__pb_next(&dc, &h) == 1)
				if (h.num == 1 && h.wire == PB_LEN)
					fn((const char *)h.ptr, h.len, ctx);
		}
	}
}

static void warn_if_unoffered(const char *name, size_t n, void *ctx)
{
	const struct sonde_service_state *s = ctx;

	for (size_t i = 0; i < s->n_data_sources; i++)
		if (strlen(s->data_sources[i].name) == n &&
		    !memcmp(s->data_sources[i].name, name, n))
			return;
	fprintf(stderr,
		"sonde trace: warning: no producer offers data source '%.*s': nothing will be "
		"recorded from it (see 'sonde trace --query')\n",
		(int)n, name);
}

/* A data source no connected producer registered records nothing (the service keeps it
 * for a producer that may still come): say so for each. */
static void warn_unmatched(struct sonde_consumer *c, const uint8_t *cfg, size_t len)
{
	struct sonde_service_state *s = NULL;

	if (sonde_consumer__query_service_state_sync(c, &s, 5000) < 0)
		return;
	config_source_names(cfg, len, warn_if_unoffered, s);
	sonde_service_state__free(s);
}

static int run_trace(const struct opts *o)
{
	struct sonde_trace_config_summary sum;
	struct sonde_consumer *c = NULL;
	uint8_t *cfg = NULL;
	size_t len = 0;
	char err[256];
	int fd = -1, rc;

	if ((rc = load_config(o, &cfg, &len, &sum)) != 0)
		return rc;
	if (o->config_only)
		return write_config(o->out, cfg, len);
	rc = CLI_FAILURE;
	if (!(c = connect_service(o)) || (fd = open_output(o->out)) < 0)
		goto out;
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	warn_unmatched(c, cfg, len);
	int r = sonde_consumer__enable_tracing(c, cfg, len, sum.write_into_file ? fd : -1);
	if (r < 0) {
		cli_error(CMD, "EnableTracing failed: %s", sonde_strerror(r));
		goto out;
	}
	/* sonde trace has nothing to wait for between enabling and starting */
	if (sum.deferred_start && (r = sonde_consumer__start_tracing(c)) < 0) {
		cli_error(CMD, "StartTracing failed: %s", sonde_strerror(r));
		goto out;
	}
	fprintf(stderr, "sonde trace: tracing %u data source%s%s\n", sum.num_data_sources,
		sum.num_data_sources == 1 ? "" : "s", sum.duration_ms ? "" : " until Ctrl-C");
	if ((r = wait_session(c, sum.duration_ms)) < 0) {
		lost(o, fd, r, sum.write_into_file);
		goto out;
	}
	sonde_consumer__wait_disabled(c, 0, err, sizeof(err));
	if (err[0]) {
		cli_error(CMD, "the service ended the session with an error: %s", err);
		goto out;
	}
	rc = collect(c, o, fd, sum.write_into_file);
out:
	sonde_consumer__free(c);
	if (fd >= 0)
		close(fd);
	free(cfg);
	return rc;
}

static int cmd_trace(int argc, char **argv)
{
	struct opts o = {0};
	int r = parse_args(argc, argv, &o);

	if (r < 0)
		return CLI_OK; /* --help */
	if (r || (r = check_args(&o)))
		return r;
	if (o.n_triggers)
		return run_triggers(&o);
	if (o.clone)
		return run_clone(&o);
	return o.query ? run_query(&o) : run_trace(&o);
}

SONDE_COMMAND("trace", "record a trace from a Perfetto-compatible tracing service", cmd_trace)
