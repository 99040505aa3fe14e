/* linux.sys_stats. See sysstats.h. */
#include "base/alloc.h"
#include "probes/sysstats.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sonde/error.h>

#include "base/buf.h"
#include "base/pb.h"
#include "probes/cfg_unsupported.h"
#include "proc/proc.h"

/* /proc/meminfo keys by MeminfoCounters value (protos/perfetto/common/
 * sys_stats_counters.proto); values past 33 are Android-only (ION, GPU, ZRAM). */
static const char *const meminfo_keys[] = {
	NULL,
	"MemTotal",
	"MemFree",
	"MemAvailable",
	"Buffers",
	"Cached",
	"SwapCached",
	"Active",
	"Inactive",
	"Active(anon)",
	"Inactive(anon)",
	"Active(file)",
	"Inactive(file)",
	"Unevictable",
	"Mlocked",
	"SwapTotal",
	"SwapFree",
	"Dirty",
	"Writeback",
	"AnonPages",
	"Mapped",
	"Shmem",
	"Slab",
	"SReclaimable",
	"SUnreclaim",
	"KernelStack",
	"PageTables",
	"CommitLimit",
	"Committed_AS",
	"VmallocTotal",
	"VmallocUsed",
	"VmallocChunk",
	"CmaTotal",
	"CmaFree",
};

/* /proc/vmstat keys and their VmstatCounters values (the enum's names, lower-cased). */
static const struct {
	const char *key;
	uint16_t id;
} vmstat_keys[] = {
	{"nr_free_pages", 1},
	{"nr_alloc_batch", 2},
	{"nr_inactive_anon", 3},
	{"nr_active_anon", 4},
	{"nr_inactive_file", 5},
	{"nr_active_file", 6},
	{"nr_unevictable", 7},
	{"nr_mlock", 8},
	{"nr_anon_pages", 9},
	{"nr_mapped", 10},
	{"nr_file_pages", 11},
	{"nr_dirty", 12},
	{"nr_writeback", 13},
	{"nr_slab_reclaimable", 14},
	{"nr_slab_unreclaimable", 15},
	{"nr_page_table_pages", 16},
	{"nr_kernel_stack", 17},
	{"nr_overhead", 18},
	{"nr_unstable", 19},
	{"nr_bounce", 20},
	{"nr_vmscan_write", 21},
	{"nr_vmscan_immediate_reclaim", 22},
	{"nr_writeback_temp", 23},
	{"nr_isolated_anon", 24},
	{"nr_isolated_file", 25},
	{"nr_shmem", 26},
	{"nr_dirtied", 27},
	{"nr_written", 28},
	{"nr_pages_scanned", 29},
	{"workingset_refault", 30},
	{"workingset_activate", 31},
	{"workingset_nodereclaim", 32},
	{"nr_anon_transparent_hugepages", 33},
	{"nr_free_cma", 34},
	{"nr_swapcache", 35},
	{"nr_dirty_threshold", 36},
	{"nr_dirty_background_threshold", 37},
	{"pgpgin", 38},
	{"pgpgout", 39},
	{"pgpgoutclean", 40},
	{"pswpin", 41},
	{"pswpout", 42},
	{"pgalloc_dma", 43},
	{"pgalloc_normal", 44},
	{"pgalloc_movable", 45},
	{"pgfree", 46},
	{"pgactivate", 47},
	{"pgdeactivate", 48},
	{"pgfault", 49},
	{"pgmajfault", 50},
	{"pgrefill_dma", 51},
	{"pgrefill_normal", 52},
	{"pgrefill_movable", 53},
	{"pgsteal_kswapd_dma", 54},
	{"pgsteal_kswapd_normal", 55},
	{"pgsteal_kswapd_movable", 56},
	{"pgsteal_direct_dma", 57},
	{"pgsteal_direct_normal", 58},
	{"pgsteal_direct_movable", 59},
	{"pgscan_kswapd_dma", 60},
	{"pgscan_kswapd_normal", 61},
	{"pgscan_kswapd_movable", 62},
	{"pgscan_direct_dma", 63},
	{"pgscan_direct_normal", 64},
	{"pgscan_direct_movable", 65},
	{"pgscan_direct_throttle", 66},
	{"pginodesteal", 67},
	{"slabs_scanned", 68},
	{"kswapd_inodesteal", 69},
	{"kswapd_low_wmark_hit_quickly", 70},
	{"kswapd_high_wmark_hit_quickly", 71},
	{"pageoutrun", 72},
	{"allocstall", 73},
	{"pgrotated", 74},
	{"drop_pagecache", 75},
	{"drop_slab", 76},
	{"pgmigrate_success", 77},
	{"pgmigrate_fail", 78},
	{"compact_migrate_scanned", 79},
	{"compact_free_scanned", 80},
	{"compact_isolated", 81},
	{"compact_stall", 82},
	{"compact_fail", 83},
	{"compact_success", 84},
	{"compact_daemon_wake", 85},
	{"unevictable_pgs_culled", 86},
	{"unevictable_pgs_scanned", 87},
	{"unevictable_pgs_rescued", 88},
	{"unevictable_pgs_mlocked", 89},
	{"unevictable_pgs_munlocked", 90},
	{"unevictable_pgs_cleared", 91},
	{"unevictable_pgs_stranded", 92},
	{"nr_zspages", 93},
	{"nr_ion_heap", 94},
	{"nr_gpu_heap", 95},
	{"allocstall_dma", 96},
	{"allocstall_movable", 97},
	{"allocstall_normal", 98},
	{"compact_daemon_free_scanned", 99},
	{"compact_daemon_migrate_scanned", 100},
	{"nr_fastrpc", 101},
	{"nr_indirectly_reclaimable", 102},
	{"nr_ion_heap_pool", 103},
	{"nr_kernel_misc_reclaimable", 104},
	{"nr_shadow_call_stack_bytes", 105},
	{"nr_shmem_hugepages", 106},
	{"nr_shmem_pmdmapped", 107},
	{"nr_unreclaimable_pages", 108},
	{"nr_zone_active_anon", 109},
	{"nr_zone_active_file", 110},
	{"nr_zone_inactive_anon", 111},
	{"nr_zone_inactive_file", 112},
	{"nr_zone_unevictable", 113},
	{"nr_zone_write_pending", 114},
	{"oom_kill", 115},
	{"pglazyfree", 116},
	{"pglazyfreed", 117},
	{"pgrefill", 118},
	{"pgscan_direct", 119},
	{"pgscan_kswapd", 120},
	{"pgskip_dma", 121},
	{"pgskip_movable", 122},
	{"pgskip_normal", 123},
	{"pgsteal_direct", 124},
	{"pgsteal_kswapd", 125},
	{"swap_ra", 126},
	{"swap_ra_hit", 127},
	{"workingset_restore", 128},
	{"allocstall_device", 129},
	{"allocstall_dma32", 130},
	{"balloon_deflate", 131},
	{"balloon_inflate", 132},
	{"balloon_migrate", 133},
	{"cma_alloc_fail", 134},
	{"cma_alloc_success", 135},
	{"nr_file_hugepages", 136},
	{"nr_file_pmdmapped", 137},
	{"nr_foll_pin_acquired", 138},
	{"nr_foll_pin_released", 139},
	{"nr_sec_page_table_pages", 140},
	{"nr_shadow_call_stack", 141},
	{"nr_swapcached", 142},
	{"nr_throttled_written", 143},
	{"pgalloc_device", 144},
	{"pgalloc_dma32", 145},
	{"pgdemote_direct", 146},
	{"pgdemote_kswapd", 147},
	{"pgreuse", 148},
	{"pgscan_anon", 149},
	{"pgscan_file", 150},
	{"pgskip_device", 151},
	{"pgskip_dma32", 152},
	{"pgsteal_anon", 153},
	{"pgsteal_file", 154},
	{"thp_collapse_alloc", 155},
	{"thp_collapse_alloc_failed", 156},
	{"thp_deferred_split_page", 157},
	{"thp_fault_alloc", 158},
	{"thp_fault_fallback", 159},
	{"thp_fault_fallback_charge", 160},
	{"thp_file_alloc", 161},
	{"thp_file_fallback", 162},
	{"thp_file_fallback_charge", 163},
	{"thp_file_mapped", 164},
	{"thp_migration_fail", 165},
	{"thp_migration_split", 166},
	{"thp_migration_success", 167},
	{"thp_scan_exceed_none_pte", 168},
	{"thp_scan_exceed_share_pte", 169},
	{"thp_scan_exceed_swap_pte", 170},
	{"thp_split_page", 171},
	{"thp_split_page_failed", 172},
	{"thp_split_pmd", 173},
	{"thp_swpout", 174},
	{"thp_swpout_fallback", 175},
	{"thp_zero_page_alloc", 176},
	{"thp_zero_page_alloc_failed", 177},
	{"vma_lock_abort", 178},
	{"vma_lock_miss", 179},
	{"vma_lock_retry", 180},
	{"vma_lock_success", 181},
	{"workingset_activate_anon", 182},
	{"workingset_activate_file", 183},
	{"workingset_nodes", 184},
	{"workingset_refault_anon", 185},
	{"workingset_refault_file", 186},
	{"workingset_restore_anon", 187},
	{"workingset_restore_file", 188},
};

enum { MIN_PERIOD_MS = 10 };

/* SysStats and TracePacket field numbers. */
enum {
	TP_TIMESTAMP = 8,
	TP_SYS_STATS = 7,
	SS_MEMINFO = 1,
	SS_VMSTAT = 2,
	SS_CPU_STAT = 3,
	SS_NUM_FORKS = 4,
	SS_NUM_IRQ_TOTAL = 5,
	SS_NUM_IRQ = 6,
	SS_NUM_SOFTIRQ_TOTAL = 7,
	SS_NUM_SOFTIRQ = 8,
	SS_COLLECTION_END = 9,
	SS_DEVFREQ = 10,
	SS_CPUFREQ_KHZ = 11,
};

static bool key_eq(const char *a, size_t n, const char *b)
{
	return strlen(b) == n && !memcmp(a, b, n);
}

int sonde__sysstats_meminfo_id(const char *key, size_t len)
{
	for (size_t i = 1; i < sizeof(meminfo_keys) / sizeof(meminfo_keys[0]); i++)
		if (key_eq(key, len, meminfo_keys[i]))
			return (int)i;
	return 0;
}

int sonde__sysstats_vmstat_id(const char *key, size_t len)
{
	for (size_t i = 0; i < sizeof(vmstat_keys) / sizeof(vmstat_keys[0]); i++)
		if (key_eq(key, len, vmstat_keys[i].key))
			return vmstat_keys[i].id;
	return 0;
}

/* --- parsers --- */

static bool blank(char c)
{
	return c == ' ' || c == '\t';
}

/* Parses a decimal at *p (after blanks) up to end; false if there is none or it
 * overflows. */
static bool parse_u64(const char **p, const char *end, uint64_t *out)
{
	const char *q = *p;
	uint64_t v = 0;

	while (q < end && blank(*q))
		q++;
	const char *start = q;
	while (q < end && *q >= '0' && *q <= '9') {
		unsigned d = (unsigned)(*q - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
		q++;
	}
	if (q == start)
		return false;
	*p = q;
	*out = v;
	return true;
}

int sonde__sysstats_parse_kv(const char *buf, size_t len, sysstats_kv_fn fn, void *ctx)
{
	const char *p = buf, *end = buf + len;
	int n = 0;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *e = nl ? nl : end;
		const char *k = p;
		while (k < e && !blank(*k) && *k != ':')
			k++;
		const char *v = k < e && *k == ':' ? k + 1 : k;
		uint64_t val;
		if (k > p && parse_u64(&v, e, &val)) {
			fn(ctx, p, (size_t)(k - p), val);
			n++;
		}
		p = nl ? nl + 1 : end;
	}
	return n;
}

static void stat_cpu_line(const char *p, const char *e, const struct sysstats_stat_cb *cb)
{
	struct sysstats_cpu_times t = {.cpu = -1};
	uint64_t *f[] = {&t.user,   &t.nice, &t.system,	 &t.idle,
			 &t.iowait, &t.irq,  &t.softirq, &t.steal};
	const char *q = p + 3;
	uint64_t cpu;

	if (q < e && !blank(*q)) {
		if (!parse_u64(&q, e, &cpu) || cpu > 65535)
			return;
		t.cpu = (int)cpu;
	}
	/* Older kernels have fewer columns: the missing ones stay 0. */
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		if (!parse_u64(&q, e, f[i]))
			break;
	if (cb->cpu)
		cb->cpu(cb->ctx, &t);
}

static void stat_counts(const char *q, const char *e, int kind, const struct sysstats_stat_cb *cb)
{
	uint64_t v;

	for (int i = -1; i < 65536 && parse_u64(&q, e, &v); i++)
		if (cb->count)
			cb->count(cb->ctx, kind, i, v);
}

int sonde__sysstats_parse_stat(const char *buf, size_t len, const struct sysstats_stat_cb *cb)
{
	const char *p = buf, *end = buf + len;
	int found = 0;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *e = nl ? nl : end;
		size_t n = (size_t)(e - p);
		uint64_t v;
		if (n > 3 && !memcmp(p, "cpu", 3)) {
			stat_cpu_line(p, e, cb);
			found++;
		} else if (n > 5 && !memcmp(p, "intr ", 5)) {
			stat_counts(p + 5, e, 0, cb);
			found++;
		} else if (n > 8 && !memcmp(p, "softirq ", 8)) {
			stat_counts(p + 8, e, 1, cb);
			found++;
		} else if (n > 10 && !memcmp(p, "processes ", 10)) {
			const char *q = p + 10;
			if (parse_u64(&q, e, &v) && cb->forks)
				cb->forks(cb->ctx, v);
			found++;
		}
		p = nl ? nl + 1 : end;
	}
	return found ? 0 : -SONDE_E_FORMAT;
}

/* --- config --- */

static uint32_t period(uint64_t v)
{
	if (v == 0)
		return 0;
	if (v < MIN_PERIOD_MS)
		return MIN_PERIOD_MS;
	return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

/* A repeated enum, packed or not. */
static int add_ids(const struct pb_field *f, uint16_t *ids, size_t *n)
{
	uint64_t v;

	if (f->wire == PB_VARINT) {
		if (*n >= SYSSTATS_MAX_KEYS)
			return -SONDE_E_RANGE;
		ids[(*n)++] = (uint16_t)(f->u > UINT16_MAX ? 0 : f->u);
		return 0;
	}
	struct pb_reader r = pb_sub(f);
	int rc;
	while ((rc = sonde__pb_packed_next(&r, &v)) > 0) {
		if (*n >= SYSSTATS_MAX_KEYS)
			return -SONDE_E_RANGE;
		ids[(*n)++] = (uint16_t)(v > UINT16_MAX ? 0 : v);
	}
	return rc < 0 ? -SONDE_E_FORMAT : 0;
}

int sonde__sysstats_config_parse(const void *buf, size_t len, struct sysstats_config *c)
{
	struct pb_reader r = pb_reader_init(buf, len);
	struct pb_field f;
	int rc;

	memset(c, 0, sizeof(*c));
	while ((rc = sonde__pb_next(&r, &f)) > 0) {
		bool v = f.wire == PB_VARINT, ok = v || f.wire == PB_LEN;
		if (f.num == 1 && v)
			c->meminfo_period_ms = period(f.u);
		else if (f.num == 2 && ok)
			rc = add_ids(&f, c->meminfo_counters, &c->nmeminfo);
		else if (f.num == 3 && v)
			c->vmstat_period_ms = period(f.u);
		else if (f.num == 4 && ok)
			rc = add_ids(&f, c->vmstat_counters, &c->nvmstat);
		else if (f.num == 5 && v)
			c->stat_period_ms = period(f.u);
		else if (f.num == 6 && ok) {
			uint16_t ids[SYSSTATS_MAX_KEYS];
			size_t n = 0;
			rc = add_ids(&f, ids, &n);
			for (size_t i = 0; i < n; i++)
				if (ids[i] >= 1 && ids[i] <= 4)
					c->stat_mask |= 1u << ids[i];
		} else if (f.num == 7 && v)
			c->devfreq_period_ms = period(f.u);
		else if (f.num == 8 && v)
			c->cpufreq_period_ms = period(f.u);
		else
			sonde__probes_unsupported_mark(sonde__sysstats_unsupported, &f,
						       &c->unsupported);
		if (rc < 0)
			return rc;
	}
	return rc < 0 ? rc : 0;
}

/* --- the data source --- */

enum { SRC_MEMINFO, SRC_VMSTAT, SRC_STAT, SRC_DEVFREQ, SRC_CPUFREQ, SRC_N };

struct sysstats {
	struct sysstats_config cfg;
	uint32_t periods[SRC_N];
	uint64_t next[SRC_N];
	bool started;
	char proc[256], sys[256];
	bool meminfo_on[64];
	bool vmstat_on[256];
	struct buf text, out;
	uint64_t ns_per_tick;
	sysstats_emit_fn emit;
	void *ctx;
};

struct sysstats *sonde__sysstats_new(const struct sysstats_config *c, const char *proc_root,
			      const char *sys_root, sysstats_emit_fn emit, void *ctx)
{
	struct sysstats *s;

	if (!c->meminfo_period_ms && !c->vmstat_period_ms && !c->stat_period_ms &&
	    !c->devfreq_period_ms && !c->cpufreq_period_ms) {
		errno = EINVAL;
		return NULL;
	}
	s = sonde__calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->cfg = *c;
	s->periods[SRC_MEMINFO] = c->meminfo_period_ms;
	s->periods[SRC_VMSTAT] = c->vmstat_period_ms;
	s->periods[SRC_STAT] = c->stat_period_ms;
	s->periods[SRC_DEVFREQ] = c->devfreq_period_ms;
	s->periods[SRC_CPUFREQ] = c->cpufreq_period_ms;
	snprintf(s->proc, sizeof(s->proc), "%s", proc_root ? proc_root : "/proc");
	snprintf(s->sys, sizeof(s->sys), "%s", sys_root ? sys_root : "/sys");
	for (size_t i = 0; i < 64; i++)
		s->meminfo_on[i] = c->nmeminfo == 0;
	for (size_t i = 0; i < c->nmeminfo; i++)
		if (c->meminfo_counters[i] < 64)
			s->meminfo_on[c->meminfo_counters[i]] = true;
	for (size_t i = 0; i < 256; i++)
		s->vmstat_on[i] = c->nvmstat == 0;
	for (size_t i = 0; i < c->nvmstat; i++)
		if (c->vmstat_counters[i] < 256)
			s->vmstat_on[c->vmstat_counters[i]] = true;
	if (!s->cfg.stat_mask)
		s->cfg.stat_mask = SYSSTATS_STAT_CPU_TIMES | SYSSTATS_STAT_IRQ_COUNTS |
				   SYSSTATS_STAT_SOFTIRQ_COUNTS | SYSSTATS_STAT_FORK_COUNT;
	long hz = sysconf(_SC_CLK_TCK);
	s->ns_per_tick = hz > 0 ? 1000000000u / (uint64_t)hz : 10000000u;
	s->emit = emit;
	s->ctx = ctx;
	return s;
}

void sonde__sysstats_free(struct sysstats *s)
{
	if (!s)
		return;
	sonde__buf_free(&s->text);
	sonde__buf_free(&s->out);
	sonde__free(s);
}

static int read_text(struct sysstats *s, const char *root, const char *rel)
{
	char path[512];

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", root, rel) >= sizeof(path))
		return -ENAMETOOLONG;
	return sonde__proc_read_file(path, &s->text);
}

static void meminfo_kv(void *ctx, const char *key, size_t len, uint64_t value)
{
	struct sysstats *s = ctx;
	int id = sonde__sysstats_meminfo_id(key, len);

	if (id <= 0 || id >= 64 || !s->meminfo_on[id])
		return;
	size_t m = sonde__pb_begin(&s->out, SS_MEMINFO);
	sonde__pb_put_varint(&s->out, 1, (uint64_t)id);
	sonde__pb_put_varint(&s->out, 2, value); /* kB, as the file says */
	sonde__pb_end(&s->out, m);
}

static void vmstat_kv(void *ctx, const char *key, size_t len, uint64_t value)
{
	struct sysstats *s = ctx;
	int id = sonde__sysstats_vmstat_id(key, len);

	if (id <= 0 || id >= 256 || !s->vmstat_on[id])
		return;
	size_t m = sonde__pb_begin(&s->out, SS_VMSTAT);
	sonde__pb_put_varint(&s->out, 1, (uint64_t)id);
	sonde__pb_put_varint(&s->out, 2, value);
	sonde__pb_end(&s->out, m);
}

static void stat_cpu(void *ctx, const struct sysstats_cpu_times *t)
{
	struct sysstats *s = ctx;
	uint64_t k = s->ns_per_tick;

	if (t->cpu < 0 || !(s->cfg.stat_mask & SYSSTATS_STAT_CPU_TIMES))
		return;
	size_t m = sonde__pb_begin(&s->out, SS_CPU_STAT);
	sonde__pb_put_varint(&s->out, 1, (uint64_t)t->cpu);
	sonde__pb_put_varint(&s->out, 2, t->user * k);
	sonde__pb_put_varint(&s->out, 3, t->nice * k);
	sonde__pb_put_varint(&s->out, 4, t->system * k);
	sonde__pb_put_varint(&s->out, 5, t->idle * k);
	sonde__pb_put_varint(&s->out, 6, t->iowait * k);
	sonde__pb_put_varint(&s->out, 7, t->irq * k);
	sonde__pb_put_varint(&s->out, 8, t->softirq * k);
	sonde__pb_put_varint(&s->out, 9, t->steal * k);
	sonde__pb_end(&s->out, m);
}

static void stat_count(void *ctx, int kind, int index, uint64_t value)
{
	struct sysstats *s = ctx;
	uint32_t bit = kind == 0 ? SYSSTATS_STAT_IRQ_COUNTS : SYSSTATS_STAT_SOFTIRQ_COUNTS;

	if (!(s->cfg.stat_mask & bit))
		return;
	if (index < 0) {
		sonde__pb_put_varint(&s->out, kind == 0 ? SS_NUM_IRQ_TOTAL : SS_NUM_SOFTIRQ_TOTAL, value);
		return;
	}
	if (value == 0)
		return; /* as traced_probes: only the interrupts that happened */
	size_t m = sonde__pb_begin(&s->out, kind == 0 ? SS_NUM_IRQ : SS_NUM_SOFTIRQ);
	sonde__pb_put_varint(&s->out, 1, (uint64_t)index);
	sonde__pb_put_varint(&s->out, 2, value);
	sonde__pb_end(&s->out, m);
}

static void stat_forks(void *ctx, uint64_t n)
{
	struct sysstats *s = ctx;

	if (s->cfg.stat_mask & SYSSTATS_STAT_FORK_COUNT)
		sonde__pb_put_varint(&s->out, SS_NUM_FORKS, n);
}

static uint64_t read_u64_file(struct sysstats *s, const char *rel, bool *ok)
{
	uint64_t v = 0;
	const char *p;

	*ok = false;
	if (read_text(s, s->sys, rel) < 0)
		return 0;
	p = (const char *)s->text.data;
	*ok = parse_u64(&p, p + s->text.len, &v);
	return v;
}

static void sample_cpufreq(struct sysstats *s)
{
	char rel[128];
	bool ok;

	/* CPUs in order until the first without cpufreq; cpuinfo_cur_freq is the hardware's
	 * view, scaling_cur_freq what the governor asked for (and readable without root). */
	for (int cpu = 0; cpu < 4096; cpu++) {
		snprintf(rel, sizeof(rel), "devices/system/cpu/cpu%d/cpufreq/cpuinfo_cur_freq",
			 cpu);
		uint64_t khz = read_u64_file(s, rel, &ok);
		if (!ok) {
			snprintf(rel, sizeof(rel),
				 "devices/system/cpu/cpu%d/cpufreq/scaling_cur_freq", cpu);
			khz = read_u64_file(s, rel, &ok);
		}
		if (!ok)
			break;
		sonde__pb_put_varint(&s->out, SS_CPUFREQ_KHZ, khz);
	}
}

static void sample_devfreq(struct sysstats *s)
{
	char path[512], rel[512];
	bool ok;

	snprintf(path, sizeof(path), "%s/class/devfreq", s->sys);
	DIR *d = opendir(path);
	if (!d)
		return;
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(rel, sizeof(rel), "class/devfreq/%.200s/cur_freq", e->d_name);
		uint64_t hz = read_u64_file(s, rel, &ok);
		if (!ok)
			continue;
		size_t m = sonde__pb_begin(&s->out, SS_DEVFREQ);
		sonde__pb_put_string(&s->out, 1, e->d_name);
		sonde__pb_put_varint(&s->out, 2, hz);
		sonde__pb_end(&s->out, m);
	}
	closedir(d);
}

static void sample(struct sysstats *s, int src)
{
	const struct sysstats_stat_cb cb = {stat_cpu, stat_count, stat_forks, s};

	switch (src) {
	case SRC_MEMINFO:
		if (read_text(s, s->proc, "meminfo") == 0)
			sonde__sysstats_parse_kv((const char *)s->text.data, s->text.len, meminfo_kv, s);
		break;
	case SRC_VMSTAT:
		if (read_text(s, s->proc, "vmstat") == 0)
			sonde__sysstats_parse_kv((const char *)s->text.data, s->text.len, vmstat_kv, s);
		break;
	case SRC_STAT:
		if (read_text(s, s->proc, "stat") == 0)
			sonde__sysstats_parse_stat((const char *)s->text.data, s->text.len, &cb);
		break;
	case SRC_DEVFREQ:
		sample_devfreq(s);
		break;
	case SRC_CPUFREQ:
		sample_cpufreq(s);
		break;
	}
}

static uint64_t boottime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int64_t sonde__sysstats_tick(struct sysstats *s, uint64_t now_ms)
{
	uint64_t soonest = UINT64_MAX;
	bool any = false;

	sonde__buf_reset(&s->out);
	sonde__pb_put_varint(&s->out, TP_TIMESTAMP, boottime_ns());
	size_t m = sonde__pb_begin(&s->out, TP_SYS_STATS);
	for (int i = 0; i < SRC_N; i++) {
		if (!s->periods[i])
			continue;
		if (!s->started || now_ms >= s->next[i]) {
			sample(s, i);
			any = true;
			/* Keep the phase: the next sample is one period after the due time, not
			 * after now, unless a whole period was missed. */
			s->next[i] =
				s->started ? s->next[i] + s->periods[i] : now_ms + s->periods[i];
			if (s->next[i] <= now_ms)
				s->next[i] = now_ms + s->periods[i];
		}
		if (s->next[i] < soonest)
			soonest = s->next[i];
	}
	s->started = true;
	sonde__pb_put_varint(&s->out, SS_COLLECTION_END, boottime_ns());
	sonde__pb_end(&s->out, m);
	if (any) {
		int r = buf_error(&s->out);
		if (r == 0)
			r = s->emit(s->ctx, s->out.data, s->out.len);
		if (r < 0)
			return r;
	}
	return soonest == UINT64_MAX ? -EINVAL : (int64_t)(soonest - now_ms);
}
