/* linux.process_stats' and linux.sys_stats' text parsers and configs on fixed inputs. */
#include <stdlib.h>

#include "../test.h"
#include "base/buf.h"
#include "base/pb.h"
#include "probes/cfg_unsupported.h"
#include "probes/ftrace_config.h"
#include "probes/procstats.h"
#include "probes/sysstats.h"

TEST(procstats_parse_stat_comm_with_parens_and_spaces)
{
	static const char t[] = "42 (a) b) c) S 7 1 1 0 -1 4194560 100 0 0 0 13 5 0 0 20 0 1 0 999 "
				"0 0\n";
	struct procstats_stat st;

	ASSERT_OK(sonde__procstats_parse_stat(t, sizeof(t) - 1, &st));
	ASSERT_INT(st.state, ==, 'S');
	ASSERT_INT(st.ppid, ==, 7);
	ASSERT_UINT(st.utime, ==, 13);
	ASSERT_UINT(st.stime, ==, 5);
	ASSERT_UINT(st.start_time, ==, 999);
	ASSERT_ERR(sonde__procstats_parse_stat(t, 20, &st), -SONDE_E_FORMAT);
	ASSERT_ERR(sonde__procstats_parse_stat("1 (x", 4, &st), -SONDE_E_FORMAT);
}

TEST(procstats_parse_status_fields)
{
	static const char t[] =
		"Name:\tmy prog\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t100\n"
		"Pid:\t101\nPPid:\t1\nUid:\t1000\t1000\t1000\t1000\nVmSize:\t  2048 kB\n"
		"VmRSS:\t 512 kB\nRssAnon:\t 100 kB\nVmSwap:\t 0 kB\n";
	struct procstats_status st;

	ASSERT_OK(sonde__procstats_parse_status(t, sizeof(t) - 1, &st));
	ASSERT_STR_EQ(st.name, "my prog");
	ASSERT_INT(st.tgid, ==, 100);
	ASSERT_INT(st.ppid, ==, 1);
	ASSERT_INT(st.uid, ==, 1000);
	ASSERT_INT(st.vm_size_kb, ==, 2048);
	ASSERT_INT(st.vm_rss_kb, ==, 512);
	ASSERT_INT(st.vm_swap_kb, ==, 0);
	ASSERT_INT(st.vm_hwm_kb, ==, -1); /* absent */
	ASSERT_ERR(sonde__procstats_parse_status("x", 1, &st), -SONDE_E_FORMAT);
}

static void kv_collect(void *ctx, const char *key, size_t len, uint64_t value)
{
	uint64_t *out = ctx;
	int id = sonde__sysstats_meminfo_id(key, len);
	if (id > 0 && id < 64)
		out[id] = value;
	if (len == 13 && !memcmp(key, "nr_free_pages", 13))
		out[0] = value;
}

TEST(sysstats_parse_meminfo_and_vmstat)
{
	static const char mem[] =
		"MemTotal:       16000000 kB\nMemFree:  123 kB\nActive(anon): 7 kB\n"
		"Bogus\nHugePages_Total:       0\n";
	static const char vm[] = "nr_free_pages 4242\nnr_zone_inactive_anon 1\n";
	uint64_t v[64] = {0};

	ASSERT_INT(sonde__sysstats_parse_kv(mem, sizeof(mem) - 1, kv_collect, v), ==, 4);
	ASSERT_UINT(v[1], ==, 16000000);
	ASSERT_UINT(v[2], ==, 123);
	ASSERT_UINT(v[9], ==, 7);
	ASSERT_INT(sonde__sysstats_parse_kv(vm, sizeof(vm) - 1, kv_collect, v), ==, 2);
	ASSERT_UINT(v[0], ==, 4242);
	ASSERT_INT(sonde__sysstats_vmstat_id("nr_free_pages", 13), ==, 1);
	ASSERT_INT(sonde__sysstats_vmstat_id("no_such", 7), ==, 0);
}

struct stat_seen {
	int cpus, total_cpu;
	uint64_t cpu1_idle, intr_total, irq3, softirq_total, forks;
};

static void st_cpu(void *ctx, const struct sysstats_cpu_times *t)
{
	struct stat_seen *s = ctx;
	if (t->cpu < 0)
		s->total_cpu++;
	else
		s->cpus++;
	if (t->cpu == 1)
		s->cpu1_idle = t->idle;
}

static void st_count(void *ctx, int kind, int index, uint64_t value)
{
	struct stat_seen *s = ctx;
	if (kind == 0 && index < 0)
		s->intr_total = value;
	if (kind == 0 && index == 3)
		s->irq3 = value;
	if (kind == 1 && index < 0)
		s->softirq_total = value;
}

static void st_forks(void *ctx, uint64_t n)
{
	((struct stat_seen *)ctx)->forks = n;
}

TEST(sysstats_parse_proc_stat)
{
	static const char t[] = "cpu  10 0 5 100 1 0 2 0 0 0\ncpu0 5 0 2 50 1 0 1 0 0 0\n"
				"cpu1 5 0 3 77 0 0 1 0 0 0\nintr 900 1 2 3 44 0\nctxt 12345\n"
				"btime 1700000000\nprocesses 5555\nsoftirq 70 1 2\n";
	struct stat_seen s = {0};
	const struct sysstats_stat_cb cb = {st_cpu, st_count, st_forks, &s};

	ASSERT_OK(sonde__sysstats_parse_stat(t, sizeof(t) - 1, &cb));
	ASSERT_INT(s.total_cpu, ==, 1);
	ASSERT_INT(s.cpus, ==, 2);
	ASSERT_UINT(s.cpu1_idle, ==, 77);
	ASSERT_UINT(s.intr_total, ==, 900);
	ASSERT_UINT(s.irq3, ==, 44);
	ASSERT_UINT(s.softirq_total, ==, 70);
	ASSERT_UINT(s.forks, ==, 5555);
}

TEST(sysstats_config_periods_and_counters)
{
	/* meminfo_period_ms 5 (raised to 10), meminfo_counters 1 and packed [2, 3],
	 * stat_period_ms 500, stat_counters STAT_FORK_COUNT, cpufreq_period_ms 1000. */
	static const uint8_t b[] = {0x08, 0x05, 0x10, 0x01, 0x12, 0x02, 0x02, 0x03,
				    0x28, 0xf4, 0x03, 0x30, 0x04, 0x40, 0xe8, 0x07};
	static struct sysstats_config c;

	ASSERT_OK(sonde__sysstats_config_parse(b, sizeof(b), &c));
	ASSERT_INT(c.meminfo_period_ms, ==, 10);
	ASSERT_INT(c.nmeminfo, ==, 3);
	ASSERT_INT(c.meminfo_counters[2], ==, 3);
	ASSERT_INT(c.stat_period_ms, ==, 500);
	ASSERT_INT(c.stat_mask, ==, SYSSTATS_STAT_FORK_COUNT);
	ASSERT_INT(c.cpufreq_period_ms, ==, 1000);
	ASSERT_ERR(sonde__sysstats_config_parse(b, 3, &c), -SONDE_E_FORMAT);
}

TEST(procstats_config_quirks)
{
	/* quirks DISABLE_ON_DEMAND, scan_all, record_thread_names, poll 50 (raised to 100),
	 * and an unknown field 99. */
	static const uint8_t b[] = {0x08, 0x02, 0x10, 0x01, 0x18, 0x01,
				    0x20, 0x32, 0x98, 0x06, 0x07};
	struct procstats_config c;

	ASSERT_OK(sonde__procstats_config_parse(b, sizeof(b), &c));
	ASSERT(!c.on_demand);
	ASSERT(c.scan_all_processes_on_start);
	ASSERT(c.record_thread_names);
	ASSERT_INT(c.proc_stats_poll_ms, ==, 100);
	ASSERT_OK(sonde__procstats_config_parse(b + 2, sizeof(b) - 2, &c));
	ASSERT(c.on_demand);
}

/* v53's fields the modules do not act on are marked when they ask for something (the data
 * source then names each in a notice); supported fields, false bools, zero periods and
 * fields newer than v53 are not. */
TEST(probes_config_unsupported_fields_are_marked)
{
	struct buf b = BUF_INIT;
	struct sysstats_config *sc = ASSERT_NOT_NULL(calloc(1, sizeof(*sc)));
	struct procstats_config pc;
	struct ftrace_config fc;

	sonde__pb_put_varint(&b, 1, 100);  /* meminfo_period_ms */
	sonde__pb_put_varint(&b, 13, 100); /* cpuidle_period_ms */
	sonde__pb_put_varint(&b, 11, 0);   /* psi_period_ms 0: off */
	sonde__pb_put_varint(&b, 14, 250); /* gpufreq_period_ms */
	sonde__pb_put_varint(&b, 50, 1);   /* after v53 */
	ASSERT_OK(sonde__sysstats_config_parse(b.data, b.len, sc));
	ASSERT_UINT(sc->unsupported, ==, (1ull << 13) | (1ull << 14));
	ASSERT_INT(sc->meminfo_period_ms, ==, 100);
	free(sc);

	sonde__buf_reset(&b);
	sonde__pb_put_bool(&b, 9, true);   /* resolve_process_fds */
	sonde__pb_put_bool(&b, 10, false); /* scan_smaps_rollup */
	sonde__pb_put_bool(&b, 12, true);  /* record_process_runtime: always written */
	sonde__pb_put_varint(&b, 6, 5000); /* proc_stats_cache_ttl_ms: no cache to expire */
	sonde__pb_put_varint(&b, 4, 1000);
	ASSERT_OK(sonde__procstats_config_parse(b.data, b.len, &pc));
	ASSERT_UINT(pc.unsupported, ==, 1ull << 9);
	ASSERT_INT(pc.proc_stats_poll_ms, ==, 1000);

	sonde__buf_reset(&b);
	sonde__pb_put_string(&b, 1, "sched/sched_switch");
	sonde__pb_put_bool(&b, 13, true);     /* symbolize_ksyms */
	sonde__pb_put_string(&b, 25, "mine"); /* instance_name */
	size_t m = sonde__pb_begin(&b, 30);   /* kprobe_events */
	sonde__pb_put_string(&b, 1, "do_sys_open");
	sonde__pb_end(&b, m);
	sonde__pb_put_bool(&b, 16, true);  /* disable_generic_events: supported */
	sonde__pb_put_bool(&b, 23, false); /* preserve_ftrace_buffer: false asks nothing */
	ASSERT_OK(buf_error(&b));
	ASSERT_OK(sonde__ftrace_config_parse(b.data, b.len, &fc));
	ASSERT_UINT(fc.unsupported, ==, (1ull << 13) | (1ull << 25) | (1ull << 30));
	ASSERT(fc.disable_generic_events);
	ASSERT_INT(fc.nevents, ==, 1);
	sonde__ftrace_config_free(&fc);
	sonde__buf_free(&b);

	/* every table entry has a name and a reason */
	const struct probes_unsupported *const t[] = {sonde__ftrace_unsupported,
						      sonde__procstats_unsupported,
						      sonde__sysstats_unsupported};
	for (size_t i = 0; i < 3; i++)
		for (const struct probes_unsupported *u = t[i]; u->num; u++) {
			ASSERT(u->num < 64);
			ASSERT(u->name && u->why && u->why[0]);
		}
}
