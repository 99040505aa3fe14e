/* What the off-CPU tests of both backends share (test_offcpu.c, test_offcpu_bpf.c and the
 * exports of off-CPU recordings): the BPF backend's availability, and tests/progs/
 * offcpu_split's truth file and wall split. */
#ifndef SONDE_TEST_OFFCPU_UTIL_H
#define SONDE_TEST_OFFCPU_UTIL_H

#include <stdbool.h>

/* Skips the test where the BPF off-CPU backend cannot run: not built, not root, no BTF,
 * or refused by the kernel. */
void offcpu_require_bpf(void);

#endif
