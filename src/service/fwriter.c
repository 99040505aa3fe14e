/* The writer thread of one write_into_file output (fwriter.h says why a thread). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "service/fwriter.h"
#include "service/loop.h"

struct fwriter {
	pthread_t thread;
	pthread_mutex_t lock; /* guards everything below but `out` */
	pthread_cond_t work;  /* to the thread: bytes, a finish, or stop */
	pthread_cond_t idle;  /* to sonde__fwriter_free: the queue is written out */
	int fd;
	size_t max;
	struct buf q;	   /* queued by the loop, not yet taken by the thread */
	struct buf out;	   /* taken by the thread; only it touches this */
	size_t inflight;   /* bytes of `out` not written yet */
	uint64_t since_ns; /* last progress, or when bytes began to wait */
	int err;
	unsigned mode;
	bool finish_req, finished, stop;
	int wake_fd;	/* eventfd of sonde__fwriter_notify, or -1 */
	bool want_room; /* the loop found the queue full: wake it when it empties */
};

/* Called with the lock held: the queue has room again. */
static void wake_loop(struct fwriter *w)
{
	uint64_t one = 1;

	if (!w->want_room || w->wake_fd < 0)
		return;
	w->want_room = false;
	/* an eventfd write only fails at a counter of 2^64 - 2, which a read resets */
	if (write(w->wake_fd, &one, sizeof(one)) < 0)
		w->want_room = true;
}

static int write_out(struct fwriter *w)
{
	size_t off = 0;

	while (off < w->out.len) {
		pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
		ssize_t n = write(w->fd, w->out.data + off, w->out.len - off);
		int e = errno;
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
		if (n < 0 && e == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -e : -EIO;
		off += (size_t)n;
		pthread_mutex_lock(&w->lock);
		w->inflight -= (size_t)n;
		w->since_ns = sonde__loop_now_ns();
		pthread_mutex_unlock(&w->lock);
	}
	return 0;
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
	struct buf t = w->q;

	w->q = w->out;
	w->out = t;
	w->inflight = w->out.len;
	/* the loop fills the queue again while this batch is written */
	wake_loop(w);
	pthread_mutex_unlock(&w->lock);
	int rc = write_out(w);
	pthread_mutex_lock(&w->lock);
	sonde__buf_reset(&w->out);
	w->inflight = 0;
	if (rc < 0 && !w->err) {
		w->err = rc;
		sonde__buf_reset(&w->q);
	}
	pthread_cond_broadcast(&w->idle);
}

static void *run(void *arg)
{
	struct fwriter *w = arg;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	pthread_mutex_lock(&w->lock);
	while (!w->stop) {
		if (w->q.len && !w->err) {
			write_queue(w);
		} else if (w->finish_req && !w->finished) {
			pthread_mutex_unlock(&w->lock);
			finish(w);
			pthread_mutex_lock(&w->lock);
			w->finished = true;
			pthread_cond_broadcast(&w->idle);
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
	bool ok = w->q.len == 0 || w->q.len + n <= w->max;

	if (!ok)
		w->want_room = true;
	return ok;
}

/* Called with the lock held: n bytes (n > 0) go into the queue. */
static void queued(struct fwriter *w)
{
	/* the stall clock starts with the first byte waiting */
	if (!w->inflight)
		w->since_ns = sonde__loop_now_ns();
	pthread_cond_signal(&w->work);
}

int sonde__fwriter_push(struct fwriter *w, const void *p, size_t n)
{
	int rc = 0;

	pthread_mutex_lock(&w->lock);
	if (w->err)
		rc = w->err;
	else if (!fits(w, n))
		rc = -ENOBUFS;
	else if (n) {
		if (!w->q.len)
			queued(w);
		sonde__buf_append(&w->q, p, n);
		rc = buf_error(&w->q);
	}
	pthread_mutex_unlock(&w->lock);
	return rc;
}

int sonde__fwriter_push_buf(struct fwriter *w, struct buf *b)
{
	int rc = 0;

	pthread_mutex_lock(&w->lock);
	if (w->err)
		rc = w->err;
	else if (!fits(w, b->len))
		rc = -ENOBUFS;
	else if (b->len && !w->q.len) {
		/* the common case: the bytes change hands, not places */
		struct buf t = w->q;
		w->q = *b;
		*b = t;
		queued(w);
	} else if (b->len) {
		sonde__buf_append(&w->q, b->data, b->len);
		rc = buf_error(&w->q);
	}
	if (rc == 0)
		sonde__buf_reset(b);
	pthread_mutex_unlock(&w->lock);
	return rc;
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
	bool waiting = w->q.len || w->inflight || (w->finish_req && !w->finished);
	uint64_t since = w->since_ns;
	pthread_mutex_unlock(&w->lock);
	return waiting && now_ns > since ? now_ns - since : 0;
}

void sonde__fwriter_finish(struct fwriter *w, unsigned mode)
{
	pthread_mutex_lock(&w->lock);
	if (!w->finish_req) {
		w->finish_req = true;
		w->mode = mode;
		if (!w->q.len && !w->inflight)
			w->since_ns = sonde__loop_now_ns();
		pthread_cond_signal(&w->work);
	}
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

int sonde__fwriter_copy_to(struct fwriter *w, int fd, int timeout_ms, uint64_t *copied)
{
	struct timespec ts = deadline_in(CLOCK_MONOTONIC, timeout_ms);
	uint64_t n = 0;
	int rc = 0;

	pthread_mutex_lock(&w->lock);
	while (w->inflight && !w->err)
		if (pthread_cond_timedwait(&w->idle, &w->lock, &ts) == ETIMEDOUT)
			break;
	if (w->err)
		rc = w->err;
	else if (w->inflight)
		rc = -ETIMEDOUT;
	else if ((rc = copy_file(w->fd, fd, &n)) == 0 && (rc = write_all(fd, w->q.data, w->q.len)) == 0)
		n += w->q.len;
	pthread_mutex_unlock(&w->lock);
	*copied = n;
	return rc;
}

static void destroy(struct fwriter *w)
{
	close(w->fd);
	sonde__buf_free(&w->q);
	sonde__buf_free(&w->out);
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
	while ((w->q.len || w->inflight || (w->finish_req && !w->finished)) && !w->err && !w->stop)
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
