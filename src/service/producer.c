/* ProducerPort (perfetto-wire.md §2): connection set-up, the shared memory buffer, the
 * async command stream, CommitData and SMB scraping. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "base/array.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "ipc/smb.h"
#include "service/flush.h"
#include "service/internal.h"
#include "service/session.h"

/* ------------------------------------------------------------------ SMB */

static int create_smb(struct producer *p, size_t size, size_t page);

static int map_smb(struct producer *p, int fd, size_t size, size_t page)
{
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	if (m == MAP_FAILED)
		return -errno;
	p->smb = m;
	p->smb_fd = fd;
	p->smb_size = size;
	p->page_size = page;
	p->num_pages = size / page;
	return 0;
}

/* A producer-provided SMB is adopted only if it is a memfd sealed against shrink, grow
 * and further sealing, so the producer cannot truncate it under the service. */
static bool adopt_smb(struct svc *s, struct producer *p, int fd)
{
	size_t size;

	if (sonde__sec_check_smb(s, fd, p->page_hint, &size) < 0)
		return false;
	return map_smb(p, fd, size, p->page_hint) == 0;
}

int sonde__producer_preassign_smb(struct conn *c, int fd, size_t size, size_t page, bool create)
{
	if (create)
		return create_smb(&c->p, size, page);
	return map_smb(&c->p, fd, size, page);
}

/* Whether the fd a producer offered at InitializeConnection is the very file the
 * connector handed over for it. */
static bool same_file(int a, int b)
{
	struct stat x, y;

	return fstat(a, &x) == 0 && fstat(b, &y) == 0 && x.st_dev == y.st_dev &&
	       x.st_ino == y.st_ino;
}

/* TraceConfig.producers[producer_name == name] sizes, in bytes (0 when unset). */
static void config_sizes(const struct session *ss, const char *name, size_t *page, size_t *size)
{
	struct pb_reader r = pb_reader_init(ss->config, ss->config_len);
	struct pb_field f, g;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num != PF_TRACE_CONFIG_PRODUCERS || f.wire != PB_LEN)
			continue;
		struct pb_reader pr = pb_sub(&f);
		bool match = false;
		uint64_t shm_kb = 0, page_kb = 0;
		while (sonde__pb_next(&pr, &g) > 0) {
			if (g.num == PF_PRODUCER_CONFIG_PRODUCER_NAME && g.wire == PB_LEN)
				match = name && g.len == strlen(name) &&
					!memcmp(g.ptr, name, g.len);
			else if (g.num == PF_PRODUCER_CONFIG_SHM_SIZE_KB && g.wire == PB_VARINT)
				shm_kb = g.u;
			else if (g.num == PF_PRODUCER_CONFIG_PAGE_SIZE_KB && g.wire == PB_VARINT)
				page_kb = g.u;
		}
		if (match) {
			*page = page_kb < (1u << 20) ? (size_t)page_kb * 1024 : 0;
			*size = shm_kb < (1u << 20) ? (size_t)shm_kb * 1024 : 0;
		}
	}
}

static int create_smb(struct producer *p, size_t size, size_t page)
{
	int fd = sonde__smb_create(size), rc;

	if (fd < 0)
		return fd;
	rc = map_smb(p, fd, size, page);
	if (rc < 0)
		close(fd);
	return rc;
}

int sonde__producer_ensure_smb(struct svc *s, struct conn *c, const struct session *ss)
{
	struct producer *p = &c->p;
	size_t page = 0, size = 0;
	struct buf b = BUF_INIT;
	int rc;

	if (p->smb || (p->emulated && p->setup_sent))
		return 0;
	config_sizes(ss, p->name, &page, &size);
	if (!page)
		page = p->page_hint;
	if (!size)
		size = p->size_hint;
	if (!page)
		page = SMB_DEFAULT_PAGE_SIZE;
	if (!size)
		size = SMB_DEFAULT_SIZE;
	if (page > SMB_SVC_MAX_PAGE_SIZE)
		page = SMB_SVC_MAX_PAGE_SIZE;
	if (size > s->lim.smb_bytes)
		size = s->lim.smb_bytes;
	if (!smb_geometry_svc_ok(size, page)) {
		page = SMB_DEFAULT_PAGE_SIZE;
		size = SMB_DEFAULT_SIZE < s->lim.smb_bytes ? SMB_DEFAULT_SIZE
							   : s->lim.smb_bytes / page * page;
	}
	if (p->emulated) {
		/* nothing to map: the producer keeps its chunks in its own memory and sends
		 * them inline; the page size still tells it the chunk geometry */
		p->page_size = page;
		p->num_pages = size / page;
		rc = 0;
	} else {
		rc = create_smb(p, size, page);
	}
	if (rc < 0) {
		sonde_error("producer %s: cannot create its shared memory: %s", p->name,
			    sonde_strerror(rc));
		return rc;
	}
	size_t m = sonde__pb_begin(&b, PF_ASYNC_CMD_SETUP_TRACING);
	sonde__pb_put_varint(&b, PF_SETUP_TRACING_PAGE_SIZE_KB, page / 1024);
	sonde__pb_end(&b, m);
	p->setup_sent = true;
	rc = sonde__producer_send_cmd(s, c, &b, !p->emulated);
	sonde__buf_free(&b);
	return rc;
}

void sonde__producer_allow_buffer(struct conn *c, uint16_t buf_id)
{
	struct producer *p = &c->p;

	for (size_t i = 0; i < p->nallowed; i++)
		if (p->allowed[i].buf_id == buf_id)
			return; /* another instance in the same buffer: the same permission */
	if (sonde__array_grow(&p->allowed, &p->allowed_cap, p->nallowed + 1,
			       sizeof(*p->allowed), 8) < 0)
		return;
	/* never 0, which marks an unbound writer; 2^32 permissions of one producer would
	 * take centuries at the service's id budget */
	if (++p->allow_gen == 0)
		p->allow_gen = 1;
	p->allowed[p->nallowed].buf_id = buf_id;
	p->allowed[p->nallowed].gen = p->allow_gen;
	p->nallowed++;
}

void sonde__producer_disallow_buffer(struct conn *c, uint16_t buf_id)
{
	struct producer *p = &c->p;

	for (size_t i = 0; i < p->nallowed; i++)
		if (p->allowed[i].buf_id == buf_id)
			p->allowed[i] = p->allowed[--p->nallowed];
}

/* The generation of the producer's permission to write into buf_id; 0 if it has none. */
static uint32_t allowed_gen(const struct producer *p, uint32_t buf_id)
{
	for (size_t i = 0; i < p->nallowed; i++)
		if (p->allowed[i].buf_id == buf_id)
			return p->allowed[i].gen;
	return 0;
}

void sonde__producer_bind_writer(struct conn *c, uint16_t writer, uint16_t buf_id)
{
	struct producer *p = &c->p;

	if (writer < 1 || writer > SMB_MAX_WRITER_ID)
		return;
	p->writer_buf[writer] = buf_id;
	p->writer_gen[writer] = buf_id ? allowed_gen(p, buf_id) : 0;
}

/* Whether writer, bound or not, may write into buf_id now. A bound writer only into the
 * buffer it was registered for and under the permission it was registered under: the SDK
 * commits a writer's last chunk when it replaces the writer, possibly after the session
 * ended, its buffers were freed and their id went to another session (perhaps another
 * user's) that this producer also serves. An unbound writer goes wherever the producer may
 * write (Perfetto's rule): the producer chose that target itself. */
static bool writer_may_write(const struct producer *p, uint32_t writer, uint32_t buf_id)
{
	uint32_t gen = allowed_gen(p, buf_id);

	if (!gen || writer < 1 || writer > SMB_MAX_WRITER_ID)
		return false;
	if (!p->writer_buf[writer])
		return true;
	return p->writer_buf[writer] == buf_id && p->writer_gen[writer] == gen;
}

/* ------------------------------------------------------------------ commands */

int sonde__producer_send_cmd(struct svc *s, struct conn *c, const struct buf *cmd, bool with_smb_fd)
{
	struct producer *p = &c->p;

	if (buf_error(cmd) < 0)
		return -ENOMEM;
	if (!sonde__sec_pending_ok(s, c, cmd->len))
		return -SONDE_E_LIMIT;
	if (p->cmd_stream) {
		int rc = sonde__svc_send_reply(c, p->cmd_req_id, true, true, cmd->data, cmd->len,
					with_smb_fd ? p->smb_fd : -1);
		sonde__svc_conn_update_events(s, c);
		return rc;
	}
	/* GetAsyncCommand not called yet: keep the commands in order until it is */
	struct pending_cmd *v = sonde__realloc(p->pending, (p->npending + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	p->pending = v;
	v[p->npending].data = sonde__malloc(cmd->len ? cmd->len : 1);
	if (!v[p->npending].data)
		return -ENOMEM;
	memcpy(v[p->npending].data, cmd->data, cmd->len);
	v[p->npending].len = cmd->len;
	v[p->npending].with_smb_fd = with_smb_fd;
	p->npending++;
	return 0;
}

static int get_async_command(struct svc *s, struct req *r)
{
	struct producer *p = &r->c->p;

	p->cmd_stream = true;
	p->cmd_req_id = r->id;
	if (p->smb && !p->setup_sent) {
		/* adopted SMB: setup_tracing without fd or page size, right away (§2.3); an
		 * SMB the connector handed over but the producer did not offer goes out like a
		 * service-created one, fd and page size */
		struct buf b = BUF_INIT;
		size_t m = sonde__pb_begin(&b, PF_ASYNC_CMD_SETUP_TRACING);
		if (!p->smb_adopted)
			sonde__pb_put_varint(&b, PF_SETUP_TRACING_PAGE_SIZE_KB, p->page_size / 1024);
		sonde__pb_end(&b, m);
		p->setup_sent = true;
		sonde__producer_send_cmd(s, r->c, &b, !p->smb_adopted);
		sonde__buf_free(&b);
	}
	for (size_t i = 0; i < p->npending; i++) {
		struct pending_cmd *pc = &p->pending[i];
		sonde__svc_send_reply(r->c, r->id, true, true, pc->data, pc->len,
			       pc->with_smb_fd ? p->smb_fd : -1);
		sonde__free(pc->data);
	}
	p->npending = 0;
	return 0;
}

/* ------------------------------------------------------------------ methods */


uint32_t sonde__producer_id_next(uint32_t *next, bool (*in_use)(void *ctx, uint32_t id), void *ctx)
{
	for (uint64_t tries = 0; tries <= UINT32_MAX; tries++) {
		uint32_t id = (*next)++;
		if (id && !in_use(ctx, id))
			return id;
	}
	return 0; /* every id taken: 4 billion producers or sequences alive */
}

/* An id is taken while a producer holds it, and while any buffer holds a sequence of it:
 * a new producer with that id would continue the old one's sequences (same trusted
 * sequence id, the old producer's trusted uid). */
static bool producer_id_taken(void *ctx, uint32_t id)
{
	struct svc *s = ctx;

	for (size_t i = 0; i < s->nconns; i++)
		if (s->conns[i]->is_producer && s->conns[i]->p.initialized &&
		    s->conns[i]->p.id == id)
			return true;
	size_t pos = 0;
	const struct tbuf *tb;
	while ((tb = sonde__bufid_next(s, &pos)))
		for (size_t k = 0; k < tb->nseqs; k++)
			if (tb->seqs[k].producer_id == id)
				return true;
	return false;
}

static int initialize(struct svc *s, struct req *r)
{
	struct producer *p = &r->c->p;
	struct pb_reader rd = pb_reader_init(r->args, r->args_len);
	struct pb_field f;
	bool provided = false;
	uint64_t mode = 0;
	int rc;

	if (p->initialized)
		return -SONDE_E_STATE;
	if ((rc = sonde__sec_check_producer(s, r)) < 0)
		return rc;
	while ((rc = sonde__pb_next(&rd, &f)) > 0) {
		if ((f.num == PF_INIT_CONN_REQ_PRODUCER_NAME ||
		     f.num == PF_INIT_CONN_REQ_SDK_VERSION) &&
		    f.wire == PB_LEN && f.len > SVC_MAX_PRODUCER_NAME) {
			sonde_info("connection %llu: InitializeConnection refused: a producer "
				   "name or sdk_version over %d bytes",
				   (unsigned long long)r->c->id, SVC_MAX_PRODUCER_NAME);
			return -SONDE_E_LIMIT;
		} else if (f.num == PF_INIT_CONN_REQ_PRODUCER_NAME && f.wire == PB_LEN) {
			sonde__free(p->name);
			p->name = sonde__svc_strndup(f.ptr, f.len);
		} else if (f.num == PF_INIT_CONN_REQ_SDK_VERSION && f.wire == PB_LEN) {
			sonde__free(p->sdk_version);
			p->sdk_version = sonde__svc_strndup(f.ptr, f.len);
		} else if (f.wire != PB_VARINT) {
			continue;
		} else if (f.num == PF_INIT_CONN_REQ_PAGE_SIZE_HINT_BYTES) {
			p->page_hint = (uint32_t)f.u;
		} else if (f.num == PF_INIT_CONN_REQ_SIZE_HINT_BYTES) {
			p->size_hint = (uint32_t)f.u;
		} else if (f.num == PF_INIT_CONN_REQ_SMB_SCRAPING_MODE) {
			mode = f.u;
		} else if (f.num == PF_INIT_CONN_REQ_PRODUCER_PROVIDED_SHMEM) {
			provided = f.u != 0;
		}
	}
	if (rc < 0)
		return -SONDE_E_FORMAT;
	if (!p->name)
		p->name = sonde__strdup("");
	p->initialized = true;
	p->id = sonde__producer_id_next(&s->next_producer_id, producer_id_taken, s);
	p->scraping = mode == PF_SMB_SCRAPING_ENABLED;
	s->producers_seen++;
	/* no shared memory over TCP or vsock (Perfetto's service decides it the same way,
	 * by the transport) */
	p->emulated = r->c->remote;
	if (p->emulated) {
		p->smb_adopted = false;
	} else if (p->smb) {
		/* handed over by the connector: adopted if the producer offers that file */
		p->smb_adopted = provided && r->fd >= 0 && same_file(r->fd, p->smb_fd);
	} else if (provided && r->fd >= 0 && adopt_smb(s, p, r->fd)) {
		p->smb_adopted = true;
		r->fd = -1; /* the mapping keeps it */
	}
	/* names are the peer's, up to a frame long: clamped, so that what follows them (the
	 * peer's pid and uid) stays in the line */
	if (p->emulated && r->c->machine_id)
		sonde_info("producer %u \"%.64s\" on machine %u \"%.64s\", pid %d uid %s "
			   "(shared-memory emulation)",
			   p->id, p->name, r->c->machine_id, sonde__machine_name_of(s, r->c),
			   (int)r->c->ch.peer_pid, r->c->vouched ? "vouched" : "unknown");
	else if (p->emulated)
		sonde_info("producer %u \"%.64s\" remote, uid unknown (shared-memory emulation)",
			   p->id, p->name);
	else
		sonde_info("producer %u \"%.64s\" pid %d uid %d%s", p->id, p->name,
			   (int)r->c->ch.peer_pid, (int)r->c->ch.peer_uid,
			   p->smb_adopted ? " (producer-provided SMB)" : "");
	struct buf b = BUF_INIT;
	if (p->smb_adopted)
		sonde__pb_put_bool(&b, PF_INIT_CONN_RESP_USING_SHMEM_PROVIDED_BY_PRODUCER, true);
	sonde__pb_put_bool(&b, PF_INIT_CONN_RESP_DIRECT_SMB_PATCHING_SUPPORTED, true);
	if (p->emulated)
		sonde__pb_put_bool(&b, PF_INIT_CONN_RESP_USE_SHMEM_EMULATION, true);
	rc = sonde__svc_reply(r, &b, false);
	sonde__buf_free(&b);
	return rc;
}

static void free_reg(struct ds_reg *d)
{
	if (!d)
		return;
	sonde__free(d->name);
	sonde__free(d->desc);
	sonde__free(d);
}

static struct ds_reg *parse_descriptor(const uint8_t *p, size_t n)
{
	struct pb_reader r = pb_reader_init(p, n);
	struct pb_field f;
	struct ds_reg *d = sonde__calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	d->desc = sonde__malloc(n ? n : 1);
	if (!d->desc)
		goto fail;
	memcpy(d->desc, p, n);
	d->desc_len = n;
	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == PF_DS_DESCRIPTOR_NAME && f.wire == PB_LEN) {
			sonde__free(d->name);
			d->name = sonde__svc_strndup(f.ptr, f.len);
		} else if (f.wire != PB_VARINT) {
			continue;
		} else if (f.num == PF_DS_DESCRIPTOR_WILL_NOTIFY_ON_STOP) {
			d->notify_stop = f.u != 0;
		} else if (f.num == PF_DS_DESCRIPTOR_WILL_NOTIFY_ON_START) {
			d->notify_start = f.u != 0;
		} else if (f.num == PF_DS_DESCRIPTOR_HANDLES_INCREMENTAL_STATE_CLEAR) {
			d->handles_incr = f.u != 0;
		} else if (f.num == PF_DS_DESCRIPTOR_ID) {
			d->desc_id = f.u;
		} else if (f.num == PF_DS_DESCRIPTOR_NO_FLUSH) {
			d->no_flush = f.u != 0;
		}
	}
	if (d->name)
		return d;
fail:
	free_reg(d);
	return NULL;
}

/* The descriptor field of Register/UpdateDataSourceRequest. */
static struct ds_reg *request_descriptor(const struct req *r)
{
	struct pb_reader rd = pb_reader_init(r->args, r->args_len);
	struct pb_field f;
	struct ds_reg *d = NULL;

	while (sonde__pb_next(&rd, &f) > 0) {
		if (f.num == PF_REGISTER_DS_REQ_DESCRIPTOR && f.wire == PB_LEN) {
			free_reg(d);
			d = parse_descriptor(f.ptr, f.len);
		}
	}
	return d;
}

/* The bytes of the descriptors producer c has registered. */
static size_t desc_bytes(const struct svc *s, const struct conn *c)
{
	size_t bytes = 0;

	for (size_t i = 0; i < s->nds; i++)
		if (s->ds[i]->conn_id == c->id)
			bytes += s->ds[i]->desc_len;
	return bytes;
}

/* Why a producer's registration of d is refused, or NULL. A producer may have
 * SVC_MAX_DS_PER_PRODUCER data sources and SVC_MAX_DS_BYTES_PER_PRODUCER of descriptors
 * registered: each is kept until it unregisters or goes, and each matching session gets an
 * instance of each. As in Perfetto, a name may be registered again under another id (each
 * TrackEvent namespace of the SDK registers "track_event" under an id of its own), but not
 * under a nonzero id the producer already registered it with (UpdateDataSource could not
 * tell the two apart). Id 0 may repeat, as in Perfetto: SDKs older than ids (v14) register
 * "track_event" once per namespace, all under id 0, each wanting an instance. */
static const char *register_refusal(const struct svc *s, const struct conn *c,
				    const struct ds_reg *d)
{
	size_t n = 0;

	for (size_t i = 0; i < s->nds; i++) {
		const struct ds_reg *o = s->ds[i];
		if (o->conn_id != c->id)
			continue;
		if (d->desc_id && o->desc_id == d->desc_id && !strcmp(o->name, d->name))
			return "a data source of this name and id is already registered by this "
			       "producer";
		n++;
	}
	if (n >= SVC_MAX_DS_PER_PRODUCER)
		return "too many data sources registered by this producer (the per-producer "
		       "limit)";
	if (desc_bytes(s, c) + d->desc_len > SVC_MAX_DS_BYTES_PER_PRODUCER)
		return "the data source descriptors of this producer exceed the per-producer "
		       "size limit";
	return NULL;
}

static int register_ds(struct svc *s, struct req *r)
{
	struct ds_reg *d = request_descriptor(r);
	const char *why = NULL;
	struct buf b = BUF_INIT;
	int rc;

	if (d && d->name[0] && !(why = register_refusal(s, r->c, d))) {
		struct ds_reg **v = sonde__realloc(s->ds, (s->nds + 1) * sizeof(*v));
		if (!v) {
			free_reg(d);
			return -ENOMEM;
		}
		s->ds = v;
		d->conn_id = r->c->id;
		s->ds[s->nds++] = d;
		s->data_sources_seen++;
		sonde_debug("producer %u \"%.64s\" registered data source \"%.64s\"", r->c->p.id,
			    r->c->p.name, d->name);
		sonde__session_setup_for_producer(s, r->c, d);
	} else {
		if (why)
			sonde_debug("producer %u: data source \"%.64s\" refused: %s", r->c->p.id,
				    d->name, why);
		free_reg(d); /* an empty name is ignored (§2.1) */
	}
	if (why)
		sonde__pb_put_string(&b, PF_REGISTER_DS_RESP_ERROR, why);
	rc = sonde__svc_reply(r, &b, false);
	sonde__buf_free(&b);
	return rc;
}

static int update_ds(struct svc *s, struct req *r)
{
	struct ds_reg *d = request_descriptor(r);

	for (size_t i = 0; d && i < s->nds; i++) {
		struct ds_reg *o = s->ds[i];
		if (o->conn_id == r->c->id && o->desc_id == d->desc_id &&
		    !strcmp(o->name, d->name)) {
			/* a larger descriptor must stay within the producer's limit */
			if (desc_bytes(s, r->c) - o->desc_len + d->desc_len >
			    SVC_MAX_DS_BYTES_PER_PRODUCER)
				break;
			d->conn_id = o->conn_id;
			s->ds[i] = d;
			free_reg(o);
			d = NULL;
		}
	}
	free_reg(d);
	return sonde__svc_reply(r, NULL, false);
}

static void unregister_all(struct svc *s, struct conn *c, const char *name)
{
	sonde__session_remove_ds(s, c, name);
	for (size_t i = 0; i < s->nds;) {
		if (s->ds[i]->conn_id == c->id && (!name || !strcmp(s->ds[i]->name, name))) {
			free_reg(s->ds[i]);
			s->ds[i] = s->ds[--s->nds];
		} else {
			i++;
		}
	}
}

static int unregister_ds(struct svc *s, struct req *r)
{
	struct pb_reader rd = pb_reader_init(r->args, r->args_len);
	struct pb_field f;

	while (sonde__pb_next(&rd, &f) > 0) {
		if (f.num == PF_UNREGISTER_DS_REQ_NAME && f.wire == PB_LEN) {
			char *name = sonde__svc_strndup(f.ptr, f.len);
			if (name)
				unregister_all(s, r->c, name);
			sonde__free(name);
		}
	}
	return sonde__svc_reply(r, NULL, false);
}

/* Register/UnregisterTraceWriter, NotifyDataSourceStarted/Stopped: one varint each. */
static uint64_t first_varint(const struct req *r, uint32_t num, uint64_t *second)
{
	struct pb_reader rd = pb_reader_init(r->args, r->args_len);
	struct pb_field f;
	uint64_t v = 0;

	while (sonde__pb_next(&rd, &f) > 0) {
		if (f.wire != PB_VARINT)
			continue;
		if (f.num == num)
			v = f.u;
		else if (second && f.num == num + 1)
			*second = f.u;
	}
	return v;
}

static int trace_writer(struct svc *s, struct req *r, bool reg)
{
	uint64_t target = 0;
	uint64_t id = first_varint(r, PF_REGISTER_TW_REQ_WRITER_ID, reg ? &target : NULL);

	if (id >= 1 && id <= SMB_MAX_WRITER_ID)
		sonde__producer_bind_writer(r->c, (uint16_t)id,
					    target <= SVC_MAX_BUFFER_ID ? (uint16_t)target : 0);
	return sonde__svc_reply(r, NULL, false);
}

/* ------------------------------------------------------------------ CommitData */

/* Whether a chunk of writer ci->writer_id may go to buffer target. */
static bool chunk_allowed(struct svc *s, const struct producer *p, const struct smb_chunk_info *ci,
			  uint64_t target, struct tbuf **tb)
{
	/* a buffer freed meanwhile is unknown: its id is not handed out again soon (bufid.c) */
	*tb = sonde__bufid_get(s, target);
	return *tb && target <= SVC_MAX_BUFFER_ID &&
	       writer_may_write(p, ci->writer_id, (uint32_t)target);
}

/* An emulated chunk: the whole chunk, header included, inline in the request (Perfetto's
 * MakeChunkFromSerializedData). It is complete by construction and never larger than a
 * page of the geometry the producer was told; it is read in place, no copy, no state. */
static void move_inline(struct svc *s, struct conn *c, const uint8_t *data, size_t len,
			uint64_t target)
{
	struct producer *p = &c->p;
	struct smb_chunk_info ci;
	struct tbuf *tb;

	if (!p->emulated || !p->page_size || len < SMB_CHUNK_HDR_SIZE || len > p->page_size) {
		s->chunks_discarded++;
		return;
	}
	ci = smb_chunk_parse_hdr(data);
	ci.size = len;
	if (!chunk_allowed(s, p, &ci, target, &tb)) {
		s->chunks_discarded++;
		return;
	}
	struct tbuf_ident who = {.uid = (int32_t)c->ch.peer_uid,
				 .pid = c->vouched ? (int32_t)c->ch.peer_pid : 0,
				 .uid_unknown = !c->vouched,
				 .machine_id = c->machine_id};
	sonde__tbuf_copy_chunk_ident(tb, p->id, &who, &ci, data + SMB_CHUNK_HDR_SIZE,
				     len - SMB_CHUNK_HDR_SIZE);
}

static void move_chunk(struct svc *s, struct conn *c, uint64_t page, uint64_t chunk,
		       uint64_t target)
{
	struct producer *p = &c->p;
	struct smb_chunk_info ci;
	uint8_t *ch;

	if (!p->smb || page >= p->num_pages || chunk >= SMB_MAX_CHUNKS_PER_PAGE)
		return;
	ch = smb_acquire_for_reading(p->smb, p->page_size, page, (unsigned)chunk, &ci);
	if (!ch)
		return;
	struct tbuf *tb;
	if (chunk_allowed(s, p, &ci, target, &tb)) {
		const uint8_t *payload = ch + SMB_CHUNK_HDR_SIZE;
		size_t len = ci.size - SMB_CHUNK_HDR_SIZE;
		smb_access(SMB_AT_COPY, payload, len);
		sonde__tbuf_copy_chunk(tb, p->id, (int32_t)c->ch.peer_uid, (int32_t)c->ch.peer_pid, &ci,
				payload, len);
		smb_access(SMB_AT_COPIED, payload, len);
	} else {
		s->chunks_discarded++;
	}
	/* freed even when refused, so a misdirected producer does not leak its SMB */
	smb_release_read_chunk(p->smb, p->page_size, page, (unsigned)chunk, ch);
}

static void parse_move(struct svc *s, struct conn *c, const struct pb_field *e)
{
	struct pb_reader r = pb_sub(e);
	struct pb_field f;
	uint64_t page = UINT64_MAX, chunk = UINT64_MAX, target = 0;
	const uint8_t *data = NULL;
	size_t dlen = 0;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == PF_CHUNKS_TO_MOVE_DATA && f.wire == PB_LEN)
			data = f.ptr, dlen = f.len;
		if (f.wire != PB_VARINT)
			continue;
		if (f.num == PF_CHUNKS_TO_MOVE_PAGE)
			page = f.u;
		else if (f.num == PF_CHUNKS_TO_MOVE_CHUNK)
			chunk = f.u;
		else if (f.num == PF_CHUNKS_TO_MOVE_TARGET_BUFFER)
			target = f.u;
	}
	/* an emulated producer's chunks are all inline; a producer with an SMB sends none */
	if (data || c->p.emulated)
		move_inline(s, c, data, dlen, target);
	else
		move_chunk(s, c, page, chunk, target);
}

static void apply_patches(struct svc *s, struct conn *c, const struct pb_field *e)
{
	struct pb_reader r = pb_sub(e), pr;
	struct pb_field f, g;
	uint64_t target = 0, writer = 0, chunk_id = 0, npatches = 0;
	bool more = false;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == PF_CHUNK_TO_PATCH_PATCHES && f.wire == PB_LEN)
			npatches++;
		else if (f.wire != PB_VARINT)
			continue;
		else if (f.num == PF_CHUNK_TO_PATCH_TARGET_BUFFER)
			target = f.u;
		else if (f.num == PF_CHUNK_TO_PATCH_WRITER_ID)
			writer = f.u;
		else if (f.num == PF_CHUNK_TO_PATCH_CHUNK_ID)
			chunk_id = f.u;
		else if (f.num == PF_CHUNK_TO_PATCH_HAS_MORE_PATCHES)
			more = f.u != 0;
	}
	struct tbuf *tb = sonde__bufid_get(s, target);
	/* a writer bound to another permission patches nothing here: the chunk it means is
	 * in a freed session's buffer (keyed by producer id, the lookup finds only this
	 * producer's chunks, but a stale writer's chunk id may match a fresh one's) */
	if (!tb || writer == 0 || writer > SMB_MAX_WRITER_ID || chunk_id > UINT32_MAX ||
	    npatches > 1024 ||
	    (c->p.writer_buf[writer] && !writer_may_write(&c->p, (uint32_t)writer, (uint32_t)target))) {
		s->patches_discarded++;
		return;
	}
	/* the lookup is keyed by the trusted producer id: a producer patches only its own */
	r = pb_sub(e);
	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num != PF_CHUNK_TO_PATCH_PATCHES || f.wire != PB_LEN)
			continue;
		uint64_t off = UINT64_MAX;
		const uint8_t *data = NULL;
		size_t dlen = 0;
		pr = pb_sub(&f);
		while (sonde__pb_next(&pr, &g) > 0) {
			if (g.num == PF_PATCH_OFFSET && g.wire == PB_VARINT)
				off = g.u;
			else if (g.num == PF_PATCH_DATA && g.wire == PB_LEN)
				data = g.ptr, dlen = g.len;
		}
		if (dlen != 4 || off > UINT32_MAX) {
			s->patches_discarded++;
			continue;
		}
		if (sonde__tbuf_patch(tb, c->p.id, (uint16_t)writer, (uint32_t)chunk_id, (uint32_t)off,
			       data) < 0)
			return;
	}
	if (!more)
		sonde__tbuf_patch_done(tb, c->p.id, (uint16_t)writer, (uint32_t)chunk_id);
}

static int commit_data(struct svc *s, struct req *r)
{
	struct pb_reader rd = pb_reader_init(r->args, r->args_len);
	struct pb_field f;
	uint64_t flush_id = 0;
	bool patches = false;
	int rc;

	while ((rc = sonde__pb_next(&rd, &f)) > 0) {
		if (f.num == PF_COMMIT_DATA_REQ_CHUNKS_TO_MOVE && f.wire == PB_LEN)
			parse_move(s, r->c, &f);
		else if (f.num == PF_COMMIT_DATA_REQ_CHUNKS_TO_PATCH && f.wire == PB_LEN)
			patches = true;
		else if (f.num == PF_COMMIT_DATA_REQ_FLUSH_REQUEST_ID && f.wire == PB_VARINT)
			flush_id = f.u;
	}
	if (rc < 0)
		return -SONDE_E_FORMAT;
	if (patches) { /* always after every move of the same request (§2.5) */
		rd = pb_reader_init(r->args, r->args_len);
		while (sonde__pb_next(&rd, &f) > 0)
			if (f.num == PF_COMMIT_DATA_REQ_CHUNKS_TO_PATCH && f.wire == PB_LEN)
				apply_patches(s, r->c, &f);
	}
	if (flush_id)
		sonde__session_flush_ack(s, r->c, flush_id);
	return sonde__svc_reply(r, NULL, false);
}

/* ------------------------------------------------------------------ scraping */

static void scrape_chunk(struct svc *s, struct conn *c, const struct session *only, uint8_t *ch,
			 size_t chunk_size, bool complete)
{
	struct producer *p = &c->p;
	struct smb_chunk_info ci;

	smb_access(SMB_AT_SCRAPE, ch, chunk_size);
	ci = smb_chunk_read_hdr(ch);
	if (ci.writer_id < 1 || ci.writer_id > SMB_MAX_WRITER_ID)
		return;
	uint16_t id = p->writer_buf[ci.writer_id];
	struct tbuf *tb = sonde__bufid_get(s, id);
	if (!tb || !writer_may_write(p, ci.writer_id, id) ||
	    (only && !sonde__session_owns_buffer(only, id)))
		return;
	if (!complete) {
		/* the last fragment may be half written: leave it for the real commit */
		if (ci.count < 2)
			return;
		ci.count--;
		ci.flags &= (uint8_t) ~(SMB_FLAG_LAST_PACKET_CONTINUES | SMB_FLAG_NEEDS_PATCHING);
	}
	smb_access(SMB_AT_COPY, ch + SMB_CHUNK_HDR_SIZE, chunk_size - SMB_CHUNK_HDR_SIZE);
	sonde__tbuf_copy_chunk(tb, p->id, (int32_t)c->ch.peer_uid, (int32_t)c->ch.peer_pid, &ci,
			ch + SMB_CHUNK_HDR_SIZE, chunk_size - SMB_CHUNK_HDR_SIZE);
	smb_access(SMB_AT_COPIED, ch + SMB_CHUNK_HDR_SIZE, chunk_size - SMB_CHUNK_HDR_SIZE);
}

void sonde__producer_scrape(struct svc *s, struct conn *c, const struct session *only)
{
	struct producer *p = &c->p;

	if (!p->scraping || !p->smb)
		return;
	for (size_t pg = 0; pg < p->num_pages; pg++) {
		uint32_t bm = smb_bitmap_load(smb_page_bitmap(p->smb, p->page_size, pg));
		unsigned layout = smb_bitmap_layout(bm), n = smb_layout_nchunks(layout);
		size_t csize = smb_chunk_size(p->page_size, layout);
		for (unsigned i = 0; i < n; i++) {
			enum smb_chunk_state st = smb_bitmap_state(bm, i);
			if (st != SMB_CHUNK_BEING_WRITTEN && st != SMB_CHUNK_COMPLETE)
				continue;
			scrape_chunk(s, c, only, smb_chunk_ptr(p->smb, p->page_size, pg, layout, i),
				     csize, st == SMB_CHUNK_COMPLETE);
		}
	}
}

/* ------------------------------------------------------------------ dispatch */

int sonde__producer_dispatch(struct svc *s, struct req *r, uint32_t method)
{
	if (method != PF_PRODUCER_INITIALIZE_CONNECTION && !r->c->p.initialized)
		return -SONDE_E_STATE;
	switch (method) {
	case PF_PRODUCER_INITIALIZE_CONNECTION:
		return initialize(s, r);
	case PF_PRODUCER_REGISTER_DATA_SOURCE:
		return register_ds(s, r);
	case PF_PRODUCER_UNREGISTER_DATA_SOURCE:
		return unregister_ds(s, r);
	case PF_PRODUCER_COMMIT_DATA:
		return commit_data(s, r);
	case PF_PRODUCER_GET_ASYNC_COMMAND:
		return get_async_command(s, r);
	case PF_PRODUCER_REGISTER_TRACE_WRITER:
		return trace_writer(s, r, true);
	case PF_PRODUCER_UNREGISTER_TRACE_WRITER:
		return trace_writer(s, r, false);
	case PF_PRODUCER_NOTIFY_DATA_SOURCE_STARTED:
		sonde__session_ds_started(s, r->c, first_varint(r, PF_NOTIFY_DS_REQ_DATA_SOURCE_ID, NULL));
		return sonde__svc_reply(r, NULL, false);
	case PF_PRODUCER_NOTIFY_DATA_SOURCE_STOPPED:
		sonde__session_ds_stopped(s, r->c, first_varint(r, PF_NOTIFY_DS_REQ_DATA_SOURCE_ID, NULL));
		return sonde__svc_reply(r, NULL, false);
	case PF_PRODUCER_ACTIVATE_TRIGGERS:
		return sonde__trigger_activate(s, r);
	case PF_PRODUCER_SYNC: /* everything received before it has been handled */
		return sonde__svc_reply(r, NULL, false);
	case PF_PRODUCER_UPDATE_DATA_SOURCE:
		return update_ds(s, r);
	default:
		return -ENOSYS;
	}
}

void sonde__producer_gone(struct svc *s, struct conn *c)
{
	struct producer *p = &c->p;

	if (p->initialized) {
		sonde__producer_scrape(s, c, NULL); /* §1.8: its last data first */
		if (c->probes_channel)
			sonde__session_probes_gone(s, c);
		unregister_all(s, c, NULL);
		sonde__session_producer_gone(s, c);
		sonde_info("producer %u \"%s\" disconnected", p->id, p->name);
	}
	if (p->smb)
		munmap(p->smb, p->smb_size);
	if (p->smb_fd >= 0)
		close(p->smb_fd);
	for (size_t i = 0; i < p->npending; i++)
		sonde__free(p->pending[i].data);
	sonde__free(p->pending);
	sonde__free(p->allowed);
	sonde__free(p->name);
	sonde__free(p->sdk_version);
}
