/* An unprivileged user (uid nobody) against sessions of root, over sonded's sockets (which
 * are 0666 by default, in a test directory every user may traverse). A consumer reaches
 * only its own session: nobody cannot read, flush, stop, free, attach to or clone root's
 * sessions, and gets a clear refusal where the protocol has one (ReadBuffers, DisableTracing
 * and FreeBuffers act on the caller's own session, so for a caller without one they read
 * nothing and stop nothing, as in traced). With lockdown, nobody's
 * producer is refused at InitializeConnection with an error naming the reason. Root's
 * witness session runs meanwhile and must lose nothing. */
#include <grp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "base/pb.h"
#include "hostile_util.h"
#include "ipc/protos.h"
#include "ipc/sock.h"
#include "svc_util.h"

enum { NOBODY = 65534 };

static bool become_nobody(void)
{
	return setgroups(0, NULL) == 0 && setgid(NOBODY) == 0 && setuid(NOBODY) == 0 &&
	       getuid() == NOBODY;
}

/* Invokes method with args (or none) and returns the answer's kind (enum ipc_msg). */
static int call(int fd, uint64_t id, uint32_t method, const struct buf *args, struct raw_reply *r)
{
	if (raw_invoke(fd, id, method, 0, args) < 0)
		return -1;
	return raw_reply(fd, id, r);
}

/* A CloneSessionResponse with success false and an error containing why. */
static bool clone_refused(const struct raw_reply *r, const char *why)
{
	struct pb_reader rd = pb_reader_init(r->data, r->data_len);
	struct pb_field f;
	bool ok = false, named = false;

	while (sonde__pb_next(&rd, &f) > 0) {
		if (f.num == PF_CLONE_SESSION_RESP_SUCCESS && f.wire == PB_VARINT)
			ok = f.u != 0;
		else if (f.num == PF_CLONE_SESSION_RESP_ERROR && f.wire == PB_LEN)
			named = memmem(f.ptr, f.len, why, strlen(why)) != NULL;
	}
	return !ok && named;
}

static int nobody_consumer(void *arg)
{
	struct hostile *h = arg;
	struct raw_reply r;
	struct buf key = BUF_INIT;

	if (!become_nobody())
		return 90;
	int fd = sonde__ipc_connect(h->d.csock);
	if (fd < 0)
		return 91; /* the consumer socket must be open to every user */
	if (!raw_bind_answered(fd, "ConsumerPort"))
		return 92;
	/* read: nothing at all, in one final reply (a consumer has no handle on others') */
	if (call(fd, 2, PF_CONSUMER_READ_BUFFERS, NULL, &r) != IPC_MSG_INVOKE_METHOD_REPLY ||
	    !r.success || r.has_more || r.data_len != 0)
		return 93;
	/* flush and stats: refused, there is no session of its own */
	if (call(fd, 3, PF_CONSUMER_FLUSH, NULL, &r) < 0 || r.success)
		return 94;
	if (call(fd, 4, PF_CONSUMER_GET_TRACE_STATS, NULL, &r) < 0 || r.success)
		return 95;
	/* attach to root's detached session by its key: refused (the key is per uid) */
	sonde__pb_put_string(&key, PF_DETACH_REQ_KEY, "root-key");
	if (call(fd, 5, PF_CONSUMER_ATTACH, &key, &r) < 0 || r.success)
		return 96;
	/* clone root's witness session (id 1) and its detached one (id 2): refused because
	 * they belong to another uid, not because they do not exist */
	for (uint64_t id = 1; id <= 2; id++) {
		sonde__buf_reset(&key);
		sonde__pb_put_varint(&key, PF_CLONE_SESSION_REQ_SESSION_ID, id);
		if (call(fd, 5 + id, PF_CONSUMER_CLONE_SESSION, &key, &r) < 0 || !r.success ||
		    !clone_refused(&r, "permission denied"))
			return 97;
	}
	/* stop and free act on its own (absent) session: nothing happens to root's */
	if (call(fd, 8, PF_CONSUMER_DISABLE_TRACING, NULL, &r) < 0)
		return 98;
	if (call(fd, 9, PF_CONSUMER_FREE_BUFFERS, NULL, &r) < 0)
		return 99;
	sonde__buf_free(&key);
	close(fd);
	return 0;
}

TEST_TIMEOUT(hostile_unprivileged_consumer_cannot_reach_root_sessions, 120)
{
	static const char *const ds[] = {"hostile.ds"};
	struct hostile h;
	struct buf cfg = BUF_INIT, key = BUF_INIT;
	struct tc root;

	if (geteuid() != 0)
		SKIP("needs root to switch to uid nobody");
	hostile_up(&h, NULL);
	/* a second root session, detached under a key */
	tc_open(&root, h.d.csock, "ConsumerPort");
	tcfg_basic(&cfg, 64, ds, 1);
	tcons_enable(&root, &cfg, -1);
	sonde__pb_put_string(&key, PF_DETACH_REQ_KEY, "root-key");
	tc_msg_free(tc_ok(&root, tc_call(&root, "Detach", &key, -1, false)));
	tc_close(&root);
	ASSERT_INT(hostile_run(&h, nobody_consumer, &h, 60), ==, 0);
	/* the detached session is still there for root */
	tc_open(&root, h.d.csock, "ConsumerPort");
	tc_msg_free(tc_ok(&root, tc_call(&root, "Attach", &key, -1, false)));
	tc_msg_free(tc_ok(&root, tc_call(&root, "FreeBuffers", NULL, -1, false)));
	tc_close(&root);
	sonde__buf_free(&cfg);
	sonde__buf_free(&key);
	hostile_down(&h); /* and the witness lost nothing */
}

static int nobody_producer(void *arg)
{
	struct hostile *h = arg;
	struct raw_reply r;
	struct buf a = BUF_INIT;

	if (!become_nobody())
		return 90;
	int fd = sonde__ipc_connect(h->d.psock);
	if (fd < 0 || !raw_bind_answered(fd, "ProducerPort"))
		return 91;
	sonde__pb_put_string(&a, PF_INIT_CONN_REQ_PRODUCER_NAME, "nobody-producer");
	if (call(fd, 2, PF_PRODUCER_INITIALIZE_CONNECTION, &a, &r) != IPC_MSG_REQUEST_ERROR)
		return 92;
	if (!strstr(r.error, "lockdown"))
		return 93; /* the refusal names its reason */
	sonde__buf_free(&a);
	return raw_wait_eof(fd, 10000) ? 0 : 94; /* and the connection is closed */
}

TEST_TIMEOUT(hostile_unprivileged_producer_refused_in_lockdown, 120)
{
	static const char *const lockdown[] = {"--lockdown", NULL};
	struct hostile h;

	if (geteuid() != 0)
		SKIP("needs root to switch to uid nobody");
	hostile_up_args(&h, NULL, lockdown); /* root's own producer is still welcome */
	ASSERT_INT(hostile_run(&h, nobody_producer, &h, 60), ==, 0);
	hostile_down(&h);
}
