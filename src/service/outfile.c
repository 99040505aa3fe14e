/* write_into_file (outfile.h): the session's side of its output file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <sonde/log.h>

#include "base/alloc.h"
#include "base/pb.h"
#include "ipc/protos.h"
#include "service/fwriter.h"
#include "service/internal.h"
#include "service/session.h"
#include "service/outfile.h"

enum {
	FILE_FLUSH_BYTES = 1 << 20,
	/* in the last drain, slices this large are written from the buffers, not copied:
	 * below it a copy costs less than the writer's iovec and the queue's lock */
	FILE_REF_MIN = 2048,
};

/* The file is written by its writer thread (fwriter.h): the loop moves packets from the
 * buffers into fbuf, and fbuf into the writer's bounded queue. While the queue is full
 * the packets stay in the trace buffers (which then wrap or discard by their own policy,
 * as when the consumer of a ReadBuffers does not read), and a drain is retried when the
 * writer takes the queue (it signals the service's eventfd) or at the latest soon. A
 * file that takes nothing for the stall timeout (10 s, --stall-timeout-ms) ends its session
 * with an error; the other
 * sessions never wait for it. */

static void on_pump(void *ctx, uint64_t id)
{
	struct svc *s = ctx;
	struct session *ss = sonde__svc_session(s, id);

	if (!ss)
		return;
	ss->t_pump = 0;
	sonde__session_drain_file(s, ss);
}

/* fbuf into the writer's queue; fbuf stays as it is while the queue has no room. */
static int file_push(struct session *ss)
{
	int rc;

	if (!ss->fbuf.len)
		return 0;
	rc = sonde__fwriter_push_buf(ss->fw, &ss->fbuf);
	return rc == -ENOBUFS ? 0 : rc;
}

struct file_sink {
	struct session *ss;
	bool full, broken, backlog;
};

/* Whether the slice lies in one of the session's buffers, all lent to its writer. */
static bool lent_slice(const struct session *ss, const struct iovec *v)
{
	if (!ss->file_refs || v->iov_len < FILE_REF_MIN)
		return false;
	for (size_t i = 0; i < ss->nbufs; i++)
		if (sonde__tbuf_holds(ss->bufs[i], v->iov_base, v->iov_len))
			return true;
	return false;
}

/* Writes one Trace.packet record: 0x0A, varint length, the packet's slices. */
static int file_packet(void *ctx, const struct iovec *iov, size_t n, size_t total)
{
	struct file_sink *fs = ctx;
	struct session *ss = fs->ss;
	uint8_t hdr[1 + PB_VARINT_MAX];
	size_t h;

	hdr[0] = (PF_TRACE_PACKET << 3) | PB_LEN;
	h = 1 + sonde__pb_varint_encode(hdr + 1, total);
	if (ss->cfg.max_file_size && ss->file_bytes + h + total > ss->cfg.max_file_size) {
		fs->full = true;
		return 1;
	}
	sonde__buf_append(&ss->fbuf, hdr, h);
	for (size_t i = 0; i < n; i++) {
		if (!lent_slice(ss, &iov[i])) {
			sonde__buf_append(&ss->fbuf, iov[i].iov_base, iov[i].iov_len);
			continue;
		}
		int rc =
			sonde__fwriter_push_ref(ss->fw, &ss->fbuf, iov[i].iov_base, iov[i].iov_len);
		if (rc < 0) {
			fs->broken = true;
			return 1;
		}
		if (rc > 0)
			fs->backlog = true;
	}
	ss->file_bytes += h + total;
	/* this packet is taken; when the writer cannot take fbuf, the next ones wait in the
	 * buffers for room (asked only per FILE_FLUSH_BYTES, not per packet: it locks) */
	if (ss->fbuf.len >= FILE_FLUSH_BYTES && file_push(ss) < 0)
		fs->broken = true;
	if (ss->fbuf.len >= FILE_FLUSH_BYTES)
		fs->backlog = true;
	return fs->full || fs->broken || fs->backlog;
}

static void release_ring(void *m)
{
	sonde__tbuf_mem_release(m);
}

/* The last drain: nothing more is written into the buffers (Perfetto's service reads them
 * out at once), so the writer may write their packets from where they lie, the memory
 * kept alive for it should the session go first. Where that cannot be set up, the
 * packets are copied as before. */
static void lend_buffers(struct session *ss)
{
	bool ok = true;

	ss->file_sealed = true;
	for (size_t i = 0; i < ss->nbufs; i++) {
		sonde__tbuf_seal(ss->bufs[i]);
		struct tbuf_mem *m = sonde__tbuf_lend(ss->bufs[i]);
		if (!m || sonde__fwriter_hold(ss->fw, release_ring, m) < 0) {
			if (m)
				sonde__tbuf_mem_release(m);
			ok = false;
		}
	}
	ss->file_refs = ok;
}

/* Hands a writer over to the retired list; cancelled, it is stopped now (and freed here
 * if its thread ended at once). */
static void retire(struct svc *s, struct fwriter *w, bool cancel)
{
	if (cancel) {
		sonde__fwriter_cancel(w);
		if (sonde__fwriter_reap(w))
			return;
	}
	if (s->nretired == s->retired_cap) {
		size_t cap = s->retired_cap ? 2 * s->retired_cap : 8;
		struct svc_retired *v = sonde__realloc(s->retired, cap * sizeof(*v));
		if (!v) {
			/* the one blocking way out left, bounded */
			if (!sonde__fwriter_free(w, 100))
				sonde_error(
					"a file writer could not be stopped; it is left running");
			return;
		}
		s->retired = v;
		s->retired_cap = cap;
	}
	if (!cancel)
		for (size_t i = 0, n = 0; i < s->nretired; i++)
			if (!s->retired[i].cancelled && ++n >= SVC_MAX_DRAINING) {
				sonde__fwriter_cancel(w);
				cancel = true;
				break;
			}
	s->retired[s->nretired++] = (struct svc_retired){w, cancel};
}

/* The file failed or stopped draining: the writer goes (a write in progress is
 * abandoned), the session ends with msg as its error. */
static void file_fail(struct svc *s, struct session *ss, const char *msg)
{
	sonde_warn("session %llu: %s", (unsigned long long)ss->id, msg);
	if (!ss->error)
		ss->error = sonde__strdup(msg);
	retire(s, ss->fw, true);
	ss->fw = NULL;
	ss->file_done = true;
	sonde__buf_reset(&ss->fbuf);
	if (ss->state != SESS_DISABLED)
		sonde__session_disable(s, ss, false);
	else
		sonde__session_resolve_if_disabled(s, ss);
}

/* Once DISABLED and everything is queued: fsync (and make a created file readable), then
 * the EnableTracing reply. */
static void file_close_step(struct svc *s, struct session *ss, bool backlog)
{
	if (backlog || ss->fbuf.len)
		return;
	sonde__fwriter_finish(ss->fw, ss->out_created ? 0644 : 0);
	if (!sonde__fwriter_finished(ss->fw))
		return;
	ss->file_done = true;
	sonde__session_resolve_if_disabled(s, ss);
}

void sonde__session_drain_file(struct svc *s, struct session *ss)
{
	struct file_sink fs = {ss, false, false, false};

	if (!ss->fw || ss->file_done)
		return;
	sonde__fwriter_notify(ss->fw, s->file_wake_fd);
	if (sonde__fwriter_stalled_ns(ss->fw, sonde__svc_now(s)) > s->lim.stall_ns) {
		char why[96];
		unsigned long long ms = s->lim.stall_ns / 1000000;
		snprintf(why, sizeof(why),
			 "the output file accepted nothing for %llu %s: session ended",
			 ms % 1000 ? ms : ms / 1000, ms % 1000 ? "ms" : "s");
		file_fail(s, ss, why);
		return;
	}
	if (ss->file_closing) {
		sonde__fwriter_closing(ss->fw);
		if (!ss->file_sealed)
			lend_buffers(ss);
	}
	if (file_push(ss) < 0)
		fs.broken = true;
	fs.backlog = !sonde__fwriter_room(ss->fw, ss->fbuf.len);
	if (!fs.broken && !fs.backlog && !ss->file_full && !sonde__trigger_waiting(ss)) {
		sonde__svcpkt_emit_head(s, ss, file_packet, &fs);
		if (!fs.full && !fs.broken && !fs.backlog)
			sonde__session_read_buffers(s, ss, file_packet, &fs);
		if (!fs.full && !fs.broken && !fs.backlog)
			sonde__svcpkt_emit_tail(s, ss, file_packet, &fs);
	}
	if (!fs.broken && file_push(ss) < 0)
		fs.broken = true;
	if (fs.broken || sonde__fwriter_error(ss->fw)) {
		file_fail(s, ss, "writing the output file failed: session ended");
		return;
	}
	if (fs.full && !ss->file_full) {
		/* max_file_size_bytes reached: stop writing, end the session */
		ss->file_full = true;
		if (ss->state == SESS_STARTED)
			sonde__session_disable(s, ss, false);
	}
	if (ss->file_closing && !ss->file_done)
		file_close_step(s, ss, fs.backlog);
	if ((fs.backlog || (ss->file_closing && !ss->file_done)) && !ss->t_pump)
		ss->t_pump = sonde__loop_timer_add(&s->loop, 20, on_pump, ss->id);
}

int sonde__outfile_init(struct svc *s)
{
	s->file_wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (s->file_wake_fd < 0)
		return -errno;
	s->file_wake_cookie = s->next_conn_id++;
	return sonde__loop_add(&s->loop, s->file_wake_fd, EPOLLIN, s->file_wake_cookie);
}

void sonde__outfile_fini(struct svc *s)
{
	if (s->file_wake_fd < 0)
		return;
	sonde__loop_del(&s->loop, s->file_wake_fd);
	close(s->file_wake_fd);
	s->file_wake_fd = -1;
}

bool sonde__outfile_io(struct svc *s, uint64_t cookie)
{
	uint64_t n;

	if (s->file_wake_fd < 0 || cookie != s->file_wake_cookie)
		return false;
	if (read(s->file_wake_fd, &n, sizeof(n)) < 0)
		return true; /* EAGAIN: an earlier read took it */
	/* which writer it was does not matter: the sessions waiting for room (their retry
	 * timer is set) drain now, a drain with no room yet does nothing, and the others
	 * keep their file_write_period_ms */
	for (size_t i = 0; i < s->nsessions; i++)
		if (s->sessions[i]->fw && !s->sessions[i]->file_done && s->sessions[i]->t_pump)
			sonde__session_drain_file(s, s->sessions[i]);
	return true;
}

/* A freed session's writer finishes its queue on its own; reaped when done or stalled.
 * Beyond SVC_MAX_DRAINING at once (a consumer could make many), it is stopped at once. */
void sonde__outfile_release(struct svc *s, struct session *ss)
{
	if (!ss->fw)
		return;
	file_push(ss);
	sonde__fwriter_finish(ss->fw, ss->out_created ? 0644 : 0);
	retire(s, ss->fw, ss->file_done || sonde__fwriter_finished(ss->fw));
	ss->fw = NULL;
}

void sonde__session_reap_writers(struct svc *s, int wait_ms)
{
	/* the stall is judged on the service's clock; a shutdown's wait is real time */
	uint64_t now = sonde__svc_now(s);
	uint64_t end = sonde__loop_now_ns() + (uint64_t)(wait_ms > 0 ? wait_ms : 0) * 1000000;

	for (size_t i = 0; i < s->nretired;) {
		struct svc_retired *r = &s->retired[i];
		bool gone;
		if (wait_ms > 0) {
			/* shutdown: the wait is shared by all of them */
			now = sonde__loop_now_ns();
			sonde__fwriter_free(r->fw, end > now ? (int)((end - now) / 1000000) : 0);
			gone = true; /* freed, or left running to the process's exit */
		} else {
			if (!r->cancelled &&
			    (sonde__fwriter_finished(r->fw) ||
			     sonde__fwriter_stalled_ns(r->fw, now) > s->lim.stall_ns)) {
				sonde__fwriter_cancel(r->fw);
				r->cancelled = true;
			}
			gone = r->cancelled && sonde__fwriter_reap(r->fw);
		}
		if (gone)
			s->retired[i] = s->retired[--s->nretired];
		else
			i++;
	}
	if (wait_ms > 0) {
		sonde__free(s->retired);
		s->retired = NULL;
		s->retired_cap = 0;
	}
}

int sonde__outfile_open(struct session *ss, const struct conn *c, const char *path, int fd)
{
	bool created = false;

	if ((fd >= 0) == (path != NULL && path[0]))
		return -EINVAL;
	if (fd < 0) {
		fd = sonde__sec_create_output(c, path);
		if (fd < 0)
			return fd;
		created = true; /* 0600 while written, 0644 once DISABLED */
	}
	ss->fw = sonde__fwriter_new(fd, SVC_FILE_QUEUE_BYTES);
	if (!ss->fw) {
		if (created)
			close(fd);
		return -ENOMEM;
	}
	ss->out_created = created;
	return 0;
}
