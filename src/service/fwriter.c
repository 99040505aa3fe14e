/* The writer thread of one write_into_file output (fwriter.h says why a thread). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "service/fwriter.h"
#include "service/loop.h"

/* The bytes queued are a list of the loop's buffers, taken as they are: the loop hands
 * over the buffer it filled and gets an empty one back (from `spare`, with its memory,
 * so that it does not grow again), and the thread writes the list with writev(). Before,
 * a buffer queued behind another was appended to it, one more copy of every byte on the
 * loop's side, which bound a file's drain more than the write() did. A segment may also
 * be borrowed bytes (sonde__fwriter_push_ref), written from where they lie. */
struct seg {
	const uint8_t *p; /* the bytes to write: own.data, or borrowed */
	size_t len;
	struct buf own;
};

struct segs {
	struct seg *v;
	size_t n, cap;
};

/* What sonde__fwriter_hold keeps alive until the writer is destroyed. */
struct hold {
	void (*release)(void *);
	void *arg;
};

enum {
	/* below this, bytes queued behind others are appended to the last buffer: a copy
	 * that costs less than a buffer of its own, and keeps the list short */
	SMALL_PUSH = 64 * 1024,
	/* emptied buffers kept for the loop to fill again */
	MAX_SPARE = 4,
};

struct fwriter {
	pthread_t thread;
	pthread_mutex_t lock; /* guards everything below but `out` */
	pthread_cond_t work;  /* to the thread: bytes, a finish, or stop */
	pthread_cond_t idle;  /* to sonde__fwriter_free: the queue is written out */
	int fd;
	size_t max;
	struct segs q;	 /* queued by the loop, not yet taken by the thread */
	size_t qlen;	 /* bytes in q */
	struct segs out; /* taken by the thread; only it touches this */
	struct buf spare[MAX_SPARE];
	size_t nspare;
	size_t inflight;   /* bytes of `out` not written yet */
	off_t wb_end;	   /* the file's bytes before it are sent to the disk; only the thread */
	uint64_t progress; /* counts writes that took bytes, queues begun, the finish asked */
	/* the loop's alone (sonde__fwriter_stalled_ns): the progress count it last saw and
	 * when, on its own clock; the thread never reads a clock */
	uint64_t seen_progress, seen_ns;
	bool seen;
	int err;
	unsigned mode;
	bool finish_req, finished, stop;
	bool closing;	    /* sonde__fwriter_closing: send each batch to the disk at once */
	int wake_fd;	    /* eventfd of sonde__fwriter_notify, or -1 */
	bool want_room;	    /* the loop found the queue full: wake it when it empties */
	struct hold *holds; /* the loop's alone */
	size_t nholds;
};

static void segs_clear(struct segs *l)
{
	for (size_t i = 0; i < l->n; i++)
		sonde__buf_free(&l->v[i].own);
	l->n = 0;
}

static void segs_free(struct segs *l)
{
	segs_clear(l);
	sonde__free(l->v);
	*l = (struct segs){0};
}

/* Room for k more segments at the end of l. */
static int segs_reserve(struct segs *l, size_t k)
{
	if (l->n + k > l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 8;
		while (cap < l->n + k)
			cap *= 2;
		struct seg *v = sonde__realloc(l->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	return 0;
}

/* Called with the lock held: the buffers of `out` are written; they become spares (their
 * memory kept) or are freed. */
static void recycle_out(struct fwriter *w)
{
	for (size_t i = 0; i < w->out.n; i++) {
		struct buf *b = &w->out.v[i].own;
		if (!b->data)
			continue; /* borrowed */
		if (w->nspare < MAX_SPARE) {
			sonde__buf_reset(b);
			w->spare[w->nspare++] = *b;
		} else {
			sonde__buf_free(b);
		}
	}
	w->out.n = 0;
}

/* Called with the lock held: the queue has room again, or the finish is done. */
static void wake_loop(struct fwriter *w, bool always)
{
	uint64_t one = 1;

	if (!(w->want_room || always) || w->wake_fd < 0)
		return;
	w->want_room = false;
	/* an eventfd write only fails at a counter of 2^64 - 2, which a read resets */
	if (write(w->wake_fd, &one, sizeof(one)) < 0)
		w->want_room = true;
}

/* Writes the segments of `out` in order, as few writev() calls as the kernel allows. */
static int write_out(struct fwriter *w)
{
	struct iovec iov[256];
	size_t seg = 0, off = 0; /* the first byte not written yet */

	while (seg < w->out.n) {
		int n = 0;
		for (size_t i = seg; i < w->out.n && n < (int)(sizeof(iov) / sizeof(iov[0])); i++) {
			size_t skip = i == seg ? off : 0;
			iov[n++] = (struct iovec){(void *)(w->out.v[i].p + skip),
						  w->out.v[i].len - skip};
		}
		pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
		ssize_t k = writev(w->fd, iov, n);
		int e = errno;
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
		if (k < 0 && e == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -e : -EIO;
		for (size_t left = (size_t)k; left;) {
			size_t in_seg = w->out.v[seg].len - off;
			size_t t = left < in_seg ? left : in_seg;
			off += t;
			left -= t;
			if (off == w->out.v[seg].len) {
				seg++;
				off = 0;
			}
		}
		pthread_mutex_lock(&w->lock);
		w->inflight -= (size_t)k;
		w->progress++;
		pthread_mutex_unlock(&w->lock);
	}
	return 0;
}

/* The file is about to be fsynced: its dirty pages go to the disk now, while the next
 * batch is written, not all at the fsync (which then waits for the last batches only).
 * Not while the session runs: there the page cache absorbs what a slow disk could not
 * take at once. Nothing to do for a pipe or socket (ESPIPE), and an error here shows
 * again at the fsync, which counts. */
static void start_writeback(struct fwriter *w)
{
	off_t end = lseek(w->fd, 0, SEEK_CUR);

	/* whole pages only: the next batch writes on into the last one, which would wait for
	 * its writeback on a disk that wants stable pages */
	end &= ~(off_t)4095;
	if (end <= w->wb_end)
		return;
	pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
	sync_file_range(w->fd, w->wb_end, end - w->wb_end, SYNC_FILE_RANGE_WRITE);
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	w->wb_end = end;
}

static void finish(struct fwriter *w)
{
	pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
	fsync(w->fd); /* EINVAL for a pipe or socket: nothing to sync */
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	if (w->mode)
		fchmod(w->fd, w->mode);
}

/* Called with the lock held; returns with it held. */
static void write_queue(struct fwriter *w)
{
	struct segs t = w->q;

	w->q = w->out;
	w->out = t;
	w->inflight = w->qlen;
	w->qlen = 0;
	/* the loop fills the queue again while this batch is written */
	wake_loop(w, false);
	bool closing = w->closing;
	pthread_mutex_unlock(&w->lock);
	int rc = write_out(w);
	if (rc == 0 && closing)
		start_writeback(w);
	pthread_mutex_lock(&w->lock);
	recycle_out(w);
	w->inflight = 0;
	if (rc < 0 && !w->err) {
		w->err = rc;
		segs_clear(&w->q);
		w->qlen = 0;
	}
	pthread_cond_broadcast(&w->idle);
}

static void *run(void *arg)
{
	struct fwriter *w = arg;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	pthread_mutex_lock(&w->lock);
	while (!w->stop) {
		if (w->qlen && !w->err) {
			write_queue(w);
		} else if (w->finish_req && !w->finished) {
			pthread_mutex_unlock(&w->lock);
			finish(w);
			pthread_mutex_lock(&w->lock);
			w->finished = true;
			pthread_cond_broadcast(&w->idle);
			/* the loop sends the EnableTracing reply now, not at its next retry */
			wake_loop(w, true);
		} else {
			pthread_cond_wait(&w->work, &w->lock);
		}
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

struct fwriter *sonde__fwriter_new(int fd, size_t max_queued)
{
	struct fwriter *w = sonde__calloc(1, sizeof(*w));
	pthread_condattr_t ca;
	int rc;

	if (!w)
		return NULL;
	w->fd = fd;
	w->max = max_queued;
	w->wake_fd = -1;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->work, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->idle, &ca);
	pthread_condattr_destroy(&ca);
	if ((rc = pthread_create(&w->thread, NULL, run, w)) != 0) {
		pthread_cond_destroy(&w->idle);
		pthread_cond_destroy(&w->work);
		pthread_mutex_destroy(&w->lock);
		sonde__free(w);
		errno = rc;
		return NULL;
	}
	return w;
}

/* An empty queue takes anything, so that a packet larger than the bound still goes. The
 * batch being written is not counted: the loop fills the next one meanwhile, so the file
 * never waits for the loop (at most twice the bound is held). A full queue asks for a
 * wake-up when the thread takes it. */
static bool fits(struct fwriter *w, size_t n)
{
	bool ok = w->qlen == 0 || w->qlen + n <= w->max;

	if (!ok)
		w->want_room = true;
	return ok;
}

/* Called with the lock held: n bytes (n > 0) go into the queue. */
static void queued(struct fwriter *w)
{
	/* the stall clock starts with the first byte waiting */
	if (!w->inflight)
		w->progress++;
	pthread_cond_signal(&w->work);
}

/* Called with the lock held: b's bytes (b->len > 0) join the queue; b is left empty. */
static int enqueue(struct fwriter *w, struct buf *b)
{
	size_t n = b->len;

	struct seg *last = w->q.n ? &w->q.v[w->q.n - 1] : NULL;

	if (last && last->own.data && n < SMALL_PUSH) {
		if (sonde__buf_reserve(&last->own, n) < 0) {
			last->own.failed = false; /* nothing was taken: what it holds is whole */
			return -ENOMEM;
		}
		sonde__buf_append(&last->own, b->data, n);
		*last = (struct seg){last->own.data, last->own.len, last->own};
		sonde__buf_reset(b);
	} else {
		if (segs_reserve(&w->q, 1) < 0)
			return -ENOMEM;
		/* the bytes change hands, not places; b gets an emptied buffer back */
		w->q.v[w->q.n++] = (struct seg){b->data, n, *b};
		*b = w->nspare ? w->spare[--w->nspare] : (struct buf)BUF_INIT;
	}
	if (!w->qlen)
		queued(w);
	w->qlen += n;
	return 0;
}

int sonde__fwriter_push_buf(struct fwriter *w, struct buf *b)
{
	int rc = 0;

	pthread_mutex_lock(&w->lock);
	if (w->err)
		rc = w->err;
	else if (!fits(w, b->len))
		rc = -ENOBUFS;
	else if (b->len)
		rc = enqueue(w, b);
	if (rc == 0)
		sonde__buf_reset(b);
	pthread_mutex_unlock(&w->lock);
	return rc;
}

int sonde__fwriter_push_ref(struct fwriter *w, struct buf *before, const void *p, size_t n)
{
	int rc = 0;

	pthread_mutex_lock(&w->lock);
	if (w->err)
		rc = w->err;
	else if (segs_reserve(&w->q, 2) < 0) /* enqueue's and ours: nothing fails after */
		rc = -ENOMEM;
	else if (before->len)
		rc = enqueue(w, before);
	if (rc == 0 && n) {
		w->q.v[w->q.n++] = (struct seg){p, n, BUF_INIT};
		if (!w->qlen)
			queued(w);
		w->qlen += n;
	}
	if (rc == 0 && !fits(w, 0))
		rc = 1;
	pthread_mutex_unlock(&w->lock);
	return rc;
}

int sonde__fwriter_hold(struct fwriter *w, void (*release)(void *), void *arg)
{
	struct hold *v = sonde__realloc(w->holds, (w->nholds + 1) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	w->holds = v;
	w->holds[w->nholds++] = (struct hold){release, arg};
	return 0;
}

bool sonde__fwriter_room(struct fwriter *w, size_t n)
{
	pthread_mutex_lock(&w->lock);
	bool ok = fits(w, n);
	pthread_mutex_unlock(&w->lock);
	return ok;
}

void sonde__fwriter_notify(struct fwriter *w, int wake_fd)
{
	pthread_mutex_lock(&w->lock);
	if (!w->stop)
		w->wake_fd = wake_fd;
	pthread_mutex_unlock(&w->lock);
}

uint64_t sonde__fwriter_stalled_ns(struct fwriter *w, uint64_t now_ns)
{
	pthread_mutex_lock(&w->lock);
	bool waiting = w->qlen || w->inflight || (w->finish_req && !w->finished);
	uint64_t progress = w->progress;
	pthread_mutex_unlock(&w->lock);
	if (!waiting) {
		w->seen = false;
		return 0;
	}
	if (!w->seen || progress != w->seen_progress) {
		w->seen = true;
		w->seen_progress = progress;
		w->seen_ns = now_ns;
		return 0;
	}
	return now_ns > w->seen_ns ? now_ns - w->seen_ns : 0;
}

bool sonde__fwriter_busy(struct fwriter *w)
{
	pthread_mutex_lock(&w->lock);
	bool busy = w->qlen || w->inflight || (w->finish_req && !w->finished);
	pthread_mutex_unlock(&w->lock);
	return busy;
}

void sonde__fwriter_finish(struct fwriter *w, unsigned mode)
{
	pthread_mutex_lock(&w->lock);
	if (!w->finish_req) {
		w->finish_req = true;
		w->mode = mode;
		if (!w->qlen && !w->inflight)
			w->progress++;
		pthread_cond_signal(&w->work);
	}
	pthread_mutex_unlock(&w->lock);
}

void sonde__fwriter_closing(struct fwriter *w)
{
	pthread_mutex_lock(&w->lock);
	w->closing = true;
	pthread_mutex_unlock(&w->lock);
}

bool sonde__fwriter_finished(struct fwriter *w)
{
	pthread_mutex_lock(&w->lock);
	bool done = w->finished || w->err;
	pthread_mutex_unlock(&w->lock);
	return done;
}

int sonde__fwriter_error(struct fwriter *w)
{
	pthread_mutex_lock(&w->lock);
	int e = w->err;
	pthread_mutex_unlock(&w->lock);
	return e;
}

static struct timespec deadline_in(clockid_t clk, int timeout_ms)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	return ts;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* The whole of file `from`, from offset 0 to its end, appended to `to`. */
static int copy_file(int from, int to, uint64_t *copied)
{
	enum { CHUNK = 256 * 1024 };
	uint8_t *tmp = sonde__malloc(CHUNK);
	uint64_t off = 0;
	int rc = tmp ? 0 : -ENOMEM;

	while (rc == 0) {
		ssize_t n = pread(from, tmp, CHUNK, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : 0;
			break;
		}
		rc = write_all(to, tmp, (size_t)n);
		off += (uint64_t)n;
	}
	sonde__free(tmp);
	*copied = off;
	return rc;
}

/* Why the service's loop may not read or write fd (0: it may, 1: not a regular file, 2: on
 * a FUSE mount): only a regular file's reads and writes end by themselves, and not on a
 * FUSE mount, whose server may never answer (a pipe nobody reads, a socket, a tty whose
 * output is stopped block forever). */
static int uncopyable(int fd)
{
	struct stat st;
	struct statfs sf;

	if (fstat(fd, &st) < 0 || fstatfs(fd, &sf) < 0 || !S_ISREG(st.st_mode))
		return 1;
	return sf.f_type == FUSE_SUPER_MAGIC ? 2 : 0;
}

int sonde__fwriter_copy_to(struct fwriter *w, int fd, int timeout_ms, uint64_t *copied,
			   const char **why)
{
	static const char *const reasons[2][2] = {
		{"the session's output is not a regular file",
		 "the session's output is on a FUSE mount"},
		{"the descriptor sent is not a regular file", "the descriptor sent is on a FUSE mount"},
	};
	struct timespec ts = deadline_in(CLOCK_MONOTONIC, timeout_ms);
	uint64_t n = 0;
	int rc = 0, which = 0;
	/* the writer's fd does not change: no lock to read it */
	int bad = uncopyable(w->fd);

	*copied = 0;
	if (!bad)
		bad = uncopyable(fd), which = 1;
	if (bad) {
		*why = reasons[which][bad - 1];
		return -EINVAL;
	}
	*why = NULL;
	pthread_mutex_lock(&w->lock);
	while (w->inflight && !w->err)
		if (pthread_cond_timedwait(&w->idle, &w->lock, &ts) == ETIMEDOUT)
			break;
	if (w->err)
		rc = w->err;
	else if (w->inflight)
		rc = -ETIMEDOUT;
	else if ((rc = copy_file(w->fd, fd, &n)) == 0)
		for (size_t i = 0; i < w->q.n && rc == 0; i++)
			if ((rc = write_all(fd, w->q.v[i].p, w->q.v[i].len)) == 0)
				n += w->q.v[i].len;
	pthread_mutex_unlock(&w->lock);
	*copied = n;
	return rc;
}

static void destroy(struct fwriter *w)
{
	close(w->fd);
	segs_free(&w->q);
	segs_free(&w->out);
	for (size_t i = 0; i < w->nspare; i++)
		sonde__buf_free(&w->spare[i]);
	/* the thread has ended: nothing borrowed is read any more */
	for (size_t i = 0; i < w->nholds; i++)
		w->holds[i].release(w->holds[i].arg);
	sonde__free(w->holds);
	pthread_cond_destroy(&w->idle);
	pthread_cond_destroy(&w->work);
	pthread_mutex_destroy(&w->lock);
	sonde__free(w);
}

void sonde__fwriter_cancel(struct fwriter *w)
{
	pthread_mutex_lock(&w->lock);
	w->stop = true;
	w->wake_fd = -1; /* the service may close it before the thread ends */
	pthread_cond_signal(&w->work);
	pthread_mutex_unlock(&w->lock);
	pthread_cancel(w->thread);
}

bool sonde__fwriter_reap(struct fwriter *w)
{
	if (pthread_tryjoin_np(w->thread, NULL) != 0)
		return false;
	destroy(w);
	return true;
}

bool sonde__fwriter_free(struct fwriter *w, int timeout_ms)
{
	uint64_t end = sonde__loop_now_ns() + (uint64_t)timeout_ms * 1000000;

	if (!w)
		return true;
	pthread_mutex_lock(&w->lock);
	struct timespec ts = deadline_in(CLOCK_MONOTONIC, timeout_ms);
	while ((w->qlen || w->inflight || (w->finish_req && !w->finished)) && !w->err && !w->stop)
		if (pthread_cond_timedwait(&w->idle, &w->lock, &ts) == ETIMEDOUT)
			break;
	pthread_mutex_unlock(&w->lock);
	sonde__fwriter_cancel(w);
	uint64_t now = sonde__loop_now_ns();
	ts = deadline_in(CLOCK_REALTIME, now < end ? (int)((end - now) / 1000000) : 0);
	if (pthread_timedjoin_np(w->thread, NULL, &ts) != 0)
		return false; /* left to the process's exit */
	destroy(w);
	return true;
}
