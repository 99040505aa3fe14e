/* The probes' core (probes.h): one producer connection, the data-source registry, the
 * reconnect backoff, and whom each instance acts for.
 *
 * Once connected, the client library reconnects by itself (opts.reconnect: instances
 * stopped, 100 ms doubling to 5 s, data sources registered again); the core's own backoff,
 * with the same steps, covers the first connection and a connection that failed for good
 * (a protocol error). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <sonde/client.h>
#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "probes/probes.h"

/* The registry: one line per data source. */
static const struct probe_source_ops *const sources[] = {
	&sonde__perfds_source,
	&sonde__ftrace_source,
	&sonde__procstats_source,
	&sonde__sysstats_source,
};
enum { NSOURCES = sizeof(sources) / sizeof(sources[0]) };

enum {
	BACKOFF_MIN_MS = 100,
	BACKOFF_MAX_MS = 5000,
	CONNECT_TIMEOUT_MS = 2000,
};

struct probes;

/* What the client library calls back with: the core and the source. */
struct slot {
	struct probes *core;
	const struct probe_source_ops *ops;
	void *state;
};

struct probes {
	char *socket;
	enum probes_targets targets;
	bool trust_parent;
	struct perfauth_consumer self; /* the probes' own credentials (--targets own) */
	struct sonde_producer *prod;
	uint32_t backoff_ms;
	uint64_t next_connect_ms;
	bool warned_down;
	bool done; /* the inherited channel is gone: it cannot be opened again */
	struct slot slots[NSOURCES];
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- callbacks from the client library, forwarded to the source ---- */

static void cb_setup(void *ctx, uint64_t id, const void *cfg, size_t len)
{
	struct slot *s = ctx;

	if (s->ops->setup)
		s->ops->setup(s->state, id, cfg, len);
}

static void cb_start(void *ctx, uint64_t id, const void *cfg, size_t len)
{
	struct slot *s = ctx;

	if (s->ops->start)
		s->ops->start(s->state, id, cfg, len);
}

static void cb_stop(void *ctx, uint64_t id)
{
	struct slot *s = ctx;

	if (s->ops->stop)
		s->ops->stop(s->state, id);
}

static void cb_flush(void *ctx, uint64_t id)
{
	struct slot *s = ctx;

	if (s->ops->flush)
		s->ops->flush(s->state, id);
}

static void cb_clear(void *ctx, uint64_t id)
{
	struct slot *s = ctx;

	if (s->ops->clear_incremental_state)
		s->ops->clear_incremental_state(s->state, id);
}

/* ---- the connection ---- */

/* Whether the service is the parent that started us (sonded and its supervised probes):
 * a connected socket's SO_PEERCRED names the process that called listen() at the other
 * end, the service. The parent cannot be replaced by another process with its pid while we
 * live (we would be reparented first, and getppid() would change). */
static bool service_is_parent(int fd)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 || len != sizeof(cr))
		return false;
	return cr.pid == getppid() && (cr.uid == 0 || cr.uid == geteuid());
}

static void disconnect(struct probes *p)
{
	for (size_t i = 0; i < NSOURCES; i++)
		if (p->slots[i].ops->disconnected)
			p->slots[i].ops->disconnected(p->slots[i].state);
	sonde_producer__free(p->prod);
	p->prod = NULL;
}

/* The connection is a socket inherited from whoever started us ("fd:N"), not one found
 * through a name, which another process may have bound or which may lead over TCP. */
static bool inherited(const struct probes *p)
{
	const char *s = p->socket ? p->socket : getenv("SONDE_PRODUCER_FD") ? "fd:" : "";

	return !strncmp(s, "fd:", 3);
}

/* Whether to believe sonded_consumer now: only over the channel our parent made for us
 * (a socketpair's SO_PEERCRED names the process that made it), asked again for every
 * instance. */
static bool trusted(const struct probes *p)
{
	int fd = p->prod ? sonde_producer__fd(p->prod) : -1;

	return p->trust_parent && inherited(p) && fd >= 0 && service_is_parent(fd);
}

static void schedule_reconnect(struct probes *p)
{
	p->next_connect_ms = now_ms() + p->backoff_ms;
	p->backoff_ms = p->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : p->backoff_ms * 2;
}

static int connect_service(struct probes *p)
{
	struct sonde_producer_opts o = {
		.sz = sizeof(o),
		.name = "sonde.probes",
		.socket = p->socket,
		.smb_size_hint = 1 << 20,
		.stall_ms = 100,
		.timeout_ms = CONNECT_TIMEOUT_MS,
		.reconnect = true,
	};
	int rc = 0;

	p->prod = sonde_producer__new(&o);
	if (!p->prod)
		return -errno;
	if (p->trust_parent && !trusted(p))
		sonde_warn("probes: the service at %s is not our parent over a channel it made "
			   "for us: the consumer credentials it sends are ignored, and we act for "
			   "nobody in particular",
			   sonde_producer__socket_path(&o));
	for (size_t i = 0; i < NSOURCES && rc == 0; i++) {
		struct sonde_data_source_cbs cbs = {
			.sz = sizeof(cbs),
			.setup = cb_setup,
			.start = cb_start,
			.stop = cb_stop,
			.flush = cb_flush,
			.clear_incremental_state = cb_clear,
			.ctx = &p->slots[i],
			.will_notify_on_stop = true,
			.handles_incremental_state_clear =
				sources[i]->handles_incremental_state_clear,
		};
		rc = sonde_producer__register_data_source(p->prod, sources[i]->name, &cbs);
	}
	if (rc < 0)
		disconnect(p);
	return rc;
}

static void try_connect(struct probes *p)
{
	int rc;

	if (p->prod || now_ms() < p->next_connect_ms)
		return;
	rc = connect_service(p);
	if (rc < 0 && inherited(p)) {
		sonde_error("probes: cannot use the inherited connection %s: %s",
			    p->socket ? p->socket : "$SONDE_PRODUCER_FD", sonde_strerror(rc));
		p->done = true;
		return;
	}
	if (rc == 0) {
		sonde_info("probes: connected to the service%s",
			   trusted(p) ? " (our parent sonded)" : "");
		p->backoff_ms = BACKOFF_MIN_MS;
		p->warned_down = false;
		return;
	}
	if (!p->warned_down)
		sonde_warn("probes: cannot connect to the service: %s; retrying",
			   sonde_strerror(rc));
	p->warned_down = true;
	schedule_reconnect(p);
}

/* ---- public ---- */

static void read_self(struct perfauth_consumer *c)
{
	int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0);

	*c = (struct perfauth_consumer){.uid = geteuid(), .gid = getegid(), .pid = getpid()};
	sonde__perfauth_consumer_caps(pidfd, c->pid, c);
	if (pidfd >= 0)
		close(pidfd);
}

/* Not root: say at once what the kernel will refuse, and which capability would lift it. */
static void warn_unprivileged(const struct perfauth_consumer *self)
{
	bool ptrace = self->caps_known && ((self->cap_eff >> PERFAUTH_CAP_SYS_PTRACE) & 1);
	bool perfmon = self->caps_known && ((self->cap_eff >> PERFAUTH_CAP_PERFMON) & 1);

	if (self->uid == 0 || (ptrace && perfmon))
		return;
	sonde_warn("probes: running as uid %u without %s%s%s: linux.perf can profile only this "
		   "user's own processes, and kernel frames only at kernel.perf_event_paranoid "
		   "<= 1",
		   (unsigned)self->uid, perfmon ? "" : "CAP_PERFMON",
		   !perfmon && !ptrace ? " and " : "", ptrace ? "" : "CAP_SYS_PTRACE");
}

struct probes *sonde__probes_new(const struct probes_opts *o)
{
	struct probes *p = sonde__calloc(1, sizeof(*p));
	size_t i;

	if (!p)
		return NULL;
	p->targets = o ? o->targets : PROBES_TARGETS_OWN;
	p->trust_parent = o && o->trust_parent;
	p->backoff_ms = BACKOFF_MIN_MS;
	if (o && o->socket && !(p->socket = sonde__strdup(o->socket)))
		goto fail;
	read_self(&p->self);
	warn_unprivileged(&p->self);
	for (i = 0; i < NSOURCES; i++) {
		p->slots[i] = (struct slot){p, sources[i], NULL};
		if (!(p->slots[i].state = sources[i]->create(p)))
			goto fail;
	}
	return p;
fail:
	sonde__probes_free(p);
	return NULL;
}

void sonde__probes_free(struct probes *p)
{
	if (!p)
		return;
	if (p->prod)
		disconnect(p);
	for (size_t i = 0; i < NSOURCES; i++)
		if (p->slots[i].state)
			p->slots[i].ops->destroy(p->slots[i].state);
	sonde__free(p->socket);
	sonde__free(p);
}

size_t sonde__probes_pollfds(struct probes *p, struct pollfd *fds, size_t cap)
{
	size_t n = 0;

	if (!p->prod || cap == 0)
		return 0;
	if (sonde_producer__fd(p->prod) >= 0) /* -1 while the library reconnects */
		fds[n++] = (struct pollfd){
			.fd = sonde_producer__fd(p->prod),
			.events = POLLIN | (sonde_producer__want_write(p->prod) ? POLLOUT : 0)};
	for (size_t i = 0; i < NSOURCES; i++)
		if (p->slots[i].ops->pollfds)
			n += p->slots[i].ops->pollfds(p->slots[i].state, fds + n, cap - n);
	return n;
}

int sonde__probes_timeout_ms(struct probes *p)
{
	int t = BACKOFF_MAX_MS, r;

	if (!p->prod) {
		uint64_t now = now_ms();
		return p->next_connect_ms > now ? (int)(p->next_connect_ms - now) : 0;
	}
	if ((r = sonde_producer__timeout_ms(p->prod)) >= 0 && r < t)
		t = r;
	for (size_t i = 0; i < NSOURCES; i++) {
		int s = p->slots[i].ops->timeout_ms ? p->slots[i].ops->timeout_ms(p->slots[i].state)
						    : -1;
		if (s >= 0 && s < t)
			t = s;
	}
	return t;
}

bool sonde__probes_done(const struct probes *p)
{
	return p->done;
}

void sonde__probes_process(struct probes *p, const struct pollfd *fds, size_t n)
{
	if (p->done)
		return;
	if (!p->prod) {
		try_connect(p);
		return;
	}
	int rc = sonde_producer__process(p->prod);
	if (rc < 0 && inherited(p)) {
		/* the service that made the channel closed it, or is gone: whoever started us
		 * starts us again with a new one */
		sonde_info("probes: the service closed our connection (%s): exiting",
			   sonde_strerror(rc));
		disconnect(p);
		p->done = true;
		return;
	}
	if (rc < 0) {
		sonde_warn("probes: the connection to the service failed (%s); reconnecting",
			   sonde_strerror(rc));
		disconnect(p);
		p->warned_down = true;
		schedule_reconnect(p);
		return;
	}
	for (size_t i = 0; i < NSOURCES; i++)
		if (p->slots[i].ops->process)
			p->slots[i].ops->process(p->slots[i].state, fds, n);
}

/* The last DataSourceConfig.sonded_consumer, decoded; false when there is none or it is
 * malformed. */
static bool sonded_consumer(const void *cfg, size_t len, struct perfauth_consumer *who)
{
	struct pb_reader r = pb_reader_init(cfg, len);
	struct pb_field f, g;
	bool found = false;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num != PF_DS_CONFIG_SONDED_CONSUMER || f.wire != PB_LEN)
			continue;
		struct pb_reader s = pb_sub(&f);
		bool uid = false, gid = false, pid = false;
		*who = (struct perfauth_consumer){0};
		while (sonde__pb_next(&s, &g) > 0) {
			if (g.wire != PB_VARINT)
				continue;
			if (g.num == PF_SONDED_CONSUMER_UID && g.u <= UINT32_MAX)
				who->uid = (uid_t)g.u, uid = true;
			else if (g.num == PF_SONDED_CONSUMER_GID && g.u <= UINT32_MAX)
				who->gid = (gid_t)g.u, gid = true;
			else if (g.num == PF_SONDED_CONSUMER_PID && g.u <= INT32_MAX)
				who->pid = (pid_t)g.u, pid = true;
			else if (g.num == PF_SONDED_CONSUMER_PID_START)
				who->pid_start = g.u;
			else if (g.num == PF_SONDED_CONSUMER_CAP_EFF)
				who->cap_eff = g.u, who->caps_known = true;
		}
		found = uid && gid && pid;
	}
	return found;
}

int sonde__probes_consumer(struct probes *p, const void *cfg, size_t len, struct perfauth_consumer *who,
		    bool *any, char *desc, size_t desc_len)
{
	*any = false;
	if (!trusted(p) && (p->trust_parent || p->targets == PROBES_TARGETS_NONE)) {
		/* started to serve sonded's consumers (or told to), but not told who this one
		 * is: nobody in particular, never our own rights */
		*who = (struct perfauth_consumer){
			.uid = (uid_t)-1, .gid = (gid_t)-1, .pid = -1, .anonymous = true};
		snprintf(desc, desc_len, "an unidentified consumer");
		return 0;
	}
	if (!trusted(p)) {
		*any = p->targets == PROBES_TARGETS_ANY;
		*who = p->self;
		if (*any)
			snprintf(desc, desc_len, "any consumer (--targets any)");
		else
			snprintf(desc, desc_len, "consumer uid %u (--targets own)",
				 (unsigned)who->uid);
		return 0;
	}
	if (!sonded_consumer(cfg, len, who)) {
		snprintf(desc, desc_len, "sonded sent no consumer credentials");
		return -EPERM;
	}
	/* The pid only serves Yama's descendant rule: it must still name the consumer's
	 * process (same start time), else no process descends from it. */
	if (!who->pid_start || sonde__perfauth_start_time(who->pid) != who->pid_start)
		who->pid = -1;
	snprintf(desc, desc_len, "consumer uid %u", (unsigned)who->uid);
	return 0;
}

struct sonde_trace_writer *sonde__probes_new_writer(struct probes *p, uint64_t id)
{
	if (!p->prod) {
		errno = ENOTCONN;
		return NULL;
	}
	return sonde_producer__new_writer(p->prod, id);
}

void *sonde__probes_source_state(struct probes *p, const struct probe_source_ops *ops)
{
	for (size_t i = 0; i < NSOURCES; i++)
		if (p->slots[i].ops == ops)
			return p->slots[i].state;
	return NULL;
}

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

enum {
	F_PACKET_TIMESTAMP = 8,
	F_PACKET_TIMESTAMP_CLOCK_ID = 58,
	F_PACKET_ANDROID_LOG = 39,
	CLOCK_MONOTONIC_ID = 3,
};

void sonde__probes_log(struct sonde_trace_writer *w, const char *tag, int prio, int pid,
		       const char *msg)
{
	struct buf b = BUF_INIT;

	if (!w)
		return;
	sonde__pb_put_varint(&b, F_PACKET_TIMESTAMP, clock_ns(CLOCK_MONOTONIC));
	sonde__pb_put_varint(&b, F_PACKET_TIMESTAMP_CLOCK_ID, CLOCK_MONOTONIC_ID);
	size_t a = sonde__pb_begin(&b, F_PACKET_ANDROID_LOG);
	size_t e = sonde__pb_begin(&b, 1);
	if (pid > 0)
		sonde__pb_put_varint(&b, 2, (uint64_t)pid);
	sonde__pb_put_varint(&b, 5, clock_ns(CLOCK_REALTIME)); /* log events are on REALTIME */
	sonde__pb_put_string(&b, 6, tag);
	sonde__pb_put_varint(&b, 7, (uint64_t)prio);
	sonde__pb_put_string(&b, 8, msg);
	sonde__pb_end(&b, e);
	sonde__pb_end(&b, a);
	/* a packet the SMB had no room for is lost; the writer counts it */
	if (!buf_error(&b))
		sonde_trace_writer__write_packet(w, b.data, b.len);
	sonde__buf_free(&b);
}
