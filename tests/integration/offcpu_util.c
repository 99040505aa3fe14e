#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "offcpu_util.h"
#include "record/offcpu_bpf.h"

void offcpu_require_bpf(void)
{
	struct test_output o;

	if (!sonde__rec_offcpu_bpf_built())
		SKIP("libsonde was built without the BPF backend (mk/bpf.mk said why)");
	if (geteuid() != 0)
		SKIP("the BPF backend needs root (or CAP_BPF and CAP_PERFMON) here");
	if (access("/sys/kernel/btf/vmlinux", R_OK) != 0)
		SKIP("the kernel has no BTF (/sys/kernel/btf/vmlinux)");
	test_runf(&o, 60, "%s record --off-cpu --off-cpu-backend bpf -o %s -- /bin/true",
		  test_bin("sonde"), test_path("probe.spool"));
	if (o.status != 0)
		SKIP("the kernel refused the BPF backend: %s", o.err);
	test_output_free(&o);
}
