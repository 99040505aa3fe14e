/* The tables of cfg_unsupported.h: every FtraceConfig, ProcessStatsConfig and
 * SysStatsConfig field of Perfetto v53 that the modules do not honour, and why. */
#include "probes/cfg_unsupported.h"

#include <stddef.h>

#define ATRACE "Android's atrace, which Linux does not have"
#define KSYMS  "no kernel symbol table is written into the trace"
#define FGRAPH "the function and function_graph tracers are not supported"

const struct probes_unsupported sonde__ftrace_unsupported[] = {
	{2, "atrace_categories", ATRACE},
	{3, "atrace_apps", ATRACE},
	{13, "symbolize_ksyms", KSYMS},
	{14, "initialize_ksyms_synchronously_for_testing", KSYMS},
	{15, "throttle_rss_stat",
	 "rss_stat events are recorded as the kernel writes them, unthrottled"},
	{17, "ksyms_mem_policy", KSYMS},
	{18, "syscall_events",
	 "no syscall filter is set: raw_syscalls events come only from ftrace_events, for every "
	 "syscall"},
	{19, "enable_function_graph", FGRAPH},
	{20, "function_filters", FGRAPH},
	{21, "function_graph_roots", FGRAPH},
	{22, "print_filter", "ftrace/print events are recorded unfiltered"},
	{23, "preserve_ftrace_buffer",
	 "each session records into its own tracefs instance, created empty"},
	{25, "instance_name",
	 "sonde always records into its own tracefs instance (instances/sonde)"},
	{27, "buffer_size_lower_bound", "buffer_size_kb is used as given"},
	{28, "atrace_categories_prefer_sdk", ATRACE},
	{30, "kprobe_events", "kprobes are not supported"},
	{31, "debug_ftrace_abi", "raw ring buffer pages are never written into the trace"},
	{32, "denser_generic_event_encoding", "generic events keep the field-by-name encoding"},
	{33, "function_graph_max_depth", FGRAPH},
	{34, "atrace_userspace_only", ATRACE},
	{35, "tids_to_trace", "events are not filtered by thread"},
	{36, "tracefs_options", "tracefs options are left as a new instance has them"},
	{37, "tracing_cpumask", "every CPU is traced"},
	{0, NULL, NULL},
};

const struct probes_unsupported sonde__procstats_unsupported[] = {
	{9, "resolve_process_fds", "file descriptors are not resolved to paths"},
	{10, "scan_smaps_rollup", "/proc/PID/smaps_rollup is not read"},
	{11, "record_process_age", "process start times are not recorded"},
	{13, "record_process_dmabuf_rss", "/proc/PID/dmabuf_rss (Android kernels) is not read"},
	{0, NULL, NULL},
};

const struct probes_unsupported sonde__sysstats_unsupported[] = {
	{9, "buddyinfo_period_ms", "/proc/buddyinfo is not sampled"},
	{10, "diskstat_period_ms", "/proc/diskstats is not sampled"},
	{11, "psi_period_ms", "/proc/pressure is not sampled"},
	{12, "thermal_period_ms", "/sys/class/thermal is not sampled"},
	{13, "cpuidle_period_ms", "cpuidle state times are not sampled"},
	{14, "gpufreq_period_ms", "GPU frequencies are not sampled"},
	{0, NULL, NULL},
};

const struct probes_unsupported *sonde__probes_unsupported_find(const struct probes_unsupported *t,
								uint32_t num)
{
	for (; t->num; t++)
		if (t->num == num)
			return t;
	return NULL;
}

void sonde__probes_unsupported_mark(const struct probes_unsupported *t, const struct pb_field *f,
				    uint64_t *mask)
{
	if (f->num >= 64 || !sonde__probes_unsupported_find(t, f->num))
		return;
	if (f->wire == PB_LEN || f->u != 0)
		*mask |= 1ull << f->num;
}
