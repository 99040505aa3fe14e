/* Multi-machine tracing, the host's side (docs/service.md, "Many machines"): relay
 * connections, the identity they vouch for (SetPeerIdentity), machine ids, and the
 * RelayPort service (InitRelay, SyncClock) by which a relay tells its machine's
 * SystemInfo and clocks. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/vm_sockets.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "ipc/protos.h"
#include "service/internal.h"

struct svc_machine *sonde__machine_get(struct svc *s, uint32_t id)
{
	return id && id <= s->nmachines ? &s->machines[id - 1] : NULL;
}

const char *sonde__machine_name_of(struct svc *s, const struct conn *c)
{
	const struct svc_machine *m = sonde__machine_get(s, c->machine_id);

	if (!c->machine_id)
		return s->machine_name ? s->machine_name : "";
	return m && m->name ? m->name : "";
}

/* Without a hint, the peer's address less its port stands for the machine, as in
 * Perfetto's service: every relay connection from one address is one machine. */
static void peer_host(int fd, char *out, size_t n)
{
	struct sockaddr_storage sa;
	socklen_t len = sizeof(sa);
	char a[INET6_ADDRSTRLEN] = "";

	snprintf(out, n, "unknown");
	if (getpeername(fd, (struct sockaddr *)&sa, &len) < 0)
		return;
	if (sa.ss_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)&sa)->sin_addr, a, sizeof(a));
	else if (sa.ss_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&sa)->sin6_addr, a, sizeof(a));
	if (a[0])
		snprintf(out, n, "addr:%s", a);
	else if (sa.ss_family == AF_VSOCK)
		snprintf(out, n, "vsock:%u", ((struct sockaddr_vm *)&sa)->svm_cid);
}

static struct svc_machine *machine_for(struct svc *s, const char *hint)
{
	for (size_t i = 0; i < s->nmachines; i++)
		if (!strcmp(s->machines[i].hint, hint))
			return &s->machines[i];
	if (s->nmachines == SVC_MAX_MACHINES)
		return NULL;
	if (!s->machines && !(s->machines = sonde__calloc(SVC_MAX_MACHINES, sizeof(*s->machines))))
		return NULL;
	struct svc_machine *m = &s->machines[s->nmachines];
	if (!(m->hint = sonde__strdup(hint)))
		return NULL;
	m->id = (uint32_t)++s->nmachines;
	return m;
}

static void ignore_identity(const struct conn *c, const char *why)
{
	sonde_debug("connection %llu: SetPeerIdentity ignored: %s", (unsigned long long)c->id, why);
}

void sonde__machine_peer_identity(struct svc *s, struct conn *c, const struct ipc_frame *f)
{
	char hint[IPC_MAX_PEER_STRING + 1], *name = NULL;
	struct svc_machine *m;

	/* only a relay may vouch for a peer: anyone else would claim to be root */
	if (!c->relay_conn)
		return ignore_identity(c, "not a relay connection (see sonded --relay-socket)");
	if (c->identity_seen)
		return ignore_identity(c, "the connection already has one");
	c->identity_seen = true;
	if (c->bound || c->relay_bound)
		return ignore_identity(c, "it must come before BindService");
	if (f->machine_id_hint && f->machine_id_hint_len) {
		memcpy(hint, f->machine_id_hint, f->machine_id_hint_len);
		hint[f->machine_id_hint_len] = '\0';
	} else {
		peer_host(c->ch.fd, hint, sizeof(hint));
	}
	if (f->machine_name &&
	    !(name = sonde__svc_strndup((const uint8_t *)f->machine_name, f->machine_name_len)))
		goto refuse;
	if (!(m = machine_for(s, hint)))
		goto refuse;
	if (name || !m->name) {
		sonde__free(m->name);
		m->name = name ? name : sonde__strdup("");
		name = NULL;
	}
	c->machine_id = m->id;
	if (f->has_peer_uid) {
		c->vouched = true;
		c->ch.peer_uid = (uid_t)f->peer_uid;
		c->ch.peer_pid = f->has_peer_pid && f->peer_pid > 0 ? f->peer_pid : 0;
	}
	sonde_debug("connection %llu: relayed from machine %u \"%s\"%s", (unsigned long long)c->id,
		    m->id, m->name ? m->name : "", c->vouched ? "" : " (no uid: unknown)");
	return;
refuse:
	/* a relayed peer must not pass for one of the host's: without a machine, it goes */
	sonde__free(name);
	sonde_warn("connection %llu: no room for another machine (%d): closing",
		   (unsigned long long)c->id, SVC_MAX_MACHINES);
	c->dead = true;
}

/* ------------------------------------------------------------------ RelayPort */

static int init_relay(struct svc *s, struct req *r, struct svc_machine *m)
{
	struct relay_init_req q;

	if (sonde__relay_init_req_decode(r->args, r->args_len, &q) < 0)
		return -SONDE_E_FORMAT;
	if (q.has_system_info) {
		uint8_t *si = sonde__malloc(q.si.raw_len ? q.si.raw_len : 1);
		if (!si)
			return -ENOMEM;
		memcpy(si, q.si.raw, q.si.raw_len);
		sonde__free(m->sysinfo);
		m->sysinfo = si;
		m->sysinfo_len = q.si.raw_len;
		sonde_info("machine %u \"%s\": %.*s %.*s, %u CPUs", m->id, m->name ? m->name : "",
			   (int)q.si.sysname.len, q.si.sysname.s ? q.si.sysname.s : "",
			   (int)q.si.release.len, q.si.release.s ? q.si.release.s : "",
			   q.si.num_cpus);
	}
	return sonde__svc_reply(r, NULL, false);
}

static int sync_clock(struct svc *s, struct req *r, struct svc_machine *m)
{
	struct svc_synced x;
	struct relay_sync_req q;

	/* the host's clocks first: the estimate's error is the time from the receipt to here */
	x.n_host = sonde__relay_clocks_read(x.host, RELAY_MAX_CLOCKS);
	if (sonde__relay_sync_req_decode(r->args, r->args_len, &q) < 0)
		return -SONDE_E_FORMAT;
	x.phase = q.phase;
	x.n_client = q.n_clocks;
	memcpy(x.client, q.clocks, q.n_clocks * sizeof(q.clocks[0]));
	if (m->nsynced == SVC_SYNCED_CLOCKS)
		memmove(&m->synced[0], &m->synced[1],
			(SVC_SYNCED_CLOCKS - 1) * sizeof(m->synced[0]));
	else
		m->nsynced++;
	m->synced[m->nsynced - 1] = x;
	m->sync_gen++;
	(void)s;
	return sonde__svc_reply(r, NULL, false);
}

int sonde__machine_relay_dispatch(struct svc *s, struct req *r, uint32_t method)
{
	struct svc_machine *m = sonde__machine_get(s, r->c->machine_id);

	/* a relay that did not say which machine it is has nothing to describe */
	if (!m) {
		sonde_debug("connection %llu: RelayPort call without SetPeerIdentity",
			    (unsigned long long)r->c->id);
		return -EACCES;
	}
	if (method == PF_RELAY_INIT_RELAY)
		return init_relay(s, r, m);
	if (method == PF_RELAY_SYNC_CLOCK)
		return sync_clock(s, r, m);
	return -ENOSYS;
}

/* ------------------------------------------------------------------ clocks */

static bool clock_of(const struct relay_clock *v, size_t n, uint32_t id, uint64_t *ts)
{
	for (size_t i = 0; i < n; i++)
		if (v[i].clock_id == id) {
			*ts = v[i].timestamp;
			return *ts != 0;
		}
	return false;
}

/* Perfetto's trace processor (ProtoTraceReader::CalculateClockOffsets): two consecutive
 * exchanges (client t1c, host t1h, client t2c, host t2h) are two round trips, one
 * started by each side; their offsets (t1c + t2c) / 2 - t1h and t2c - (t1h + t2h) / 2
 * are averaged over every pair less than 30 s apart on the relay's BOOTTIME. */
bool sonde__machine_clock_offset(const struct svc_machine *m, uint32_t clock_id, int64_t *off)
{
	const uint64_t round_ns = 30ull * 1000000000ull;
	int64_t sum = 0;
	size_t n = 0;

	for (size_t i = 1; i < m->nsynced; i++) {
		const struct svc_synced *a = &m->synced[i - 1], *b = &m->synced[i];
		uint64_t ba, bb, t1c, t1h, t2c, t2h;
		if (!clock_of(a->client, a->n_client, PF_CLOCK_BOOTTIME, &ba) ||
		    !clock_of(b->client, b->n_client, PF_CLOCK_BOOTTIME, &bb) ||
		    bb - ba >= round_ns)
			continue;
		if (!clock_of(a->client, a->n_client, clock_id, &t1c) ||
		    !clock_of(a->host, a->n_host, clock_id, &t1h) ||
		    !clock_of(b->client, b->n_client, clock_id, &t2c) ||
		    !clock_of(b->host, b->n_host, clock_id, &t2h))
			continue;
		sum += (int64_t)((t1c + t2c) / 2) - (int64_t)t1h;
		sum += (int64_t)t2c - (int64_t)((t1h + t2h) / 2);
		n += 2;
	}
	if (!n)
		return false;
	*off = sum / (int64_t)n;
	return true;
}

void sonde__machine_free_all(struct svc *s)
{
	for (size_t i = 0; i < s->nmachines; i++) {
		sonde__free(s->machines[i].hint);
		sonde__free(s->machines[i].name);
		sonde__free(s->machines[i].sysinfo);
	}
	sonde__free(s->machines);
	s->machines = NULL;
	s->nmachines = 0;
}
