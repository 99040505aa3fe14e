/* Producer: ProducerPort client, data source instances, SMB setup, trace writers. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sonde/client.h>
#include <sonde/error.h>
#include <sonde/log.h>

#include "base/alloc.h"
#include "base/opts.h"
#include "base/pb.h"
#include "client/arbiter.h"
#include "client/conn.h"
#include "client/producer_fuzz.h"
#include "client/writer.h"
#include "ipc/protos.h"
#include "ipc/smb.h"
#include "ipc/sock.h"

/* Our method indexes (conn.method_ids order). */
enum {
	PM_INIT,
	PM_REGISTER_DS,
	PM_COMMIT,
	PM_GET_ASYNC,
	PM_REGISTER_TW,
	PM_UNREGISTER_TW,
	PM_NOTIFY_STARTED,
	PM_NOTIFY_STOPPED,
	PM_ACTIVATE_TRIGGERS,
	PM_COUNT
};

static const char *const method_names[PM_COUNT] = {
	"InitializeConnection",	   "RegisterDataSource",      "CommitData",
	"GetAsyncCommand",	   "RegisterTraceWriter",     "UnregisterTraceWriter",
	"NotifyDataSourceStarted", "NotifyDataSourceStopped", "ActivateTriggers",
};

enum {
	DEFAULT_STALL_MS = 10,
	OWN_SMB_SIZE = 262144,
	EMULATED_SMB_SIZE = 1 << 20, /* Perfetto's kShmemEmulationSize */
	OWN_SMB_PAGE = 4096,
	/* reconnection backoff, as the Perfetto SDK's: the first retry soon, then doubling */
	RECONNECT_FIRST_MS = 100,
	RECONNECT_MAX_MS = 5000,
};

struct ds_reg {
	char *name;
	struct sonde_data_source_cbs cbs;
};

struct ds_inst {
	uint64_t id;
	size_t reg;
	uint32_t target_buffer;
};

struct sonde_producer {
	struct conn c;
	struct sonde_producer_opts opts;
	char *name;
	uint64_t init_req, async_req;
	bool connected, eof, failed;
	/* SMB */
	uint8_t *smb;
	size_t smb_size, smb_page;
	bool smb_offered; /* our own SMB is mapped, waiting for the service's verdict */
	bool smb_adopted;
	/* the service asked for shared-memory emulation (a TCP or vsock connection): the SMB
	 * is this process's own memory and chunks go inline */
	bool emulated;
	struct arbiter arb;
	bool arb_ready;
	/* data sources */
	struct ds_reg *regs;
	size_t n_regs;
	struct ds_inst *insts;
	size_t n_insts, cap_insts;
	/* writers by id; guarded by wlock (writers come and go on any thread) */
	pthread_mutex_t wlock;
	struct sonde_trace_writer *writers[SMB_MAX_WRITER_ID + 1];
	struct buf scratch;
	/* opts.reconnect: after the connection is lost (down), the old connection and SMB stay
	 * until the last writer is freed (writers of any thread may still use them), then a
	 * new connection is tried at retry_ms with a doubling backoff */
	struct conn_trust trust;
	char path[108];
	bool down;
	uint64_t retry_ms;
	uint32_t backoff_ms;
};

static const char *socket_path_of(const struct sonde_producer_opts *o, char *buf, size_t n)
{
	if (OPTS_GET(o, socket, NULL))
		return o->socket;
	sonde__conn_default_path(CONN_PRODUCER, buf, n);
	return buf;
}

const char *sonde_producer__socket_path(const struct sonde_producer_opts *opts)
{
	static __thread char path[108];
	return socket_path_of(opts, path, sizeof(path));
}

static int send_commit(void *ctx, const uint8_t *req, size_t len)
{
	struct sonde_producer *p = ctx;

	if (!req) {
		int r = sonde__conn_flush(&p->c);
		return r < 0 ? r : 0;
	}
	int64_t r = sonde__conn_invoke(&p->c, PM_COMMIT, req, len, true, -1);
	return r < 0 ? (int)r : 0;
}

static int send_commit_iov(void *ctx, const struct iovec *iov, int n, size_t len, uint64_t *end,
			   uint64_t *sent)
{
	struct sonde_producer *p = ctx;
	int64_t r = iov ? sonde__conn_invoke_iov(&p->c, PM_COMMIT, iov, n, len, true)
			: sonde__conn_flush(&p->c);
	if (r < 0)
		return (int)r;
	sonde__conn_tx_positions(&p->c, sent, end);
	return 0;
}

static int map_smb(struct sonde_producer *p, int fd, size_t size, size_t page)
{
	if (!smb_geometry_abi_ok(size, page))
		return -SONDE_E_PROTOCOL;
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return -errno;
	p->smb = m;
	p->smb_size = size;
	p->smb_page = page;
	return 0;
}

static void start_arbiter(struct sonde_producer *p)
{
	if (sonde__arbiter_init(&p->arb, p->smb, p->smb_size, p->smb_page, SMB_LAYOUT_DIV1, send_commit,
			 p) < 0) {
		sonde_error("producer: cannot use the shared memory buffer");
		return;
	}
	p->arb.emulated = p->emulated;
	if (p->emulated) /* the chunks go to the socket from where they are */
		p->arb.send_iov = send_commit_iov;
	__atomic_store_n(&p->arb_ready, true, __ATOMIC_RELEASE);
	sonde_debug("producer %s: SMB of %zu bytes, pages of %zu", p->name, p->smb_size,
		    p->smb_page);
}

/* A sealed memfd, as the service demands of a producer-provided SMB. */
static int create_own_smb(struct sonde_producer *p, int *fd_out)
{
	size_t size = p->opts.smb_size_hint ? p->opts.smb_size_hint : OWN_SMB_SIZE;
	size_t page = p->opts.smb_page_size_hint ? p->opts.smb_page_size_hint : OWN_SMB_PAGE;
	int fd = sonde__smb_create(size), r;

	if (fd < 0)
		return fd;
	if ((r = map_smb(p, fd, size, page)) < 0) {
		close(fd);
		return r;
	}
	p->opts.smb_size_hint = (uint32_t)size;
	p->opts.smb_page_size_hint = (uint32_t)page;
	*fd_out = fd;
	return 0;
}

static int send_initialize(struct sonde_producer *p)
{
	struct buf *b = &p->scratch;
	int fd = -1, r;

	/* a descriptor cannot travel over TCP or vsock: no SMB of our own there */
	if (p->opts.producer_provided_smb && sonde__ipc_is_unix(p->c.ch.fd) &&
	    (r = create_own_smb(p, &fd)) < 0)
		return r;
	sonde__buf_reset(b);
	if (p->opts.smb_page_size_hint)
		sonde__pb_put_varint(b, PF_INIT_CONN_REQ_PAGE_SIZE_HINT_BYTES, p->opts.smb_page_size_hint);
	if (p->opts.smb_size_hint)
		sonde__pb_put_varint(b, PF_INIT_CONN_REQ_SIZE_HINT_BYTES, p->opts.smb_size_hint);
	sonde__pb_put_string(b, PF_INIT_CONN_REQ_PRODUCER_NAME, p->name);
	if (p->opts.smb_scraping)
		sonde__pb_put_varint(b, PF_INIT_CONN_REQ_SMB_SCRAPING_MODE, p->opts.smb_scraping);
	if (fd >= 0)
		sonde__pb_put_bool(b, PF_INIT_CONN_REQ_PRODUCER_PROVIDED_SHMEM, true);
	sonde__pb_put_string(b, PF_INIT_CONN_REQ_SDK_VERSION, "sonde");
	int64_t id = sonde__conn_invoke(&p->c, PM_INIT, b->data, b->len, false, fd);
	if (fd >= 0)
		close(fd); /* the channel dup'ed it */
	if (id < 0)
		return (int)id;
	p->init_req = (uint64_t)id;
	p->smb_offered = fd >= 0;
	/* the service answers InitializeConnection first, so the stream can follow at once */
	id = sonde__conn_invoke(&p->c, PM_GET_ASYNC, NULL, 0, false, -1);
	if (id < 0)
		return (int)id;
	p->async_req = (uint64_t)id;
	return 0;
}

struct sonde_producer *sonde_producer__new(const struct sonde_producer_opts *opts)
{
	struct sonde_producer *p;
	char path[108];
	int r = -ENOMEM;

	if (!opts || !OPTS_VALID(opts, sonde_producer_opts) || !OPTS_GET(opts, name, NULL) ||
	    !*opts->name) {
		errno = EINVAL;
		return NULL;
	}
	if (!(p = sonde__calloc(1, sizeof(*p))))
		return NULL;
	OPTS_COPY(&p->opts, opts);
	if (!p->opts.stall_ms_set && !p->opts.stall_ms)
		p->opts.stall_ms = DEFAULT_STALL_MS;
	pthread_mutex_init(&p->wlock, NULL);
	if (!(p->name = sonde__strdup(opts->name)))
		goto fail;
	p->opts.name = p->name;
	p->opts.socket = NULL; /* not kept: the path is in p->c */
	struct conn_trust t = {p->opts.trust_uid_set, p->opts.trust_uid, p->opts.untrusted_uid};
	if ((r = sonde__conn_trust_from_env(&t)) < 0)
		goto fail;
	r = sonde__conn_open(&p->c, CONN_PRODUCER, socket_path_of(opts, path, sizeof(path)),
		      "ProducerPort", method_names, PM_COUNT, p->opts.timeout_ms, &t);
	if (r < 0)
		goto fail;
	snprintf(p->path, sizeof(p->path), "%s", p->c.path);
	p->trust = t;
	p->trust.refused_uid = NULL; /* the caller's pointer is not kept: later refusals log */
	p->opts.untrusted_uid = NULL;
	if ((r = send_initialize(p)) < 0)
		goto fail;
	return p;
fail:
	sonde_producer__free(p);
	errno = r < 0 && -r < SONDE_E_BASE ? -r : EPROTO;
	return NULL;
}

static void drop_smb(struct sonde_producer *p);

void sonde_producer__free(struct sonde_producer *p)
{
	if (!p)
		return;
	if (p->arb_ready)
		sonde__arbiter_commit(&p->arb, 0);
	sonde__conn_close(&p->c);
	drop_smb(p);
	for (size_t i = 0; i < p->n_regs; i++)
		sonde__free(p->regs[i].name);
	sonde__free(p->regs);
	sonde__free(p->insts);
	sonde__buf_free(&p->scratch);
	pthread_mutex_destroy(&p->wlock);
	sonde__free(p->name);
	sonde__free(p);
}

int sonde_producer__fd(const struct sonde_producer *p)
{
	return p->down ? -1 : p->c.ch.fd;
}

bool sonde_producer__want_write(struct sonde_producer *p)
{
	return !p->down && sonde__conn_tx_pending(&p->c) > 0;
}

bool sonde_producer__connected(const struct sonde_producer *p)
{
	return p->connected;
}

bool sonde_producer__smb_adopted(const struct sonde_producer *p)
{
	return p->smb_adopted;
}

bool sonde_producer__has_smb(const struct sonde_producer *p)
{
	return __atomic_load_n(&p->arb_ready, __ATOMIC_ACQUIRE);
}

/* ---------------------------------------------------------------- data sources */

static int send_register(struct sonde_producer *p, const struct ds_reg *reg);

int sonde_producer__register_data_source(struct sonde_producer *p, const char *name,
					 const struct sonde_data_source_cbs *cbs)
{
	struct sonde_data_source_cbs c = {0};

	if (!name || !*name || !OPTS_VALID(cbs, sonde_data_source_cbs))
		return -EINVAL;
	OPTS_COPY(&c, cbs);
	struct ds_reg *regs = sonde__realloc(p->regs, (p->n_regs + 1) * sizeof(*regs));
	if (!regs)
		return -ENOMEM;
	p->regs = regs;
	if (!(regs[p->n_regs].name = sonde__strdup(name)))
		return -ENOMEM;
	regs[p->n_regs].cbs = c;
	p->n_regs++;
	if (p->down)
		return 0; /* sent with the others once connected again */
	return send_register(p, &p->regs[p->n_regs - 1]);
}

static int send_register(struct sonde_producer *p, const struct ds_reg *reg)
{
	const struct sonde_data_source_cbs c = reg->cbs;
	struct buf *b = &p->scratch;

	sonde__buf_reset(b);
	size_t m = sonde__pb_begin(b, PF_REGISTER_DS_REQ_DESCRIPTOR);
	sonde__pb_put_string(b, PF_DS_DESCRIPTOR_NAME, reg->name);
	if (c.will_notify_on_stop)
		sonde__pb_put_bool(b, PF_DS_DESCRIPTOR_WILL_NOTIFY_ON_STOP, true);
	if (c.will_notify_on_start)
		sonde__pb_put_bool(b, PF_DS_DESCRIPTOR_WILL_NOTIFY_ON_START, true);
	if (c.handles_incremental_state_clear)
		sonde__pb_put_bool(b, PF_DS_DESCRIPTOR_HANDLES_INCREMENTAL_STATE_CLEAR, true);
	sonde__pb_end(b, m);
	if (buf_error(b))
		return -ENOMEM;
	int64_t r = sonde__conn_invoke(&p->c, PM_REGISTER_DS, b->data, b->len, true, -1);
	return r < 0 ? (int)r : 0;
}

int sonde_producer__activate_triggers(struct sonde_producer *p, const char *const *names, size_t n)
{
	struct buf *b = &p->scratch;

	sonde__buf_reset(b);
	for (size_t i = 0; i < n; i++)
		sonde__pb_put_string(b, PF_ACTIVATE_TRIGGERS_REQ_NAMES, names[i]);
	if (buf_error(b))
		return -ENOMEM;
	int64_t r = sonde__conn_invoke(&p->c, PM_ACTIVATE_TRIGGERS, b->data, b->len, true, -1);
	return r < 0 ? (int)r : 0;
}

static struct ds_inst *find_inst(struct sonde_producer *p, uint64_t id)
{
	for (size_t i = 0; i < p->n_insts; i++)
		if (p->insts[i].id == id)
			return &p->insts[i];
	return NULL;
}

/* The instance for (id, config), created on first sight (services of the Android P era
 * send start without setup). NULL when no registered data source has the config's name. */
static struct ds_inst *get_inst(struct sonde_producer *p, uint64_t id, const uint8_t *cfg,
				size_t len)
{
	struct ds_inst *in = find_inst(p, id);
	struct pb_reader r = pb_reader_init(cfg, len);
	struct pb_field f;
	const uint8_t *name = NULL;
	size_t name_len = 0;
	uint32_t target = 0;

	if (in)
		return in;
	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == PF_DS_CONFIG_NAME && f.wire == PB_LEN) {
			name = f.ptr;
			name_len = f.len;
		} else if (f.num == PF_DS_CONFIG_TARGET_BUFFER && f.wire == PB_VARINT) {
			target = (uint32_t)f.u;
		}
	}
	for (size_t i = 0; name && i < p->n_regs; i++) {
		if (strlen(p->regs[i].name) != name_len || memcmp(p->regs[i].name, name, name_len))
			continue;
		if (p->n_insts == p->cap_insts) {
			size_t cap = p->cap_insts ? 2 * p->cap_insts : 8;
			pthread_mutex_lock(&p->wlock);
			struct ds_inst *n = sonde__realloc(p->insts, cap * sizeof(*n));
			if (n) {
				p->insts = n;
				p->cap_insts = cap;
			}
			pthread_mutex_unlock(&p->wlock);
			if (!n)
				return NULL;
		}
		pthread_mutex_lock(&p->wlock);
		in = &p->insts[p->n_insts++];
		*in = (struct ds_inst){id, i, target};
		pthread_mutex_unlock(&p->wlock);
		return in;
	}
	sonde_warn("producer %s: command for unknown data source '%.*s'", p->name, (int)name_len,
		   name ? (const char *)name : "");
	return NULL;
}

static void notify(struct sonde_producer *p, unsigned method, uint64_t id)
{
	uint8_t b[16];
	size_t n = sonde__pb_varint_encode(b, (PF_NOTIFY_DS_REQ_DATA_SOURCE_ID << 3) | PB_VARINT);
	n += sonde__pb_varint_encode(b + n, id);
	sonde__conn_invoke(&p->c, method, b, n, true, -1);
}

/* Returns the chunks of the instance's writers that belong to this thread and are between
 * packets. Writers of other threads are theirs to flush (or the service scrapes them). */
static void release_writers_of(struct sonde_producer *p, uint64_t instance_id)
{
	pthread_t self = pthread_self();

	pthread_mutex_lock(&p->wlock);
	for (unsigned i = 1; i <= SMB_MAX_WRITER_ID; i++) {
		struct sonde_trace_writer *w = p->writers[i];
		if (w && w->instance_id == instance_id && !w->in_packet &&
		    pthread_equal(w->owner, self))
			sonde__tw_release(w);
	}
	pthread_mutex_unlock(&p->wlock);
}

/* Parses {1: instance id, 2: config} of setup/start data source. */
static void parse_ds_cmd(const struct pb_field *cmd, uint64_t *id, const uint8_t **cfg, size_t *len)
{
	struct pb_reader r = pb_sub(cmd);
	struct pb_field f;

	*id = 0;
	*cfg = NULL;
	*len = 0;
	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num == PF_START_DS_NEW_INSTANCE_ID && f.wire == PB_VARINT) {
			*id = f.u;
		} else if (f.num == PF_START_DS_CONFIG && f.wire == PB_LEN) {
			*cfg = f.ptr;
			*len = f.len;
		}
	}
}

static void on_setup_or_start(struct sonde_producer *p, const struct pb_field *cmd, bool start)
{
	const uint8_t *cfg;
	size_t len;
	uint64_t id;

	parse_ds_cmd(cmd, &id, &cfg, &len);
	struct ds_inst *in = get_inst(p, id, cfg, len);
	if (!in)
		return;
	const struct sonde_data_source_cbs *cbs = &p->regs[in->reg].cbs;
	if (!start) {
		if (cbs->setup)
			cbs->setup(cbs->ctx, id, cfg, len);
		return;
	}
	if (cbs->start)
		cbs->start(cbs->ctx, id, cfg, len);
	if (cbs->will_notify_on_start)
		notify(p, PM_NOTIFY_STARTED, id);
}

static uint64_t first_varint(const struct pb_field *cmd, uint32_t num)
{
	struct pb_reader r = pb_sub(cmd);
	struct pb_field f;

	while (sonde__pb_next(&r, &f) > 0)
		if (f.num == num && f.wire == PB_VARINT)
			return f.u;
	return 0;
}

static void on_stop(struct sonde_producer *p, const struct pb_field *cmd)
{
	uint64_t id = first_varint(cmd, PF_STOP_DS_INSTANCE_ID);
	struct ds_inst *in = find_inst(p, id);

	if (!in)
		return;
	const struct sonde_data_source_cbs *cbs = &p->regs[in->reg].cbs;
	if (cbs->stop)
		cbs->stop(cbs->ctx, id);
	/* what the instance wrote must be committed before the stop is acknowledged */
	release_writers_of(p, id);
	if (p->arb_ready)
		sonde__arbiter_commit(&p->arb, 0);
	if (cbs->will_notify_on_stop)
		notify(p, PM_NOTIFY_STOPPED, id);
	pthread_mutex_lock(&p->wlock);
	*in = p->insts[--p->n_insts];
	pthread_mutex_unlock(&p->wlock);
}

/* Flush and clear_incremental_state both carry repeated data source ids (field 1, packed
 * or not); fn runs for each known instance. */
static void for_each_id(struct sonde_producer *p, const struct pb_field *cmd,
			void (*fn)(struct sonde_producer *, struct ds_inst *))
{
	struct pb_reader r = pb_sub(cmd);
	struct pb_field f;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.num != 1)
			continue;
		if (f.wire == PB_VARINT) {
			struct ds_inst *in = find_inst(p, f.u);
			if (in)
				fn(p, in);
		} else if (f.wire == PB_LEN) {
			struct pb_reader pk = pb_sub(&f);
			uint64_t v;
			while (sonde__pb_packed_next(&pk, &v) > 0) {
				struct ds_inst *in = find_inst(p, v);
				if (in)
					fn(p, in);
			}
		}
	}
}

static void flush_inst(struct sonde_producer *p, struct ds_inst *in)
{
	const struct sonde_data_source_cbs *cbs = &p->regs[in->reg].cbs;
	if (cbs->flush)
		cbs->flush(cbs->ctx, in->id);
	release_writers_of(p, in->id);
}

static void clear_inst(struct sonde_producer *p, struct ds_inst *in)
{
	const struct sonde_data_source_cbs *cbs = &p->regs[in->reg].cbs;
	if (cbs->clear_incremental_state)
		cbs->clear_incremental_state(cbs->ctx, in->id);
}

static void on_flush(struct sonde_producer *p, const struct pb_field *cmd)
{
	uint64_t req = first_varint(cmd, PF_FLUSH_CMD_REQUEST_ID);

	for_each_id(p, cmd, flush_inst);
	if (p->arb_ready) {
		sonde__arbiter_commit(&p->arb, req);
	} else if (req) {
		/* no SMB yet: the ack alone */
		uint8_t b[16];
		size_t n = sonde__pb_varint_encode(b, (PF_COMMIT_DATA_REQ_FLUSH_REQUEST_ID << 3) | 0);
		n += sonde__pb_varint_encode(b + n, req);
		sonde__conn_invoke(&p->c, PM_COMMIT, b, n, true, -1);
	}
}

static void on_setup_tracing(struct sonde_producer *p, const struct pb_field *cmd, int fd)
{
	uint32_t page_kb = (uint32_t)first_varint(cmd, PF_SETUP_TRACING_PAGE_SIZE_KB);
	struct stat st;
	int r;

	if (fd < 0 && p->emulated && !p->arb_ready) {
		/* emulation: a buffer of our own, of the page size the service chose */
		void *m = mmap(NULL, EMULATED_SMB_SIZE, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED || !smb_geometry_abi_ok(EMULATED_SMB_SIZE, page_kb * 1024u)) {
			sonde_error("producer %s: cannot emulate shared memory of %u KiB pages",
				    p->name, page_kb);
			if (m != MAP_FAILED)
				munmap(m, EMULATED_SMB_SIZE);
			return;
		}
		p->smb = m;
		p->smb_size = EMULATED_SMB_SIZE;
		p->smb_page = page_kb * 1024u;
		start_arbiter(p);
		return;
	}
	if (fd < 0) {
		if (!p->arb_ready)
			sonde_error("producer %s: setup_tracing without a buffer", p->name);
		return;
	}
	if (p->arb_ready) {
		sonde_error("producer %s: the service sent a second buffer; ignored", p->name);
		return;
	}
	if (fstat(fd, &st) < 0 || (r = map_smb(p, fd, (size_t)st.st_size, page_kb * 1024u)) < 0) {
		sonde_error("producer %s: unusable shared memory buffer (%zu bytes, %u KiB pages)",
			    p->name, (size_t)st.st_size, page_kb);
		return;
	}
	start_arbiter(p);
}

static void on_async_command(struct sonde_producer *p, const uint8_t *data, size_t len, int fd)
{
	struct pb_reader r = pb_reader_init(data, len);
	struct pb_field f;

	while (sonde__pb_next(&r, &f) > 0) {
		if (f.wire != PB_LEN)
			continue;
		switch (f.num) {
		case PF_ASYNC_CMD_SETUP_TRACING:
			on_setup_tracing(p, &f, fd);
			break;
		case PF_ASYNC_CMD_SETUP_DATA_SOURCE:
			on_setup_or_start(p, &f, false);
			break;
		case PF_ASYNC_CMD_START_DATA_SOURCE:
			on_setup_or_start(p, &f, true);
			break;
		case PF_ASYNC_CMD_STOP_DATA_SOURCE:
			on_stop(p, &f);
			break;
		case PF_ASYNC_CMD_FLUSH:
			on_flush(p, &f);
			break;
		case PF_ASYNC_CMD_CLEAR_INCREMENTAL_STATE:
			for_each_id(p, &f, clear_inst);
			break;
		default:
			break;
		}
	}
}

static void on_init_reply(struct sonde_producer *p, const struct ipc_frame *f)
{
	bool adopted = false;

	if (!f->success) {
		sonde_error("producer %s: the service rejected InitializeConnection", p->name);
		p->failed = true;
		return;
	}
	p->connected = true;
	struct pb_reader r = pb_reader_init(f->data, f->data_len);
	struct pb_field fl;
	while (sonde__pb_next(&r, &fl) > 0) {
		if (fl.num == PF_INIT_CONN_RESP_USING_SHMEM_PROVIDED_BY_PRODUCER &&
		    fl.wire == PB_VARINT)
			adopted = fl.u != 0;
		if (fl.num == PF_INIT_CONN_RESP_USE_SHMEM_EMULATION && fl.wire == PB_VARINT)
			p->emulated = fl.u != 0;
	}
	if (p->emulated)
		adopted = false; /* chunks go inline: an offered SMB is not used */
	if (p->smb_offered && adopted) {
		p->smb_adopted = true;
		start_arbiter(p);
	} else if (p->smb_offered) {
		/* refused: the service will send its own buffer with setup_tracing */
		munmap(p->smb, p->smb_size);
		p->smb = NULL;
	}
	p->smb_offered = false;
}

static void dispatch(struct sonde_producer *p, const struct ipc_frame *f, int fd)
{
	if (f->msg == IPC_MSG_REQUEST_ERROR) {
		sonde_warn("producer %s: service error: %.*s", p->name, (int)f->name_len, f->name);
	} else if (f->msg == IPC_MSG_INVOKE_METHOD_REPLY) {
		if (f->request_id == p->init_req) {
			on_init_reply(p, f);
		} else if (f->request_id == p->async_req) {
			/* an SMB fd is closed below once mapped: the mapping keeps it */
			if (f->success)
				on_async_command(p, f->data, f->data_len, fd);
			else
				sonde_warn("producer %s: GetAsyncCommand failed", p->name);
		}
	}
	if (fd >= 0)
		close(fd);
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The connection is gone: every instance stops (the service that ran them is gone too),
 * and a reconnection is scheduled. The connection and the SMB stay until the writers are
 * freed: their packets are dropped meanwhile (send_error). */
static void lose_connection(struct sonde_producer *p)
{
	sonde_warn("producer %s: the connection to %s was lost; reconnecting", p->name, p->path);
	p->connected = false;
	p->down = true;
	p->backoff_ms = RECONNECT_FIRST_MS;
	p->retry_ms = mono_ms() + p->backoff_ms;
	while (p->n_insts) {
		struct ds_inst in = p->insts[p->n_insts - 1];
		const struct sonde_data_source_cbs *cbs = &p->regs[in.reg].cbs;
		if (cbs->stop)
			cbs->stop(cbs->ctx, in.id);
		release_writers_of(p, in.id);
		pthread_mutex_lock(&p->wlock);
		p->n_insts--;
		pthread_mutex_unlock(&p->wlock);
	}
}

static bool writers_left(struct sonde_producer *p)
{
	bool any = false;

	pthread_mutex_lock(&p->wlock);
	for (unsigned i = 1; i <= SMB_MAX_WRITER_ID && !any; i++)
		any = p->writers[i] != NULL;
	pthread_mutex_unlock(&p->wlock);
	return any;
}

static void drop_smb(struct sonde_producer *p)
{
	if (p->arb_ready) {
		__atomic_store_n(&p->arb_ready, false, __ATOMIC_RELEASE);
		sonde__arbiter_fini(&p->arb);
	}
	if (p->smb)
		munmap(p->smb, p->smb_size);
	p->smb = NULL;
	p->smb_offered = p->smb_adopted = p->emulated = false;
}

/* One attempt, when due: a new connection, InitializeConnection, and every data source
 * registered again. Failures double the wait, up to RECONNECT_MAX_MS. */
static void try_reconnect(struct sonde_producer *p)
{
	int r;

	if (mono_ms() < p->retry_ms)
		return;
	if (writers_left(p)) {
		p->retry_ms = mono_ms() + RECONNECT_FIRST_MS;
		return;
	}
	sonde__conn_close(&p->c);
	drop_smb(p);
	p->eof = p->failed = false;
	r = sonde__conn_open(&p->c, CONN_PRODUCER, p->path, "ProducerPort", method_names, PM_COUNT,
		      p->opts.timeout_ms, &p->trust);
	if (r == 0)
		r = send_initialize(p);
	for (size_t i = 0; r == 0 && i < p->n_regs; i++)
		r = send_register(p, &p->regs[i]);
	if (r < 0) {
		sonde__conn_close(&p->c);
		drop_smb(p);
		p->backoff_ms = p->backoff_ms * 2 > RECONNECT_MAX_MS ? RECONNECT_MAX_MS
								      : p->backoff_ms * 2;
		p->retry_ms = mono_ms() + p->backoff_ms;
		sonde_debug("producer %s: reconnecting to %s: %s; next try in %u ms", p->name,
			    p->path, sonde_strerror(r), p->backoff_ms);
		return;
	}
	p->down = false;
	sonde_info("producer %s: connected again to %s", p->name, p->path);
}

int sonde_producer__timeout_ms(const struct sonde_producer *p)
{
	if (!p->down)
		return -1;
	uint64_t now = mono_ms();
	return p->retry_ms > now ? (int)(p->retry_ms - now) : 0;
}

int sonde_producer__process(struct sonde_producer *p)
{
	struct ipc_frame f;
	int r, fd;

	if (p->down) {
		try_reconnect(p);
		return 0;
	}
	if (!p->eof) {
		r = sonde__conn_read(&p->c);
		if (r == -ECONNRESET)
			p->eof = true;
		else if (r < 0)
			return r;
	}
	while ((r = sonde__conn_next(&p->c, &f, &fd)) > 0)
		dispatch(p, &f, fd);
	if (r < 0)
		return r;
	if (p->arb_ready)
		sonde__arbiter_commit(&p->arb, 0);
	r = sonde__conn_flush(&p->c);
	if (p->eof) {
		if (p->arb_ready && !p->arb.send_error)
			p->arb.send_error = -ECONNRESET;
		/* an inherited socket ("fd:N") cannot be opened again */
		if (!p->opts.reconnect || !strncmp(p->path, "fd:", 3))
			return -ECONNRESET;
		lose_connection(p);
		return 0;
	}
	if (p->failed)
		return -SONDE_E_PROTOCOL;
	return r < 0 ? r : 0;
}

int sonde_producer__poll(struct sonde_producer *p, int timeout_ms)
{
	if (p->down) {
		int wait = sonde_producer__timeout_ms(p);
		if (timeout_ms >= 0 && timeout_ms < wait)
			wait = timeout_ms;
		if (wait > 0)
			nanosleep(&(struct timespec){wait / 1000, (long)(wait % 1000) * 1000000}, NULL);
		return sonde_producer__process(p);
	}
	if (p->eof)
		return -ECONNRESET;
	int r = sonde__conn_wait(&p->c, timeout_ms);
	if (r < 0)
		return r;
	return sonde_producer__process(p);
}

int sonde_producer__commit(struct sonde_producer *p)
{
	return p->arb_ready ? sonde__arbiter_commit(&p->arb, 0) : 0;
}

/* ---------------------------------------------------------------- writers */

struct sonde_trace_writer *sonde_producer__new_writer(struct sonde_producer *p,
						      uint64_t instance_id)
{
	struct sonde_trace_writer *w;
	uint32_t target;
	unsigned id;

	if (!(w = sonde__malloc(sizeof(*w))))
		return NULL;
	/* any thread may create a writer: the instance table is read under the lock */
	pthread_mutex_lock(&p->wlock);
	struct ds_inst *in = find_inst(p, instance_id);
	for (id = 1; id <= SMB_MAX_WRITER_ID && p->writers[id]; id++)
		;
	if (!in || id > SMB_MAX_WRITER_ID) {
		pthread_mutex_unlock(&p->wlock);
		sonde__free(w);
		errno = in ? EMFILE : ENOENT;
		return NULL;
	}
	target = in->target_buffer;
	sonde__tw_init(w, &p->arb, (uint16_t)id, target, p->opts.stall_ms);
	w->producer = p;
	w->owner = pthread_self();
	w->instance_id = instance_id;
	p->writers[id] = w;
	pthread_mutex_unlock(&p->wlock);
	uint8_t b[32];
	size_t n = sonde__pb_varint_encode(b, (PF_REGISTER_TW_REQ_WRITER_ID << 3) | PB_VARINT);
	n += sonde__pb_varint_encode(b + n, id);
	n += sonde__pb_varint_encode(b + n, (PF_REGISTER_TW_REQ_TARGET_BUFFER << 3) | PB_VARINT);
	n += sonde__pb_varint_encode(b + n, target);
	sonde__conn_invoke(&p->c, PM_REGISTER_TW, b, n, true, -1);
	return w;
}

void sonde_trace_writer__flush(struct sonde_trace_writer *w)
{
	sonde__tw_release(w);
	if (w->arb && w->arb->base)
		sonde__arbiter_commit(w->arb, 0);
}

void sonde_trace_writer__free(struct sonde_trace_writer *w)
{
	if (!w)
		return;
	sonde_trace_writer__flush(w);
	struct sonde_producer *p = w->producer;
	if (p) {
		uint8_t b[16];
		size_t n = sonde__pb_varint_encode(b, (PF_UNREGISTER_TW_REQ_WRITER_ID << 3) | PB_VARINT);
		n += sonde__pb_varint_encode(b + n, w->writer_id);
		sonde__conn_invoke(&p->c, PM_UNREGISTER_TW, b, n, true, -1);
		pthread_mutex_lock(&p->wlock);
		p->writers[w->writer_id] = NULL;
		pthread_mutex_unlock(&p->wlock);
	}
	sonde__free(w);
}

/* ---------------------------------------------------------------- fuzzing */

static void fuzz_start(void *ctx, uint64_t id, const void *cfg, size_t len)
{
	struct sonde_producer *p = ctx;
	struct sonde_trace_writer *w = sonde_producer__new_writer(p, id);

	/* no SMB here: the packet takes the drop path */
	if (!w)
		return;
	sonde_trace_writer__write_packet(w, cfg, len);
	sonde_trace_writer__free(w);
}

int sonde__producer_fuzz_commands(const uint8_t *data, size_t len)
{
	struct sonde_producer *p = sonde__calloc(1, sizeof(*p));
	struct sonde_data_source_cbs cbs = {.sz = sizeof(cbs),
					    .start = fuzz_start,
					    .will_notify_on_start = true,
					    .will_notify_on_stop = true};
	struct pb_reader r = pb_reader_init(data, len);
	struct pb_field f;

	if (!p)
		return -ENOMEM;
	/* a producer without a connection: every send fails harmlessly (no method ids) */
	p->c.ch.fd = -1;
	pthread_mutex_init(&p->wlock, NULL);
	p->name = sonde__strdup("fuzz");
	p->opts.name = p->name;
	cbs.ctx = p;
	if (!p->name || !(p->regs = sonde__calloc(2, sizeof(*p->regs))) ||
	    !(p->regs[0].name = sonde__strdup("a")) || !(p->regs[1].name = sonde__strdup("b"))) {
		sonde_producer__free(p);
		return -ENOMEM;
	}
	p->regs[0].cbs = cbs;
	p->regs[1].cbs = cbs;
	p->n_regs = 2;
	/* the input is a sequence of GetAsyncCommandResponse messages, each in a field 1 */
	while (sonde__pb_next(&r, &f) > 0)
		if (f.wire == PB_LEN)
			on_async_command(p, f.ptr, f.len, -1);
	sonde_producer__free(p);
	return 0;
}
