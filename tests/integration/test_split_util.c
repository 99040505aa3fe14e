/* split_settle (split_util.h) on made-up recordings: noise around 60/30/10 settles, a
 * steady misattribution fails however many recordings it gets. */
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"
#include "split_util.h"

struct fake {
	const struct split_counts *seq; /* recording i adds seq[i % n] */
	int n, calls, last_seconds;
};

static void fake_record(void *ctx, int seconds, struct split_counts *add)
{
	struct fake *f = ctx;

	*add = f->seq[f->calls++ % f->n];
	f->last_seconds = seconds;
}

/* Exit status of split_settle on f in a child (0: settled within the tolerance). */
static int settle_status(const struct split_judge *j, struct fake *f, struct split_counts *acc)
{
	int p[2], status;

	ASSERT_INT(pipe(p), ==, 0);
	pid_t child = fork();
	ASSERT(child >= 0);
	if (child == 0) {
		close(p[0]);
		split_settle(j, fake_record, f, acc, 1);
		if (write(p[1], f, sizeof(*f)) != sizeof(*f) ||
		    write(p[1], acc, sizeof(*acc)) != sizeof(*acc))
			_exit(3);
		_exit(0);
	}
	close(p[1]);
	if (read(p[0], f, sizeof(*f)) != sizeof(*f) ||
	    read(p[0], acc, sizeof(*acc)) != sizeof(*acc))
		memset(acc, 0, sizeof(*acc));
	close(p[0]);
	ASSERT_INT(waitpid(child, &status, 0), ==, child);
	ASSERT(WIFEXITED(status));
	return WEXITSTATUS(status);
}

TEST(split_util_noise_settles_over_recordings)
{
	static const struct split_judge j = {.tolerance = 5.0, .min_samples = 1000};
	/* 53.3/33.3/13.3 and then 66.7/26.7/6.7: each outside, their sum 60/30/10 */
	static const struct split_counts seq[] = {{{400, 250, 100}, 750}, {{500, 200, 50}, 750}};
	struct fake f = {seq, 2, 0, 0};
	struct split_counts acc;

	ASSERT_INT(settle_status(&j, &f, &acc), ==, 0);
	ASSERT_INT(f.calls, ==, 2);
	ASSERT_UINT(acc.all, ==, 1500);
	ASSERT_UINT(acc.n[0], ==, 900);
}

TEST(split_util_steady_misattribution_fails)
{
	static const struct split_judge j = {.tolerance = 5.0};
	/* 66/24/10, recording after recording */
	static const struct split_counts seq[] = {{{660, 240, 100}, 1000}};
	struct fake f = {seq, 1, 0, 0};
	struct split_counts acc;

	ASSERT_INT(settle_status(&j, &f, &acc), !=, 0);
}

TEST(split_util_too_few_samples_lengthen_the_recordings)
{
	static const struct split_judge j = {.tolerance = 5.0, .min_samples = 1500, .seconds = 4};
	static const struct split_counts seq[] = {{{180, 90, 30}, 300}};
	struct fake f = {seq, 1, 0, 0};
	struct split_counts acc;

	/* within the tolerance from the start: recorded again, longer, up to 4 times */
	ASSERT_INT(settle_status(&j, &f, &acc), ==, 0);
	ASSERT_INT(f.calls, ==, 4);
	ASSERT_INT(f.last_seconds, ==, 30);
	ASSERT_UINT(acc.all, ==, 1200);
}

/* Exit status of split_assert_cfi_only in a child (0: it held). */
static int cfi_only_status(const char *summary, const char *folded)
{
	int status;
	pid_t child = fork();

	ASSERT(child >= 0);
	if (child == 0) {
		split_assert_cfi_only(summary, folded);
		_exit(0);
	}
	ASSERT_INT(waitpid(child, &status, 0), ==, child);
	ASSERT(WIFEXITED(status));
	return WEXITSTATUS(status);
}

/* A frame-pointer step is allowed where the C runtime's code has no CFI, and nowhere else:
 * the summary and folded stacks of a recording whose exit handlers ran under
 * __do_global_dtors_aux, and the same stacks without that frame. */
TEST(split_util_frame_pointer_steps_only_under_code_without_cfi)
{
	const char *none = "  unwind: 8 frames by DWARF CFI, 0 by frame pointers\n",
		   *one = "  unwind: 8 frames by DWARF CFI, 1 by frame pointers; CFI fallbacks: "
			  "no-row 1\n",
		   *other = "  unwind: 8 frames by DWARF CFI, 1 by frame pointers; CFI fallbacks: "
			    "no-row 1, sp-backwards 1\n",
		   *exit_stack = "_start;main;run;path_hot;compute_hot 5\n"
				 "_start;__libc_start_main_impl;__GI_exit;_dl_fini;"
				 "__do_global_dtors_aux;__cxa_finalize;[kernel] 1\n",
		   *plain = "_start;main;run;path_hot;compute_hot 5\n"
			    "_start;__libc_start_main_impl;__GI_exit;_dl_fini;"
			    "__do_global_dtors_auxiliary;__cxa_finalize;[kernel] 1\n";

	ASSERT_INT(cfi_only_status(none, plain), ==, 0);
	ASSERT_INT(cfi_only_status(one, exit_stack), ==, 0);
	ASSERT_INT(cfi_only_status(one, plain), !=, 0);
	ASSERT_INT(cfi_only_status(other, exit_stack), !=, 0);
	ASSERT_INT(cfi_only_status("  unwind: 0 frames by DWARF CFI, 0 by frame pointers\n",
				   plain), !=, 0);
}
