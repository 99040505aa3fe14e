/* The DWARF unwinder on this very process: a chain of functions that keep no frame
 * pointer (and scribble over rbp) captures its registers and a copy of its stack, and the
 * unwinder must find the chain, in order, as glibc's backtrace() (libgcc's unwinder, an
 * independent implementation) does, and end at _start. Also: a signal frame, leaf functions
 * at their first instruction, PLT stubs, copy-window truncation and the frame limit. */
#include <elf.h>
#include <execinfo.h>
#include <gelf.h>
#include <libelf.h>
#include <malloc.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "../test.h"
#include "record/modules.h"
#include "record/stack.h"
#include "unwind/cache.h"
#include "unwind/dwarf.h"

enum { COPY = 64 * 1024 };

struct capture {
	struct unwind_regs regs;
	struct unwind_stack stack;
	uint8_t data[COPY];
	void *bt[64];
	int n_bt;
	uint64_t uc_rip; /* signal test: the interrupted pc */
};

/* The end of the stack mapping that holds addr. */
static uint64_t stack_end(uint64_t addr)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	uint64_t lo, hi, end = addr;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && addr >= lo && addr < hi)
			end = hi;
	if (f)
		fclose(f);
	return end;
}

/* Copies user stack the way the kernel does for a sample: raw bytes, without the
 * sanitizer's view of which stack slots are live. */
__attribute__((no_sanitize_address)) static void copy_stack(uint8_t *dst, uint64_t src, size_t n)
{
	__asm__ volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
}

static size_t copy_limit = COPY;

__attribute__((noinline, noclone)) static void capture_here(struct capture *c)
{
	uint64_t rip, rsp, rbp, rbx;

	__asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2\n\tmov %%rbx, %3"
			 : "=r"(rip), "=r"(rsp), "=r"(rbp), "=r"(rbx));
	memset(&c->regs, 0, sizeof(c->regs));
	c->regs.r[UREG_RIP] = rip;
	c->regs.r[UREG_RSP] = rsp;
	c->regs.r[UREG_RBP] = rbp;
	c->regs.r[UREG_RBX] = rbx;
	c->regs.valid = 1u << UREG_RIP | 1u << UREG_RSP | 1u << UREG_RBP | 1u << UREG_RBX;
	size_t n = stack_end(rsp) - rsp;
	if (n > copy_limit)
		n = copy_limit;
	copy_stack(c->data, rsp, n);
	c->stack = (struct unwind_stack){c->data, n, rsp};
	c->n_bt = backtrace(c->bt, 64);
}

/* The chain: no frame pointers, rbx and rbp used as scratch and rbp left pointing at
 * garbage while the callee runs, so frame pointers cannot unwind it. */
#define NOFP __attribute__((noinline, noclone, optimize("omit-frame-pointer")))
NOFP int unwind_chain_c(struct capture *c, int x);
NOFP int unwind_chain_b(struct capture *c, int x);
NOFP int unwind_chain_a(struct capture *c, int x);

NOFP int unwind_chain_c(struct capture *c, int x)
{
	__asm__ volatile("mov $0x5a5a5a5a, %%ebp\n\tmov $0x3c3c, %%ebx" : : : "rbx", "rbp");
	capture_here(c);
	return x + 1;
}

NOFP int unwind_chain_b(struct capture *c, int x)
{
	__asm__ volatile("mov $0x11, %%ebp" : : : "rbp");
	return unwind_chain_c(c, x * 3) + 2;
}

NOFP int unwind_chain_a(struct capture *c, int x)
{
	__asm__ volatile("" : : : "rbx", "rbp");
	return unwind_chain_b(c, x + 5) * 7;
}

/* Address range of a symbol of this executable, from its symbol table. */
static void sym_range(const char *name, uint64_t *lo, uint64_t *hi)
{
	char self[512];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	int fd;
	Elf *e;
	Elf_Scn *scn = NULL;

	ASSERT(n > 0);
	self[n] = 0;
	elf_version(EV_CURRENT);
	fd = open(self, O_RDONLY);
	ASSERT(fd >= 0);
	e = elf_begin(fd, ELF_C_READ, NULL);
	*lo = *hi = 0;
	while (e && (scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		Elf_Data *d;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_SYMTAB ||
		    !(d = elf_getdata(scn, NULL)))
			continue;
		for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym s;
			if (gelf_getsym(d, (int)i, &s) &&
			    !strcmp(elf_strptr(e, sh.sh_link, s.st_name), name)) {
				*lo = s.st_value;
				*hi = s.st_value + s.st_size;
			}
		}
	}
	elf_end(e);
	close(fd);
	if (!*hi)
		FAIL("no symbol %s", name);
}

/* Runtime address range of a function of this executable. */
static void func_range(const char *name, void *fn, uint64_t *lo, uint64_t *hi)
{
	uint64_t slo, shi, bias;

	sym_range(name, &slo, &shi);
	bias = (uint64_t)(uintptr_t)fn - slo;
	*lo = slo + bias;
	*hi = shi + bias;
}

/* This process's executable mappings looked up as the recorder looks them up: its module
 * table and sonde__record_find_module, with a table cache building each file's CFI on
 * first use. */
struct self_maps {
	struct rec_modtable mods;
	struct unwind_cache *cache;
	struct rec_find_ctx find;
};

static struct self_maps *self_maps(void)
{
	struct self_maps *m = calloc(1, sizeof(*m));

	ASSERT(m != NULL);
	ASSERT_OK(sonde__modtable_load_pid(&m->mods, getpid()));
	ASSERT_INT(m->mods.n, >=, 2);
	m->cache = sonde__unwind_cache_new();
	ASSERT(m->cache != NULL);
	m->find = (struct rec_find_ctx){.mods = &m->mods, .cache = m->cache, .pid = getpid()};
	return m;
}

static void self_maps_free(struct self_maps *m)
{
	sonde__unwind_cache_free(m->cache);
	sonde__modtable_free(&m->mods);
	free(m);
}

static uint64_t frames[UNWIND_MAX_FRAMES];

static bool in(uint64_t pc, const char *name, void *fn)
{
	uint64_t lo, hi;

	func_range(name, fn, &lo, &hi);
	return pc >= lo && pc < hi;
}

TEST(unwind_self_chain_without_frame_pointers)
{
	static struct capture c;
	struct self_maps *m = self_maps();
	struct unwind_stats st = {0};
	size_t n;

	ASSERT_INT(unwind_chain_a(&c, 1), ==, ((1 + 5) * 3 + 1 + 2) * 7);
	enum unwind_end end = sonde__unwind_dwarf(&c.regs, &c.stack, sonde__record_find_module, &m->find, frames,
					   UNWIND_MAX_FRAMES, &n, &st);
	for (size_t i = 0; i < n || i < (size_t)c.n_bt; i++)
		printf("#%zu 0x%lx bt %p\n", i, i < n ? frames[i] : 0,
		       i < (size_t)c.n_bt ? c.bt[i] : NULL);
	ASSERT_INT(end, ==, UNWIND_END_COMPLETE);
	ASSERT(in(frames[0], "capture_here", (void *)capture_here));
	ASSERT(in(frames[1], "unwind_chain_c", (void *)unwind_chain_c));
	ASSERT(in(frames[2], "unwind_chain_b", (void *)unwind_chain_b));
	ASSERT(in(frames[3], "unwind_chain_a", (void *)unwind_chain_a));
	ASSERT(in(frames[4], "test_unwind_self_chain_without_frame_pointers",
		  (void *)test_unwind_self_chain_without_frame_pointers));
	/* backtrace() saw the same callers (it returns return addresses, and starts with
	 * its own caller, or with the sanitizer's interceptor in SAN builds) and stops at
	 * the same outermost frame. */
	int j = 0;
	while (j < c.n_bt && (uint64_t)(uintptr_t)c.bt[j] - 1 != frames[1])
		j++;
	ASSERT_INT(c.n_bt - j, ==, (int)n - 1);
	for (size_t i = 1; i < n; i++)
		ASSERT_UINT(frames[i], ==, (uint64_t)(uintptr_t)c.bt[j + (int)i - 1] - 1);
	ASSERT_UINT(st.fp_steps, ==, 0);
	ASSERT_UINT(st.cfi_steps, ==, n - 1);
	self_maps_free(m);
}

TEST(unwind_copy_window_and_max_frames)
{
	static struct capture c;
	struct self_maps *m = self_maps();
	uint64_t full[64];
	size_t n_full, n;

	unwind_chain_a(&c, 1);
	ASSERT_INT(sonde__unwind_dwarf(&c.regs, &c.stack, sonde__record_find_module, &m->find, full, 64, &n_full, NULL),
		   ==, UNWIND_END_COMPLETE);
	ASSERT_INT(n_full, >=, 6);
	/* At most 3 frames: the first 3, marked as cut. */
	ASSERT_INT(sonde__unwind_dwarf(&c.regs, &c.stack, sonde__record_find_module, &m->find, frames, 3, &n, NULL), ==,
		   UNWIND_END_MAX_FRAMES);
	ASSERT_UINT(n, ==, 3);
	ASSERT(!memcmp(frames, full, 3 * sizeof(frames[0])));
	/* Exactly as many frames as the stack has is complete, not cut. */
	ASSERT_INT(sonde__unwind_dwarf(&c.regs, &c.stack, sonde__record_find_module, &m->find, frames, n_full, &n, NULL),
		   ==, UNWIND_END_COMPLETE);
	/* A copy that ends inside unwind_chain_b's frame: the frames inside it are found, then
	 * the walk reports the copy window, not a complete stack. */
	copy_limit = 64;
	unwind_chain_a(&c, 1);
	copy_limit = COPY;
	enum unwind_end end =
		sonde__unwind_dwarf(&c.regs, &c.stack, sonde__record_find_module, &m->find, frames, 64, &n, NULL);
	ASSERT_INT(end, ==, UNWIND_END_COPY_WINDOW);
	ASSERT_INT(n, >=, 1);
	ASSERT_INT(n, <, n_full);
	for (size_t i = 0; i < n; i++)
		ASSERT_UINT(frames[i], ==, full[i]);
	self_maps_free(m);
}

/* A function stopped at its first instruction (before its prologue ran) has CFA = rsp + 8:
 * its caller is the return address on top of the stack. Synthesized from a real return
 * address into unwind_chain_a. */
TEST(unwind_leaf_before_prologue)
{
	static struct capture c;
	struct self_maps *m = self_maps();
	uint64_t full[16], word[1];
	struct unwind_regs regs = {0};
	size_t n_full, n;

	unwind_chain_a(&c, 1);
	sonde__unwind_dwarf(&c.regs, &c.stack, sonde__record_find_module, &m->find, full, 16, &n_full, NULL);
	ASSERT(in(full[3], "unwind_chain_a", (void *)unwind_chain_a));
	word[0] = full[3] + 1; /* the return address into unwind_chain_a */
	regs.r[UREG_RIP] = (uint64_t)(uintptr_t)unwind_chain_b;
	regs.r[UREG_RSP] = 0x7ff000001000;
	regs.r[UREG_RBP] = 0x11; /* garbage: frame pointers would fail */
	regs.valid = 1u << UREG_RIP | 1u << UREG_RSP | 1u << UREG_RBP;
	struct unwind_stack s = {(const uint8_t *)word, sizeof(word), 0x7ff000001000};
	struct unwind_stats st = {0};
	enum unwind_end end = sonde__unwind_dwarf(&regs, &s, sonde__record_find_module, &m->find, frames, 16, &n, &st);
	ASSERT_UINT(n, ==, 2);
	ASSERT_UINT(frames[0], ==, (uint64_t)(uintptr_t)unwind_chain_b);
	ASSERT_UINT(frames[1], ==, full[3]);
	/* unwind_chain_a's own CFA lies beyond the 8 copied bytes. */
	ASSERT_INT(end, ==, UNWIND_END_COPY_WINDOW);
	ASSERT_UINT(st.cfi_steps, ==, 1);
	self_maps_free(m);
}

/* Inside a lazy-binding PLT entry the CFA depends on whether its push ran: the PLT's
 * DW_CFA_def_cfa_expression says rsp + 8, or rsp + 16 from offset 11 of each entry. */
TEST(unwind_through_plt_entry)
{
	struct self_maps *m = self_maps();
	uint64_t lo, hi, plt = 0, ra = (uint64_t)(uintptr_t)unwind_chain_a + 4;
	uint64_t stack[2];
	size_t n;

	/* Find .plt through the symbolless route: its runtime address is section address
	 * plus the bias of any function. */
	{
		char self[512], cmd[700];
		ssize_t k = readlink("/proc/self/exe", self, sizeof(self) - 1);
		ASSERT(k > 0);
		self[k] = 0;
		snprintf(cmd, sizeof(cmd), "readelf -SW '%s' | awk '$2==\".plt\"{print $4}'", self);
		FILE *f = popen(cmd, "r");
		ASSERT(f && fscanf(f, "%lx", &plt) == 1);
		pclose(f);
		sym_range("unwind_chain_a", &lo, &hi);
		plt += (uint64_t)(uintptr_t)unwind_chain_a - lo;
	}
	for (int off = 0; off < 16; off += 11) {
		struct unwind_regs regs = {0};
		regs.r[UREG_RIP] = plt + 16 + (uint64_t)off; /* the first entry after PLT0 */
		regs.r[UREG_RSP] = 0x7ff000002000;
		regs.valid = 1u << UREG_RIP | 1u << UREG_RSP;
		stack[0] = off >= 11 ? 7 : ra; /* the pushed relocation index, then the ra */
		stack[1] = off >= 11 ? ra : 0x5555;
		struct unwind_stack s = {(const uint8_t *)stack, sizeof(stack), 0x7ff000002000};
		sonde__unwind_dwarf(&regs, &s, sonde__record_find_module, &m->find, frames, 2, &n, NULL);
		ASSERT_UINT(n, ==, 2);
		ASSERT_UINT(frames[1], ==, ra - 1);
	}
	self_maps_free(m);
}

static struct capture sig_cap;
static volatile sig_atomic_t spin_stop;

static void on_alarm(int sig, siginfo_t *si, void *ucv)
{
	ucontext_t *uc = ucv;

	sig_cap.uc_rip = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
	capture_here(&sig_cap);
	spin_stop = 1;
}

/* A leaf with no stack frame at all, interrupted by the signal. */
__attribute__((noinline, noclone)) void unwind_spin_leaf(void);
__attribute__((noinline, noclone)) void unwind_spin_leaf(void)
{
	while (!spin_stop)
		;
}

NOFP void unwind_spin_caller(void);
NOFP void unwind_spin_caller(void)
{
	__asm__ volatile("mov $0x77, %%ebp" : : : "rbp");
	unwind_spin_leaf();
	__asm__ volatile("" ::: "memory");
}

TEST(unwind_through_signal_frame)
{
	struct sigaction sa = {.sa_sigaction = on_alarm, .sa_flags = SA_SIGINFO};
	struct itimerval it = {.it_value = {0, 20000}};
	struct self_maps *m = self_maps();
	struct unwind_stats st = {0};
	size_t n, k;

	sigemptyset(&sa.sa_mask);
	ASSERT_INT(sigaction(SIGALRM, &sa, NULL), ==, 0);
	ASSERT_INT(setitimer(ITIMER_REAL, &it, NULL), ==, 0);
	unwind_spin_caller();
	ASSERT(in(sig_cap.uc_rip, "unwind_spin_leaf", (void *)unwind_spin_leaf));
	enum unwind_end end = sonde__unwind_dwarf(&sig_cap.regs, &sig_cap.stack, sonde__record_find_module, &m->find,
					   frames, 64, &n, &st);
	for (size_t i = 0; i < n; i++)
		printf("#%zu 0x%lx\n", i, frames[i]);
	ASSERT_INT(end, ==, UNWIND_END_COMPLETE);
	ASSERT(in(frames[1], "on_alarm", (void *)on_alarm));
	/* frames[2] is the trampoline (__restore_rt), then the interrupted pc, exact. */
	for (k = 0; k < n && frames[k] != sig_cap.uc_rip; k++)
		;
	ASSERT_UINT(k, ==, 3);
	ASSERT(in(frames[4], "unwind_spin_caller", (void *)unwind_spin_caller));
	ASSERT(in(frames[5], "test_unwind_through_signal_frame",
		  (void *)test_unwind_through_signal_frame));
	ASSERT_UINT(st.fp_steps, ==, 0);
	self_maps_free(m);
}

/* Code in [0x400000, 0x500000) without CFI. */
static bool fake_code(void *ctx, uint64_t pc, struct unwind_module *out)
{
	out->table = NULL;
	out->bias = 0;
	return pc >= 0x400000 && pc < 0x500000;
}

/* Code without CFI: the unwinder falls back to frame pointers and counts why. */
TEST(unwind_falls_back_to_frame_pointers)
{
	static uint64_t stack[8];
	uint64_t base = 0x7ff000003000;
	struct unwind_regs regs = {0};
	struct unwind_stats st = {0};
	size_t n;

	/* frame at base+16: [saved rbp = base+48][ra = 0x401234]; at base+48: [0][0x401500] */
	stack[2] = base + 48;
	stack[3] = 0x401234;
	stack[6] = 0;
	stack[7] = 0x401500;
	regs.r[UREG_RIP] = 0x401000;
	regs.r[UREG_RSP] = base;
	regs.r[UREG_RBP] = base + 16;
	regs.valid = 1u << UREG_RIP | 1u << UREG_RSP | 1u << UREG_RBP;
	struct unwind_stack s = {(const uint8_t *)stack, sizeof(stack), base};
	enum unwind_end end = sonde__unwind_dwarf(&regs, &s, fake_code, NULL, frames, 16, &n, &st);
	ASSERT_INT(end, ==, UNWIND_END_COMPLETE);
	ASSERT_UINT(n, ==, 3);
	ASSERT_UINT(frames[1], ==, 0x401233);
	ASSERT_UINT(frames[2], ==, 0x4014ff);
	ASSERT_UINT(st.fp_steps, ==, 2);
	ASSERT_UINT(st.fallbacks[UNWIND_FB_NO_CFI], ==, 3);
	ASSERT_STR_EQ(sonde__unwind_fallback_name(UNWIND_FB_NO_CFI), "no-cfi");
	/* A return address outside every mapping is not followed. */
	stack[3] = 0x901234;
	ASSERT_INT(sonde__unwind_dwarf(&regs, &s, fake_code, NULL, frames, 16, &n, &st), ==,
		   UNWIND_END_ERROR);
	ASSERT_UINT(n, ==, 1);
}

/* A sample inside the vDSO (clock_gettime) unwinds through the vDSO's own CFI, whose table
 * is built from the process's memory. The signal lands wherever the loop is: retry until
 * it lands inside the vDSO. */
NOFP void unwind_vdso_caller(void);
NOFP void unwind_vdso_caller(void)
{
	struct timespec ts;

	__asm__ volatile("mov $0x99, %%ebp" : : : "rbp");
	while (!spin_stop)
		clock_gettime(CLOCK_MONOTONIC, &ts);
	__asm__ volatile("" ::: "memory");
}

TEST(unwind_through_vdso)
{
	struct sigaction sa = {.sa_sigaction = on_alarm, .sa_flags = SA_SIGINFO};
	struct itimerval it = {.it_value = {0, 2000}};
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	uint64_t lo = 0, hi = 0;
	size_t n;

	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, "[vdso]"))
			ASSERT(sscanf(line, "%lx-%lx", &lo, &hi) == 2);
	if (f)
		fclose(f);
	if (!lo)
		SKIP("this process has no vDSO");
	sigemptyset(&sa.sa_mask);
	ASSERT_INT(sigaction(SIGALRM, &sa, NULL), ==, 0);
	for (int tries = 0; tries < 500; tries++) {
		spin_stop = 0;
		ASSERT_INT(setitimer(ITIMER_REAL, &it, NULL), ==, 0);
		unwind_vdso_caller();
		if (sig_cap.uc_rip >= lo && sig_cap.uc_rip < hi)
			break;
	}
	if (sig_cap.uc_rip < lo || sig_cap.uc_rip >= hi)
		FAIL("500 signals never interrupted the vDSO");
	struct self_maps *m = self_maps();
	struct unwind_stats st = {0};
	enum unwind_end end = sonde__unwind_dwarf(&sig_cap.regs, &sig_cap.stack, sonde__record_find_module, &m->find,
					   frames, 64, &n, &st);
	ASSERT_INT(end, ==, UNWIND_END_COMPLETE);
	ASSERT_UINT(frames[3], ==, sig_cap.uc_rip);
	/* clock_gettime in the vDSO, through libc's wrapper (and the sanitizer's interceptor in
	 * SAN builds), then the caller */
	size_t k = 4;
	while (k < n && !in(frames[k], "unwind_vdso_caller", (void *)unwind_vdso_caller))
		k++;
	for (size_t i = 0; i < n; i++)
		printf("#%zu 0x%lx\n", i, frames[i]);
	ASSERT_UINT(k, <=, 6);
	ASSERT(in(frames[k + 1], "test_unwind_through_vdso", (void *)test_unwind_through_vdso));
	ASSERT_UINT(st.fp_steps, ==, 0);
	self_maps_free(m);
}

/* Once the tables are built, unwinding allocates nothing (the recorder unwinds every sample
 * on its drain path). */
TEST(unwind_no_allocation_when_warm)
{
	static struct capture c;
	struct self_maps *m = self_maps();
	size_t n;

	unwind_chain_a(&c, 1);
	sonde__unwind_dwarf(&c.regs, &c.stack, sonde__record_find_module, &m->find, frames, 64, &n, NULL); /* warm */
	struct mallinfo2 before = mallinfo2();
	for (int i = 0; i < 1000; i++)
		sonde__unwind_dwarf(&c.regs, &c.stack, sonde__record_find_module, &m->find, frames, 64, &n, NULL);
	struct mallinfo2 after = mallinfo2();
	ASSERT_UINT(after.uordblks, ==, before.uordblks);
	ASSERT_UINT(after.hblkhd, ==, before.hblkhd);
	ASSERT_INT(n, >=, 6);
	self_maps_free(m);
}

/* A module table entry remembers what the cache said of it (its CFI table and bias), and
 * forgets it when a trim moves its start: the part left is asked anew, and gets the same
 * table and bias, the file and its load address being the same. */
TEST(unwind_module_memo_follows_the_mapping)
{
	struct self_maps *m = self_maps();
	struct unwind_module first, again;
	uint64_t pc = (uint64_t)(uintptr_t)unwind_chain_b;

	ASSERT(sonde__record_find_module(&m->find, pc, &first));
	ASSERT(first.table != NULL);
	const struct rec_module *e = sonde__modtable_find(&m->mods, pc);
	ASSERT(e != NULL);
	ASSERT(e->unw_cache == m->cache);
	ASSERT(e->unw.table == first.table);

	/* a trim that keeps the start keeps what it remembers */
	uint64_t page = pc & ~0xfffull, start = e->start;
	ASSERT_UINT(page, >, start); /* the text has more than a page before this function */
	uint64_t end = e->end;
	ASSERT_UINT(end - 0x1000, >, page); /* and more than a page after it */
	ASSERT_OK(sonde__modtable_remove(&m->mods, end - 0x1000, end));
	e = sonde__modtable_find(&m->mods, pc);
	ASSERT_UINT(e->end, ==, end - 0x1000);
	ASSERT(e->unw_cache == m->cache);

	/* one that moves it forgets */
	ASSERT_OK(sonde__modtable_remove(&m->mods, start, page));
	e = sonde__modtable_find(&m->mods, pc);
	ASSERT_UINT(e->start, ==, page);
	ASSERT(e->unw_cache == NULL);
	m->find = (struct rec_find_ctx){.mods = &m->mods, .cache = m->cache, .pid = getpid()};
	ASSERT(sonde__record_find_module(&m->find, pc, &again));
	ASSERT(again.table == first.table);
	ASSERT_UINT(again.bias, ==, first.bias);
	ASSERT(e->unw_cache == m->cache);

	/* and every function left in the trimmed entry (where the linker put them does not
	 * matter) resolves to the same table and bias */
	void *const fns[] = {(void *)unwind_chain_a, (void *)unwind_chain_c, (void *)capture_here,
			     (void *)test_unwind_module_memo_follows_the_mapping};
	for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
		uint64_t at = (uint64_t)(uintptr_t)fns[i];
		if (at < e->start || at >= e->end)
			continue;
		ASSERT(sonde__record_find_module(&m->find, at, &again));
		ASSERT(again.table == first.table);
		ASSERT_UINT(again.bias, ==, first.bias);
	}
	self_maps_free(m);
}
