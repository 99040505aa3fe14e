/* linux.perf's authorization rule (src/proc/perfauth.c), clause by clause, and its
 * reads of credentials through pidfds. */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "proc/perfauth.h"

enum { U = 1000, G = 1000 };

static const struct perfauth_consumer user = {.uid = U, .gid = G, .caps_known = true};

static struct perfauth_target own(void)
{
	return (struct perfauth_target){.uid = {U, U, U},
					.gid = {G, G, G},
					.dumpable_known = true,
					.dumpable = true};
}

TEST(perfauth_rule_needs_every_uid_and_gid_and_dumpable)
{
	struct perfauth_target t = own();

	ASSERT(sonde__perfauth_may_profile(&user, &t, 0) == NULL);
	for (int k = 0; k < 3; k++) {
		t = own();
		uint32_t *id = k == 0 ? &t.uid.real : k == 1 ? &t.uid.eff : &t.uid.saved;
		*id = 0;
		ASSERT_CONTAINS(sonde__perfauth_may_profile(&user, &t, 0), "uids are not all");
		t = own();
		id = k == 0 ? &t.gid.real : k == 1 ? &t.gid.eff : &t.gid.saved;
		*id = 0;
		ASSERT_CONTAINS(sonde__perfauth_may_profile(&user, &t, 0), "gids are not all");
	}
	t = own();
	t.dumpable = false;
	ASSERT_CONTAINS(sonde__perfauth_may_profile(&user, &t, 0), "not dumpable");
	t.dumpable_known = false; /* unknown counts as not dumpable */
	t.dumpable = true;
	ASSERT_CONTAINS(sonde__perfauth_may_profile(&user, &t, 0), "not dumpable");
}

TEST(perfauth_rule_cap_sys_ptrace_overrides_ids_but_unknown_caps_are_none)
{
	struct perfauth_consumer c = user;
	struct perfauth_target t = {.uid = {0, 0, 0}, .gid = {0, 0, 0}};

	c.cap_eff = 1ull << PERFAUTH_CAP_SYS_PTRACE;
	ASSERT(sonde__perfauth_may_profile(&c, &t, 0) == NULL);
	c.caps_known = false;
	ASSERT(sonde__perfauth_may_profile(&c, &t, 0) != NULL);
	c.caps_known = true;
	c.cap_eff = ~0ull & ~(1ull << PERFAUTH_CAP_SYS_PTRACE);
	ASSERT(sonde__perfauth_may_profile(&c, &t, 0) != NULL);
}

/* (uid_t)-1 is no marker: a consumer of that uid matches only a target all of whose ids
 * are that uid, never a target with mixed ids. */
TEST(perfauth_rule_has_no_uid_sentinel)
{
	struct perfauth_consumer c = {.uid = 0xFFFFFFFFu, .gid = 0xFFFFFFFFu, .caps_known = true};
	struct perfauth_target t = {.uid = {U, 0, 0}, .gid = {G, G, G}, .dumpable_known = true};

	ASSERT(sonde__perfauth_may_profile(&c, &t, 0) != NULL);
}

TEST(perfauth_rule_follows_yama_scopes)
{
	struct perfauth_consumer cap = user;
	struct perfauth_target t = own();

	cap.cap_eff = 1ull << PERFAUTH_CAP_SYS_PTRACE;
	ASSERT_CONTAINS(sonde__perfauth_may_profile(&user, &t, 1), "ptrace_scope 1");
	t.descendant = true;
	ASSERT(sonde__perfauth_may_profile(&user, &t, 1) == NULL);
	t.descendant = false;
	ASSERT(sonde__perfauth_may_profile(&cap, &t, 1) == NULL);
	ASSERT_CONTAINS(sonde__perfauth_may_profile(&user, &t, 2), "ptrace_scope 2");
	ASSERT(sonde__perfauth_may_profile(&cap, &t, 2) == NULL);
	ASSERT_CONTAINS(sonde__perfauth_may_profile(&cap, &t, 3), "ptrace_scope 3");
}

/* Nobody in particular (probes not told who the consumer is) gets nothing: no process,
 * not even one whose every id is its placeholder's or with CAP_SYS_PTRACE claimed, no
 * kernel frames at any paranoid level, no raw tracepoint data. */
TEST(perfauth_rule_gives_an_unidentified_consumer_nothing)
{
	struct perfauth_consumer c = {.uid = (uid_t)-1, .gid = (gid_t)-1, .pid = -1,
				      .anonymous = true, .caps_known = true,
				      .cap_eff = ~0ull};
	struct perfauth_target t = {.uid = {(uint32_t)-1, (uint32_t)-1, (uint32_t)-1},
				    .gid = {(uint32_t)-1, (uint32_t)-1, (uint32_t)-1},
				    .dumpable_known = true, .dumpable = true};
	struct perfauth_proc_hide open = {0};

	ASSERT(sonde__perfauth_may_profile(&c, &t, 0) != NULL);
	ASSERT(!sonde__perfauth_may_see_kernel(&c, -1));
	ASSERT(!sonde__perfauth_may_read_raw(&c, -1));
	ASSERT(!sonde__perfauth_may_see_process(&c, &t, &open));
}

/* The /proc mount's hidepid and gid= from mountinfo: the last mount at /proc wins, a
 * mount point that only starts with /proc is another, names and numbers both read. */
TEST(perfauth_proc_hide_read_from_mountinfo)
{
	static const char mi[] =
		"22 1 0:21 / /proc rw,nosuid,relatime shared:12 - proc proc rw\n"
		"41 22 0:36 / /proc rw,relatime - proc proc rw,gid=27,hidepid=invisible\n"
		"50 22 0:40 / /proc\\040x rw - proc proc rw,hidepid=0\n"
		"51 22 0:41 / /procfs rw - proc proc rw\n";
	struct perfauth_proc_hide h;
	struct perfauth_target t = own();
	struct perfauth_consumer other = user;

	sonde__perfauth_parse_proc_hide(mi, sizeof(mi) - 1, &h);
	ASSERT_INT(h.hidepid, ==, 2);
	ASSERT(h.gid_set);
	ASSERT_UINT(h.gid, ==, 27);
	sonde__perfauth_parse_proc_hide(mi, 60, &h); /* the first line only */
	ASSERT_INT(h.hidepid, ==, 0);
	/* hidden: its own process is visible to a consumer, another user's is not, unless
	 * the consumer is of the exempt gid */
	sonde__perfauth_parse_proc_hide(mi, sizeof(mi) - 1, &h);
	ASSERT(sonde__perfauth_may_see_process(&user, &t, &h));
	other.uid = U + 1;
	ASSERT(!sonde__perfauth_may_see_process(&other, &t, &h));
	other.gid = 27;
	ASSERT(sonde__perfauth_may_see_process(&other, &t, &h));
}

TEST(perfauth_kernel_frames_need_perfmon_sys_admin_or_paranoid_1)
{
	struct perfauth_consumer c = user;

	ASSERT(!sonde__perfauth_may_see_kernel(&c, 2));
	ASSERT(sonde__perfauth_may_see_kernel(&c, 1));
	ASSERT(sonde__perfauth_may_see_kernel(&c, -1));
	c.cap_eff = 1ull << PERFAUTH_CAP_PERFMON;
	ASSERT(sonde__perfauth_may_see_kernel(&c, 2));
	c.cap_eff = 1ull << PERFAUTH_CAP_SYS_ADMIN;
	ASSERT(sonde__perfauth_may_see_kernel(&c, 3));
	c.caps_known = false;
	ASSERT(!sonde__perfauth_may_see_kernel(&c, 2));
}

static int pidfd_of(pid_t pid)
{
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);

	ASSERT(fd >= 0);
	return fd;
}

/* A pidfd whose process is gone: whatever now holds a pid, nothing read of it counts. */
TEST(perfauth_reads_through_the_pidfd_never_the_pid_alone)
{
	struct perfauth_target t;
	struct perfauth_consumer c = {.uid = getuid(), .gid = getgid(), .pid = getpid()};
	pid_t child = fork();

	ASSERT(child >= 0);
	if (child == 0) {
		pause();
		_exit(0);
	}
	int dead = pidfd_of(child);
	kill(child, SIGKILL);
	ASSERT_INT(waitpid(child, NULL, 0), ==, child);
	/* as if child's pid now named this process */
	ASSERT_ERR(sonde__perfauth_target_read(dead, getpid(), 0, 0, &t), -ESRCH);
	sonde__perfauth_consumer_caps(dead, getpid(), &c);
	ASSERT(!c.caps_known);

	int self = pidfd_of(getpid());
	ASSERT_OK(sonde__perfauth_target_read(self, getpid(), 0, 0, &t));
	ASSERT_UINT(t.uid.real, ==, getuid());
	ASSERT_UINT(t.gid.eff, ==, getegid());
	sonde__perfauth_consumer_caps(self, getpid(), &c);
	ASSERT(c.caps_known);
	/* ids other than the ones it connected with: its capabilities are not credited */
	c.uid = getuid() + 1;
	sonde__perfauth_consumer_caps(self, getpid(), &c);
	ASSERT(!c.caps_known);
	close(self);
	close(dead);
}
