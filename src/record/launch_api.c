/* The public launcher: a thin owner of proc/launch. */
#include <errno.h>
#include <stdlib.h>

#include <sonde/record.h>

#include "base/alloc.h"
#include "proc/launch.h"

struct sonde_launch {
	struct proc_launch l;
	bool resumed;
};

struct sonde_launch *sonde_launch__new(char *const argv[], char *const envp[])
{
	struct sonde_launch *s = sonde__calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	if (!argv || !argv[0]) {
		sonde__free(s);
		errno = EINVAL;
		return NULL;
	}
	int err = sonde__proc_launch_start(&s->l, argv, envp);
	if (err) {
		sonde__free(s);
		errno = -err;
		return NULL;
	}
	return s;
}

pid_t sonde_launch__pid(const struct sonde_launch *s)
{
	return s->l.pid;
}

int sonde_launch__resume(struct sonde_launch *s)
{
	if (s->resumed)
		return -EALREADY;
	s->resumed = true;
	return sonde__proc_launch_resume(&s->l);
}

int sonde_launch__wait(struct sonde_launch *s, int flags, int *status)
{
	return sonde__proc_launch_wait(&s->l, flags, status);
}

void sonde_launch__free(struct sonde_launch *s)
{
	if (!s)
		return;
	if (!s->resumed)
		sonde__proc_launch_abort(&s->l);
	sonde__proc_launch_free(&s->l);
	sonde__free(s);
}
