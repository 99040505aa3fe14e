/* The service's security model (perfetto-wire.md §8, docs/service.md "Security"):
 * identity from SO_PEERCRED only, lockdown mode, connection, session, buffer and queue
 * limits, socket permissions, and the one file a client can make sonded create.
 *
 * Every open() the service performs on a client's behalf is here (sonde__sec_create_output); the
 * other files sonded opens are its own sockets and memfds. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>
#include <sonde/service.h>

#include "base/pb.h"
#include "ipc/addr.h"
#include "ipc/protos.h"
#include "ipc/smb.h"
#include "ipc/sock.h"
#include "service/internal.h"
#include "service/session.h"
#include "proc/perfauth.h"

enum {
	DEF_CONNS = 1000,
	DEF_CONNS_PER_UID = 256,
	DEF_SESSION_BUFFER_KB = 1024 * 1024,
	DEF_PENDING_KB = 16 * 1024,
	DEF_BUFFER_KB = 1024, /* a BufferConfig without size_kb (session.c alloc_buffers) */
	LOCKDOWN_CLEAR = 1,
	LOCKDOWN_SET = 2,
};

static uint32_t pick(unsigned v, uint32_t def, uint32_t max)
{
	return v == 0 || v > max ? def : v;
}

/* A quarter of the machine's memory: one uid can then not make the service the reason the
 * machine swaps, and a few uids tracing at once still fit. */
static uint64_t default_uid_buffer_bytes(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);

	if (pages <= 0 || psz <= 0)
		return 1ull << 30;
	return (uint64_t)pages * (uint64_t)psz / 4;
}

void sonde__sec_init(struct svc *s, const struct sonde_service_opts *o)
{
	struct svc_limits *l = &s->lim;
	uint64_t pend_kb;

	l->sessions = pick(o ? o->max_sessions : 0, SVC_MAX_SESSIONS, 1u << 16);
	l->sessions_per_uid =
		pick(o ? o->max_sessions_per_uid : 0, SVC_MAX_SESSIONS_PER_UID, 1u << 16);
	l->conns = pick(o ? o->max_connections : 0, DEF_CONNS, 1u << 20);
	l->conns_per_uid = pick(o ? o->max_connections_per_uid : 0, DEF_CONNS_PER_UID, 1u << 20);
	l->buffers_per_session = pick(o ? o->max_buffers_per_session : 0,
				      SVC_MAX_BUFFERS_PER_SESSION, SVC_MAX_BUFFERS_PER_SESSION);
	l->session_buffer_bytes =
		(o && o->max_session_buffer_kb ? o->max_session_buffer_kb : DEF_SESSION_BUFFER_KB) *
		1024ull;
	l->uid_buffer_bytes = o && o->max_uid_buffer_kb ? o->max_uid_buffer_kb * 1024ull
							: default_uid_buffer_bytes();
	l->smb_bytes =
		pick(o ? o->max_smb_kb : 0, SMB_SVC_MAX_SIZE / 1024, SMB_SVC_MAX_SIZE / 1024) *
		1024ull;
	if (l->smb_bytes < SMB_DEFAULT_PAGE_SIZE)
		l->smb_bytes = SMB_DEFAULT_PAGE_SIZE;
	/* ReadBuffers pauses at SVC_READ_PAUSE_BYTES unsent: the cap must sit above that */
	pend_kb = o && o->max_pending_kb ? o->max_pending_kb : DEF_PENDING_KB;
	l->pending_bytes = pend_kb * 1024;
	if (l->pending_bytes < SVC_READ_PAUSE_BYTES + (1u << 20))
		l->pending_bytes = SVC_READ_PAUSE_BYTES + (1u << 20);
	s->lockdown = o && o->lockdown;
	l->handshake_ns = (o && o->remote_handshake_ms ? o->remote_handshake_ms
						       : SVC_REMOTE_HANDSHAKE_MS) *
			  1000000ull;
	l->stall_ns =
		(o && o->stall_timeout_ms ? o->stall_timeout_ms : SVC_FILE_STALL_MS) * 1000000ull;
}

/* ------------------------------------------------------------------ identity */

/* A pidfd of the process that connected: SO_PEERPIDFD names exactly that process (it may
 * have exited since); before Linux 6.5, pidfd_open of its SO_PEERCRED pid, which names
 * whatever holds that pid now (sonde__perfauth_consumer_caps then requires its ids to match). */
static int peer_pidfd(int fd, pid_t pid)
{
	int pidfd = -1;
	socklen_t len = sizeof(pidfd);

	if (getsockopt(fd, SOL_SOCKET, SVC_SO_PEERPIDFD, &pidfd, &len) == 0)
		return len == sizeof(pidfd) ? pidfd : -1;
	/* only a kernel without the option may fall back: after another failure (the peer
	 * is gone) the pid may already name someone else */
	if (errno != ENOPROTOOPT)
		return -1;
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

void sonde__sec_peer_caps(int fd, pid_t pid, uid_t uid, gid_t gid, bool *known, uint64_t *caps,
			  uint64_t *pid_start)
{
	struct perfauth_consumer pc = {.uid = uid, .gid = gid, .pid = pid};
	int pidfd = peer_pidfd(fd, pid);

	sonde__perfauth_consumer_caps(pidfd, pid, &pc);
	if (pidfd >= 0)
		close(pidfd);
	*known = pc.caps_known;
	*caps = pc.cap_eff;
	*pid_start = pc.pid_start;
}

int sonde__sec_peer_identity(struct conn *c, int fd)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (!sonde__ipc_is_unix(fd)) {
		/* TCP or vsock: the kernel knows no credentials of the peer (SO_PEERCRED would
		 * answer the overflow uid, a real user's); a consumer gets no capabilities */
		c->remote = true;
		c->ch.peer_uid = (uid_t)-1;
		c->ch.peer_pid = 0;
		c->peer_gid = (uint32_t)-1;
		return 0;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
		return -errno;
	if (len != sizeof(cr))
		return -EPROTO;
	c->ch.peer_uid = cr.uid;
	c->ch.peer_pid = cr.pid;
	c->peer_gid = cr.gid;
	/* what linux.perf may do for this peer as a consumer (perfauth.h) */
	if (!c->is_producer)
		sonde__sec_peer_caps(fd, cr.pid, cr.uid, cr.gid, &c->caps_known, &c->cap_eff,
				     &c->pid_start);
	return 0;
}

bool sonde__sec_admit_conn(const struct svc *s, uid_t uid, bool relay)
{
	size_t total = 0, mine = 0;

	for (size_t i = 0; i < s->nconns; i++) {
		const struct conn *c = s->conns[i];
		/* sonded's own probes take no one's quota */
		if (c->dead || c->trusted_probes)
			continue;
		total++;
		/* relays have their own quota: plain remote peers, which share the unknown
		 * uid's, cannot fill it (nor can a relay's producers fill a local uid's) */
		mine += relay ? c->relay_conn : !c->relay_conn && c->ch.peer_uid == uid;
	}
	if (total >= s->lim.conns) {
		sonde_warn("refusing a connection of uid %u: %zu connections (the limit)",
			   (unsigned)uid, total);
		return false;
	}
	if (mine >= s->lim.conns_per_uid) {
		if (relay)
			sonde_warn("refusing a relay's connection: the relay sockets have %zu "
				   "(their limit)",
				   mine);
		else
			sonde_warn("refusing a connection of uid %u: it has %zu (the per-uid limit)",
				   (unsigned)uid, mine);
		return false;
	}
	return true;
}

bool sonde__sec_handshake_done(const struct conn *c)
{
	bool port = c->is_producer ? c->p.initialized || c->relay_bound : c->bound;

	return port && (!c->relay_conn || c->identity_seen);
}

/* ------------------------------------------------------------------ sockets */

static const unsigned default_mode[3] = {0666, 0666, 0600};

int sonde__sec_listen(const struct sonde_service_opts *o, int which, const char *name,
		      struct ipc_bound *bound)
{
	unsigned mode =
		o && o->socket_mode[which] ? o->socket_mode[which] & 07777 : default_mode[which];
	bool gid_set = o && o->socket_gid_set[which];
	struct ipc_addr a;

	/* the connector passes descriptors: AF_UNIX only */
	if (which == SONDE_SOCKET_CONNECTOR &&
	    (sonde__ipc_addr_parse(name, strlen(name), &a) < 0 || a.kind != IPC_ADDR_UNIX))
		return -EPROTONOSUPPORT;

	return sonde__ipc_listen_perm(
		name, which == SONDE_SOCKET_CONNECTOR ? SOCK_SEQPACKET : SOCK_STREAM, mode,
		gid_set ? (long)o->socket_gid[which] : -1, bound);
}

/* ------------------------------------------------------------------ lockdown */

int sonde__sec_check_producer(struct svc *s, struct req *r)
{
	struct conn *c = r->c;
	char msg[160];

	if (!s->lockdown || ((!c->remote || c->vouched) && c->ch.peer_uid == s->uid))
		return 0;
	if (c->remote && !c->vouched)
		snprintf(msg, sizeof(msg),
			 "lockdown mode: producers must run as uid %u (a remote one's uid is "
			 "unknown)",
			 (unsigned)s->uid);
	else
		snprintf(msg, sizeof(msg),
			 "lockdown mode: producers must run as uid %u (this one is uid %u)",
			 (unsigned)s->uid, (unsigned)c->ch.peer_uid);
	sonde_warn("refusing producer pid %d: %s", (int)c->ch.peer_pid, msg);
	struct ipc_frame e = {.request_id = r->id,
			      .msg = IPC_MSG_REQUEST_ERROR,
			      .name = msg,
			      .name_len = strlen(msg)};
	sonde__ipc_chan_send(&c->ch, &e, -1);
	c->dead = true;
	return -EACCES;
}

/* Producers already connected when lockdown is set would otherwise keep receiving
 * instances: they are disconnected, as they would be refused if they came now. */
static void drop_foreign_producers(struct svc *s)
{
	for (size_t i = 0; i < s->nconns; i++) {
		struct conn *c = s->conns[i];
		if (c->is_producer && !c->dead && c->ch.peer_uid != s->uid) {
			sonde_warn("lockdown: disconnecting producer \"%s\" of uid %u",
				   c->p.name ? c->p.name : "", (unsigned)c->ch.peer_uid);
			c->dead = true;
		}
	}
}

const char *sonde__sec_apply_lockdown(struct svc *s, struct conn *c, const uint8_t *cfg, size_t len)
{
	struct pb_reader r = pb_reader_init(cfg, len);
	struct pb_field f;
	uint64_t op = 0;

	while (sonde__pb_next(&r, &f) > 0)
		if (f.num == PF_TRACE_CONFIG_LOCKDOWN_MODE && f.wire == PB_VARINT)
			op = f.u;
	if (op != LOCKDOWN_SET && op != LOCKDOWN_CLEAR)
		return NULL;
	if (c->ch.peer_uid != s->uid)
		return "lockdown_mode can only be changed by a consumer running as the service's "
		       "uid";
	s->lockdown = op == LOCKDOWN_SET;
	sonde_info("lockdown mode %s by consumer pid %d", s->lockdown ? "set" : "cleared",
		   (int)c->ch.peer_pid);
	if (s->lockdown)
		drop_foreign_producers(s);
	return NULL;
}

/* ------------------------------------------------------------------ sessions */

/* The buffer memory the sessions of uid hold: detached sessions and clones too, since
 * they keep their buffers until freed. */
static uint64_t uid_buffer_bytes(const struct svc *s, int32_t uid)
{
	uint64_t n = 0;

	for (size_t i = 0; i < s->nsessions; i++) {
		const struct session *o = s->sessions[i];
		for (size_t k = 0; o->consumer_uid == uid && k < o->nbufs; k++)
			n += o->bufs[k]->size;
	}
	return n;
}

/* The budget of uid, refilled to now: a uid not tracked gets a full one, in the slot of
 * an untracked uid's, else of the fullest (a full bucket is the same as none). */
static struct svc_idbudget *id_budget(struct svc *s, uid_t uid)
{
	uint64_t now = sonde__svc_now(s);
	struct svc_idbudget *b = NULL;

	for (size_t i = 0; i < s->nidb; i++) {
		struct svc_idbudget *e = &s->idb[i];
		uint64_t add = (now - e->refill_ns) * SVC_IDS_PER_S / 1000000000ull;
		if (add) {
			e->tokens = add >= SVC_IDS_BURST - e->tokens ? SVC_IDS_BURST
								   : e->tokens + (uint32_t)add;
			e->refill_ns = now;
		}
		if (e->uid == uid)
			return e;
		if (!b || e->tokens > b->tokens)
			b = e;
	}
	if (s->nidb < SVC_MAX_IDBUDGETS)
		b = &s->idb[s->nidb++];
	b->uid = uid;
	b->tokens = SVC_IDS_BURST;
	b->refill_ns = now;
	return b;
}

const char *sonde__sec_check_session(struct svc *s, const struct session *ss, const uint64_t *bufs,
				     size_t nbufs)
{
	size_t per_uid = 0;
	uint64_t total = 0;

	for (size_t i = 0; i < s->nsessions; i++)
		per_uid += s->sessions[i]->consumer_uid == ss->consumer_uid;
	if (per_uid >= s->lim.sessions_per_uid)
		return "too many tracing sessions for this uid (the per-uid limit)";
	if (s->nsessions >= s->lim.sessions)
		return "too many tracing sessions (the service-wide limit)";
	if (nbufs > s->lim.buffers_per_session)
		return "too many buffers in the trace config (the per-session limit)";
	for (size_t i = 0; i < nbufs; i++) {
		uint64_t kb = bufs[2 * i] ? bufs[2 * i] : DEF_BUFFER_KB;
		total += kb > (1ull << 40) ? (1ull << 40) : kb;
	}
	if (total * 1024 > s->lim.session_buffer_bytes)
		return "the trace config's buffers exceed the per-session memory limit";
	if (total * 1024 > s->lim.uid_buffer_bytes ||
	    uid_buffer_bytes(s, ss->consumer_uid) > s->lim.uid_buffer_bytes - total * 1024)
		return "the trace config's buffers and those of this uid's other sessions "
		       "(detached ones included) exceed the per-uid memory limit";
	/* checked last: only a session that is created takes ids from the budget */
	if ((uid_t)ss->consumer_uid != s->uid) {
		struct svc_idbudget *b = id_budget(s, (uid_t)ss->consumer_uid);
		if (b->tokens < nbufs)
			return "this uid took too many buffer ids lately (the per-uid rate "
			       "limit); retry later";
		b->tokens -= (uint32_t)nbufs;
	}
	return NULL;
}

bool sonde__sec_pending_ok(struct svc *s, struct conn *c, size_t more)
{
	size_t n = ipc_chan_tx_pending(&c->ch) + more;

	for (size_t i = 0; c->is_producer && i < c->p.npending; i++)
		n += c->p.pending[i].len;
	if (n <= s->lim.pending_bytes)
		return true;
	if (!c->dead)
		sonde_warn("connection %llu (pid %d): %zu bytes unsent, over the limit; closing",
			   (unsigned long long)c->id, (int)c->ch.peer_pid, n);
	c->dead = true;
	return false;
}

/* ------------------------------------------------------------------ files */

/* The thread's file-system identity. setfsuid/setfsgid act on the calling thread only,
 * and a change of fsuid away from 0 drops the file capabilities (CAP_DAC_OVERRIDE...) for
 * the duration. Supplementary groups are cleared with the raw syscall (per thread too;
 * the libc wrapper would change every thread). */
struct fsid {
	uid_t uid;
	gid_t gid;
	gid_t groups[64];
	int ngroups;
};

static int become(const struct conn *c, struct fsid *saved)
{
	saved->uid = geteuid(); /* what the fs ids follow until changed */
	saved->gid = getegid();
	saved->ngroups = getgroups(64, saved->groups);
	if (saved->ngroups < 0)
		return -errno;
	if (syscall(SYS_setgroups, 0, NULL) < 0)
		return -errno;
	saved->gid = (gid_t)setfsgid(c->peer_gid);
	saved->uid = (uid_t)setfsuid(c->ch.peer_uid);
	/* setfsuid reports success only through a second call returning the new value */
	if ((uid_t)setfsuid(c->ch.peer_uid) != c->ch.peer_uid ||
	    (gid_t)setfsgid(c->peer_gid) != c->peer_gid)
		return -EPERM;
	return 0;
}

static void restore(const struct fsid *saved)
{
	setfsuid(saved->uid);
	setfsgid(saved->gid);
	if (saved->ngroups >= 0)
		syscall(SYS_setgroups, (size_t)saved->ngroups, saved->groups);
}

int sonde__sec_create_output(const struct conn *c, const char *path)
{
	const int flags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
	struct fsid saved = {.ngroups = -1};
	int fd, rc = 0;

	/* A relative path would resolve against sonded's working directory. */
	if (path[0] != '/')
		return -EINVAL;
	/* A remote consumer is nobody on this machine: it creates no file here. */
	if (c->remote)
		return -EPERM;
	/* A consumer of another uid can create only what it could create itself, so that it
	 * cannot make the service write into a directory it has no access to. */
	bool other = c->ch.peer_uid != geteuid();
	if (other && (rc = become(c, &saved)) < 0) {
		restore(&saved);
		return rc;
	}
	fd = open(path, flags, 0600);
	rc = fd < 0 ? -errno : 0;
	if (other)
		restore(&saved);
	return fd < 0 ? rc : fd;
}

/* ------------------------------------------------------------------ shared memory */

int sonde__sec_check_smb(const struct svc *s, int fd, size_t page, size_t *size)
{
	size_t len;
	int err = sonde__smb_check_fd(fd, &len);

	if (err)
		return err;
	if (!smb_geometry_abi_ok(len, page) || !smb_geometry_svc_ok(len, page))
		return (uint64_t)len > s->lim.smb_bytes ? -EFBIG : -EINVAL;
	if ((uint64_t)len > s->lim.smb_bytes)
		return -EFBIG;
	/* the mapping the service will make, tried before anything depends on it */
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return -ENODEV;
	munmap(m, len);
	*size = len;
	return 0;
}
