/* sonde__regfile_open: what a path someone else controls may lead to, refused without blocking. */
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "base/regfile.h"

static int try_open(const char *path, const struct regfile_rules *r)
{
	int fd = sonde__regfile_open(path, r, NULL);

	if (fd >= 0)
		close(fd);
	return fd >= 0 ? 0 : fd;
}

/* Each refusal is its own error and its own counter; none of them blocks (the test's
 * timeout is short, since a FIFO opened without O_NONBLOCK never returns). */
TEST_TIMEOUT(regfile_refuses_fifo_symlink_device_big_and_foreign, 20)
{
	struct regfile_refusals c = {0};
	struct regfile_rules r = {.what = "test file", .max_size = 1 << 20, .refusals = &c};
	const char *fifo = test_path("fifo"), *link = test_path("zero"), *big = test_path("big");
	const char *ok = test_path("ok"), *dir = test_path("dir");

	ASSERT_OK(mkfifo(fifo, 0644));
	ASSERT_OK(symlink("/dev/zero", link));
	ASSERT_OK(mkdir(dir, 0755));
	test_write_file(ok, "1000 10 fn\n", 11);
	int fd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ASSERT_INT(fd, >=, 0);
	ASSERT_OK(ftruncate(fd, (1 << 20) + 1)); /* sparse: costs no disk */
	close(fd);

	ASSERT_ERR(try_open(fifo, &r), -SONDE_E_NOT_REGULAR);
	ASSERT_ERR(try_open(dir, &r), -SONDE_E_NOT_REGULAR);
	ASSERT_ERR(try_open(link, &r), -ELOOP);
	ASSERT_ERR(try_open(big, &r), -EFBIG);
	ASSERT_ERR(try_open(test_path("missing"), &r), -ENOENT); /* not a refusal */
	ASSERT_OK(try_open(ok, &r));
	/* a trusted path follows the link, and still finds no regular file */
	r.follow = true;
	ASSERT_ERR(try_open(link, &r), -SONDE_E_NOT_REGULAR);
	r.follow = false;
	ASSERT_UINT(c.not_regular, ==, 3);
	ASSERT_UINT(c.symlink, ==, 1);
	ASSERT_UINT(c.too_big, ==, 1);
	ASSERT_UINT(c.owner, ==, 0);

	/* the owner check: root's files always pass, another user's only when expected */
	if (geteuid() != 0)
		SKIP("needs root to give a file to another user");
	ASSERT_OK(chown(ok, 65534, 65534));
	r.check_owner = true;
	r.owner = 1234;
	ASSERT_ERR(try_open(ok, &r), -SONDE_E_OWNER);
	r.owner = 65534;
	ASSERT_OK(try_open(ok, &r));
	ASSERT_OK(chown(ok, 0, 0));
	r.owner = 1234;
	ASSERT_OK(try_open(ok, &r));
	ASSERT_UINT(c.owner, ==, 1);
	ASSERT_UINT(sonde__regfile_refusals_total(&c), ==, 6);
}
