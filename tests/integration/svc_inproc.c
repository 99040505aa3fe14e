#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sonde/service.h>

#include "../test.h"
#include "../util.h"
#include "service/internal.h"
#include "svc_inproc.h"

static struct inproc *current; /* svc_util_pump has no argument: one harness at a time */

static uint64_t fake_now(void *ctx)
{
	return ((const struct inproc *)ctx)->now_ns;
}

/* Whether the service has something to do now: a readable socket, a due timer, or a
 * request left from the last round. */
static bool ready(const struct inproc *h)
{
	struct pollfd p = {sonde_service__fd(h->svc), POLLIN, 0};

	return sonde_service__timeout_ms(h->svc) == 0 || poll(&p, 1, 0) > 0;
}

bool inproc_run(struct inproc *h)
{
	bool did = false;

	for (unsigned n = 0; ready(h); n++) {
		/* a service that is never idle on a clock that does not move is a defect */
		if (n == 100000)
			FAIL("the service was still busy after %u rounds", n);
		ASSERT_OK(sonde_service__process(h->svc));
		h->rounds++;
		did = true;
	}
	return did;
}

bool inproc_wait_thread(struct inproc *h, int timeout_ms)
{
	struct pollfd p = {sonde_service__fd(h->svc), POLLIN, 0};

	inproc_run(h);
	if (poll(&p, 1, timeout_ms) <= 0)
		return false;
	inproc_run(h);
	return true;
}

static bool pump(void)
{
	return inproc_run(current);
}

static void writers_done(struct inproc *h)
{
	double end = test_now() + 20;

	while (!h->writer_blocks && sonde__service_writers_busy(h->svc) && test_now() < end)
		inproc_wait_thread(h, 1);
}

void inproc_advance(struct inproc *h, uint64_t ms)
{
	uint64_t end = h->now_ns + ms * 1000000ull;

	inproc_run(h);
	for (;;) {
		writers_done(h);
		int t = sonde_service__timeout_ms(h->svc);
		if (t < 0 || h->now_ns + (uint64_t)t * 1000000ull > end)
			break;
		h->now_ns += (uint64_t)t * 1000000ull;
		inproc_run(h);
	}
	writers_done(h);
	h->now_ns = end;
	inproc_run(h);
}

struct tc_msg *inproc_wait_writer_reply(struct inproc *h, struct tc *c, uint64_t req, int timeout_s)
{
	double end = test_now() + timeout_s;
	struct tc_msg *m;

	/* the thread wakes the loop when its finish is done; the clock moves only while it
	 * does not, 20 ms per 100 ms of real time: the service's stall watchdog, on the same
	 * clock, must not take a slow fsync on a loaded machine for a stalled file */
	while (!(m = tc_wait(c, req, 0)) && test_now() < end)
		if (!inproc_wait_thread(h, 100))
			inproc_advance(h, 20);
	return m;
}

int inproc_file_count_when(const char *path, const char *tag, int count)
{
	double end = test_now() + 20;
	int n = 0;

	for (;;) {
		size_t len = 0;
		char *data = test_read_file(path, &len);
		struct buf file = {.data = (uint8_t *)data, .len = len, .cap = len};
		n = data ? trace_count(&file, tag, strlen(tag), NULL) : 0;
		free(data);
		/* and the writer done with them: its thread may not have counted the write
		 * yet, and a test moving the clock 10 s on would take it for a stall */
		if ((n >= count && !(current && sonde__service_writers_busy(current->svc))) ||
		    test_now() > end)
			return n;
		usleep(1000);
	}
}

void inproc_up(struct inproc *h)
{
	struct sonde_service_opts o = {.sz = sizeof(o)};

	inproc_up_opts(h, &o);
}

void inproc_up_opts(struct inproc *h, const struct sonde_service_opts *opts)
{
	struct sonde_service_opts o = *opts;

	ASSERT(current == NULL);
	memset(h, 0, sizeof(*h));
	if (!o.producer_socket)
		o.producer_socket = test_path("inproc-producer.sock");
	if (!o.consumer_socket)
		o.consumer_socket = test_path("inproc-consumer.sock");
	o.connector_socket = "none";
	h->svc = sonde_service__new(&o);
	if (!h->svc)
		FAIL("cannot create the service: %s", strerror(errno));
	/* far from 0, which some bookkeeping reads as "never" */
	h->now_ns = 1000ull * 1000000000ull;
	sonde__service_set_clock(h->svc, fake_now, h);
	current = h;
	svc_util_pump = pump;
}

void inproc_down(struct inproc *h)
{
	inproc_run(h);
	sonde_service__free(h->svc);
	h->svc = NULL;
	svc_util_pump = NULL;
	current = NULL;
}

void inproc_sockets(const struct inproc *h, struct sonded *d)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->psock, sizeof(d->psock), "%s", sonde_service__socket(h->svc, 0));
	snprintf(d->csock, sizeof(d->csock), "%s", sonde_service__socket(h->svc, 1));
}

int inproc_adopt(struct inproc *h, bool producer)
{
	int sv[2];

	ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv));
	ASSERT_OK(sonde__service_adopt(h->svc, sv[0], producer));
	return sv[1];
}

void inproc_producer(struct inproc *h, struct tprod *p, const char *name, bool scraping)
{
	tprod_open_fd(p, inproc_adopt(h, true), name, scraping);
}

void inproc_consumer(struct inproc *h, struct tc *c)
{
	tc_open_fd(c, inproc_adopt(h, false), "ConsumerPort");
}

void inproc_consumer_small_sndbuf(struct inproc *h, struct tc *c)
{
	int sv[2], one = 1;

	ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv));
	ASSERT_OK(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &one, sizeof(one)));
	ASSERT_OK(sonde__service_adopt(h->svc, sv[0], false));
	tc_open_fd(c, sv[1], "ConsumerPort");
}

/* One stream of inproc_run_program's program, read from its file once it ended. */
static char *slurp(const char *path, size_t *len)
{
	char *text = test_read_file(path, len);

	if (!text)
		FAIL("read %s: %s", path, strerror(errno));
	return text;
}

void inproc_run_program(struct inproc *h, struct test_output *o, int timeout_s,
			const char *const argv[])
{
	const char *out_path = test_path("inproc-program.out");
	char err_path[4096];
	int status;

	snprintf(err_path, sizeof(err_path), "%s", test_path("inproc-program.err"));
	memset(o, 0, sizeof(*o));
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		FAIL("fork: %s", strerror(errno));
	if (pid == 0) {
		int in = open("/dev/null", O_RDONLY);
		int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (in < 0 || out < 0 || err < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 ||
		    dup2(err, 2) < 0)
			_exit(126);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pidfd < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		FAIL("pidfd_open: %s", strerror(errno));
	}
	double end = test_now() + timeout_s;
	for (;;) {
		inproc_run(h);
		struct pollfd p[2] = {{sonde_service__fd(h->svc), POLLIN, 0}, {pidfd, POLLIN, 0}};
		double left = end - test_now();
		if (left <= 0) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			close(pidfd);
			FAIL("%s did not end within %d s", argv[0], timeout_s);
		}
		if (poll(p, 2, (int)(left * 1000) + 1) < 0 && errno != EINTR)
			FAIL("poll: %s", strerror(errno));
		if (p[1].revents)
			break;
	}
	close(pidfd);
	/* what it sent before it ended is answered: a reply it did not wait for is none of
	 * its output */
	inproc_run(h);
	if (waitpid(pid, &status, 0) != pid)
		FAIL("waitpid: %s", strerror(errno));
	o->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	o->out = slurp(out_path, &o->out_len);
	o->err = slurp(err_path, &o->err_len);
}
