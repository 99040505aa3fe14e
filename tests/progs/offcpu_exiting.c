/* Processes that wait on their way out, after their memory is released, for the off-CPU
 * tests: main forks N children one after another; each sets up an AIO context and exits.
 * The exit of a process's last thread releases its address space after the thread no
 * longer has it (exit_mm clears task->mm, then mmput tears it down), and that teardown
 * kills the AIO context and waits until the kernel has freed it (exit_aio,
 * wait_for_completion across RCU grace periods): every child blocks there, in state D,
 * exiting with no memory. main waits for each child's exit and writes its pid to TRUTH
 * ("child PID"), then "main PID" and "done".
 *
 * usage: offcpu_exiting N TRUTH
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: offcpu_exiting N TRUTH\n");
		return 2;
	}
	int n = atoi(argv[1]);
	FILE *f = fopen(argv[2], "w");
	if (!f) {
		perror(argv[2]);
		return 1;
	}
	for (int i = 0; i < n; i++) {
		pid_t pid = fork();
		if (pid < 0) {
			perror("fork");
			return 1;
		}
		if (pid == 0) {
			unsigned long ctx = 0;
			if (syscall(SYS_io_setup, 1, &ctx) < 0) {
				fprintf(stderr, "io_setup: %s\n", strerror(errno));
				_exit(3);
			}
			_exit(0); /* the context is killed by the exit, after the memory is gone */
		}
		int status;
		if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
		    WEXITSTATUS(status) != 0) {
			fprintf(stderr, "child %d did not exit 0\n", (int)pid);
			return 1;
		}
		fprintf(f, "child %d\n", (int)pid);
	}
	fprintf(f, "main %d\ndone\n", (int)getpid());
	return fclose(f) ? 1 : 0;
}
