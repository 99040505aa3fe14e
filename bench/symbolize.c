/* Symbolization speed: sonde's symbolizer against eu-addr2line -f -i and binutils
 * addr2line -f -i, on the same random addresses in the code of one large binary with
 * DWARF (default: libc.so.6, whose debug information libc6-dbg installs under
 * /usr/lib/debug/.build-id, so every tool goes through a separate debug file). Each
 * tool gets all addresses in one run; process start-up is part of the peers' time, and
 * the module load (ELF, debug file, DWARF index) is part of sonde's.
 *
 * A sample of the answers is compared: every 100th address, frame by frame (function
 * name, source file name, line), against eu-addr2line, where eu-addr2line names a
 * function at all.
 *
 * usage: bench-symbolize [ELF [COUNT]]
 */
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sonde/spool.h>
#include <sonde/symbolize.h>

enum { MAX_FRAMES = 16, SAMPLE_EVERY = 100 };

struct answer {
	int n;
	char name[MAX_FRAMES][128];
	char file[MAX_FRAMES][128]; /* base name */
	unsigned line[MAX_FRAMES];
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The executable segment of path: file offset, size and address. */
static int text_segment(const char *path, uint64_t *off, uint64_t *size, uint64_t *vaddr)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), found = 0;
	Elf *e;
	size_t n = 0;

	elf_version(EV_CURRENT);
	if (fd < 0 || !(e = elf_begin(fd, ELF_C_READ, NULL)))
		return -1;
	elf_getphdrnum(e, &n);
	for (size_t i = 0; i < n && !found; i++) {
		GElf_Phdr ph;
		if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_LOAD && (ph.p_flags & PF_X)) {
			*off = ph.p_offset;
			*size = ph.p_filesz;
			*vaddr = ph.p_vaddr;
			found = 1;
		}
	}
	elf_end(e);
	close(fd);
	return found ? 0 : -1;
}

/* Function symbols of path's symbol table (or of its build-id debug file's), to tell
 * two names for one address (aliases, where tools may pick either) from real
 * disagreements. */
struct syms {
	char **name;
	uint64_t *addr;
	size_t n;
};

static void load_syms_from(const char *path, struct syms *out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	Elf *e = fd >= 0 ? elf_begin(fd, ELF_C_READ, NULL) : NULL;
	Elf_Scn *scn = NULL;

	while (e && (scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		Elf_Data *d;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_SYMTAB ||
		    !(d = elf_getdata(scn, NULL)))
			continue;
		size_t n = sh.sh_size / sh.sh_entsize;
		out->name = calloc(n, sizeof(char *));
		out->addr = calloc(n, sizeof(uint64_t));
		for (size_t i = 0; i < n; i++) {
			GElf_Sym sym;
			const char *nm;
			if (!gelf_getsym(d, (int)i, &sym) ||
			    GELF_ST_TYPE(sym.st_info) != STT_FUNC ||
			    !(nm = elf_strptr(e, sh.sh_link, sym.st_name)))
				continue;
			out->name[out->n] = strdup(nm);
			out->addr[out->n++] = sym.st_value;
		}
		break;
	}
	if (e)
		elf_end(e);
	if (fd >= 0)
		close(fd);
}

static void load_syms(const char *path, struct syms *out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	Elf *e = fd >= 0 ? elf_begin(fd, ELF_C_READ, NULL) : NULL;
	Elf_Scn *scn = NULL;
	char dbg[4096] = "";

	while (e && (scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		Elf_Data *d;
		GElf_Nhdr nh;
		size_t off = 0, name_off, desc_off;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE ||
		    !(d = elf_getdata(scn, NULL)))
			continue;
		while ((off = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
			if (nh.n_type != NT_GNU_BUILD_ID || nh.n_descsz < 2)
				continue;
			const uint8_t *id = (const uint8_t *)d->d_buf + desc_off;
			int k = snprintf(dbg, sizeof(dbg), "/usr/lib/debug/.build-id/%02x/", id[0]);
			for (size_t i = 1; i < nh.n_descsz; i++)
				k += snprintf(dbg + k, sizeof(dbg) - (size_t)k, "%02x", id[i]);
			snprintf(dbg + k, sizeof(dbg) - (size_t)k, ".debug");
		}
	}
	if (e)
		elf_end(e);
	if (fd >= 0)
		close(fd);
	if (dbg[0] && access(dbg, R_OK) == 0)
		load_syms_from(dbg, out);
	if (!out->n)
		load_syms_from(path, out);
}

static int aliases(const struct syms *t, const char *a, const char *b)
{
	uint64_t va = 0, vb = 1;

	for (size_t i = 0; i < t->n; i++) {
		if (!strcmp(t->name[i], a))
			va = t->addr[i];
		if (!strcmp(t->name[i], b))
			vb = t->addr[i];
	}
	return va == vb;
}

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Runs argv with stdin from in and stdout to out; returns the wall time. */
static double run_tool(const char *const argv[], const char *in, const char *out)
{
	double t0 = now();
	pid_t pid = fork();
	int status;

	if (pid == 0) {
		int i = open(in, O_RDONLY), o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(i, 0);
		dup2(o, 1);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	waitpid(pid, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "%s failed (status %d)\n", argv[0], status);
		return -1;
	}
	return now() - t0;
}

static const char *base(const char *p)
{
	const char *s = p ? strrchr(p, '/') : NULL;
	return s ? s + 1 : p ? p : "";
}

/* Output of `addr2line -a -f -i`: "0xADDR", then pairs of lines "FUNCTION" and
 * "FILE:LINE[:COL]"; eu-addr2line writes an inlined function as "NAME inlined at ...". */
static void parse_peer(const char *path, struct answer *ans, size_t n_addr)
{
	FILE *f = fopen(path, "r");
	char line[4096];
	long cur = -1;
	int want_pos = 0;

	while (f && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		if (!strncmp(line, "0x", 2) && !strchr(line, ' ') && !strchr(line, ':')) {
			cur++;
			want_pos = 0;
			continue;
		}
		if (cur < 0 || (size_t)cur >= n_addr)
			continue;
		struct answer *a = &ans[cur];
		if (!want_pos) {
			if (a->n == MAX_FRAMES)
				continue;
			char *cut = strstr(line, " inlined at ");
			if (cut)
				*cut = 0;
			snprintf(a->name[a->n], sizeof(a->name[0]), "%.127s", line);
			want_pos = 1;
		} else {
			char *colon = strchr(line, ':');
			unsigned ln = 0;
			if (colon) {
				ln = (unsigned)strtoul(colon + 1, NULL, 10);
				*colon = 0;
			}
			/* "??" is how the peers say "no file" */
			snprintf(a->file[a->n], sizeof(a->file[0]), "%.127s",
				 strcmp(line, "??") ? base(line) : "");
			a->line[a->n++] = ln;
			want_pos = 0;
		}
	}
	if (f)
		fclose(f);
}

/* 2: identical; 1: identical but for an alias (another name of the same address);
 * 0: different. */
static int same_answer(const struct answer *a, const struct sonde_sym_frame *f, int n,
		       const struct syms *t)
{
	int r = 2;

	if (a->n != n)
		return 0;
	for (int i = 0; i < n; i++) {
		if (strcmp(a->file[i], base(f[i].file)) || a->line[i] != f[i].line)
			return 0;
		if (strcmp(a->name[i], f[i].name)) {
			if (!aliases(t, a->name[i], f[i].name))
				return 0;
			r = 1;
		}
	}
	return r;
}

static void print_mismatch(uint64_t va, const struct answer *a, const struct sonde_sym_frame *f,
			   int n)
{
	fprintf(stderr, "mismatch at 0x%" PRIx64 ":\n", va);
	for (int i = 0; i < a->n; i++)
		fprintf(stderr, "  peer  %s %s:%u\n", a->name[i], a->file[i], a->line[i]);
	for (int i = 0; i < n; i++)
		fprintf(stderr, "  sonde %s %s:%u\n", f[i].name, base(f[i].file), f[i].line);
}

int main(int argc, char **argv)
{
	const char *elf = argc > 1 ? argv[1] : "/lib/x86_64-linux-gnu/libc.so.6";
	size_t count = argc > 2 ? strtoul(argv[2], NULL, 0) : 100000;
	uint64_t off, size, vaddr, seed = 0x9e3779b97f4a7c15ULL;
	char dir[] = "/tmp/bench-symbolize.XXXXXX", in[64], out_eu[64], out_bu[64];

	if (text_segment(elf, &off, &size, &vaddr) < 0 || !mkdtemp(dir)) {
		fprintf(stderr, "usage: bench-symbolize [ELF [COUNT]]\n");
		return 2;
	}
	uint64_t *offs = malloc(count * sizeof(*offs));
	struct sonde_sym_frame(*frames)[MAX_FRAMES] = calloc(count, sizeof(*frames));
	int *nf = calloc(count, sizeof(*nf));
	snprintf(in, sizeof(in), "%s/addrs", dir);
	FILE *f = fopen(in, "w");
	for (size_t i = 0; i < count; i++) {
		offs[i] = off + rng(&seed) % size;
		fprintf(f, "0x%" PRIx64 "\n", offs[i] - off + vaddr);
	}
	fclose(f);

	struct sonde_sym_module m = {.flags = SONDE_MODULE_EXEC, .path = elf};
	double t0 = now();
	struct sonde_symbolizer *s = sonde_symbolizer__new(NULL);
	for (size_t i = 0; i < count; i++)
		nf[i] = sonde_symbolizer__symbolize(s, &m, offs[i], frames[i], MAX_FRAMES);
	double t_sonde = now() - t0;
	t0 = now();
	for (size_t i = 0; i < count; i++)
		sonde_symbolizer__symbolize(s, &m, offs[i], frames[i], MAX_FRAMES);
	double t_warm = now() - t0;

	snprintf(out_eu, sizeof(out_eu), "%s/eu.txt", dir);
	snprintf(out_bu, sizeof(out_bu), "%s/binutils.txt", dir);
	const char *eu[] = {"eu-addr2line", "-a", "-f", "-i", "-e", elf, NULL};
	const char *bu[] = {"addr2line", "-a", "-f", "-i", "-e", elf, NULL};
	double t_eu = run_tool(eu, in, out_eu);
	double t_bu = run_tool(bu, in, out_bu);

	size_t n_sample = (count + SAMPLE_EVERY - 1) / SAMPLE_EVERY, compared = 0, agree = 0;
	size_t agree_bu = 0, compared_bu = 0, alias = 0, alias_bu = 0;
	struct syms t = {0};
	load_syms(elf, &t);
	struct answer *a_eu = calloc(count, sizeof(*a_eu)), *a_bu = calloc(count, sizeof(*a_bu));
	parse_peer(out_eu, a_eu, count);
	parse_peer(out_bu, a_bu, count);
	for (size_t k = 0; k < n_sample; k++) {
		size_t i = k * SAMPLE_EVERY;
		if (a_eu[i].n && strcmp(a_eu[i].name[0], "??")) {
			int r = same_answer(&a_eu[i], frames[i], nf[i], &t);
			compared++;
			agree += r == 2;
			alias += r == 1;
			if (!r && compared - agree - alias <= 5)
				print_mismatch(offs[i] - off + vaddr, &a_eu[i], frames[i], nf[i]);
		}
		if (a_bu[i].n && strcmp(a_bu[i].name[0], "??")) {
			int r = same_answer(&a_bu[i], frames[i], nf[i], &t);
			compared_bu++;
			agree_bu += r == 2;
			alias_bu += r == 1;
			if (!r && compared_bu - agree_bu - alias_bu <= 3) {
				fprintf(stderr, "(binutils) ");
				print_mismatch(offs[i] - off + vaddr, &a_bu[i], frames[i], nf[i]);
			}
		}
	}
	printf("binary %s, %zu addresses in its code\n", elf, count);
	printf("sonde (cold, incl. load)  %8.3f s  %7.2f us/addr\n", t_sonde,
	       t_sonde * 1e6 / count);
	printf("sonde (warm)              %8.3f s  %7.2f us/addr\n", t_warm, t_warm * 1e6 / count);
	printf("eu-addr2line -f -i        %8.3f s  %7.2f us/addr\n", t_eu, t_eu * 1e6 / count);
	printf("addr2line -f -i           %8.3f s  %7.2f us/addr\n", t_bu, t_bu * 1e6 / count);
	printf("ratio eu-addr2line/sonde  %8.1fx\n", t_eu / t_sonde);
	printf("ratio addr2line/sonde     %8.1fx\n", t_bu / t_sonde);
	printf("sample vs eu-addr2line: %zu/%zu identical (name, file, line of every frame), "
	       "%zu more identical but for the choice among aliases of one address\n",
	       agree, compared, alias);
	printf("sample vs addr2line:    %zu/%zu identical, %zu more but for aliases\n", agree_bu,
	       compared_bu, alias_bu);
	sonde_symbolizer__free(s);
	unlink(in);
	unlink(out_eu);
	unlink(out_bu);
	rmdir(dir);
	free(a_eu);
	free(a_bu);
	free(offs);
	free(frames);
	free(nf);
	for (size_t i = 0; i < t.n; i++)
		free(t.name[i]);
	free(t.name);
	free(t.addr);
	return compared && agree + alias == compared ? 0 : 1;
}
