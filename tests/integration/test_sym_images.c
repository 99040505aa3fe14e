/* The image cache: a library deleted after a process mapped it still symbolizes through
 * the descriptor taken from /proc/PID/map_files; the cache evicts the least recently
 * used image past its bounds. */
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "../test.h"
#include "../util.h"
#include "sym_util.h"

static char maps_path[8][512];

/* The executable mapping of path in pid's maps, as the recorder would describe it. */
static struct sonde_sym_module find_mapping(pid_t pid, const char *path, int slot)
{
	char maps[64], line[1024];
	FILE *f;

	snprintf(maps, sizeof(maps), "/proc/%d/maps", (int)pid);
	f = fopen(maps, "r");
	ASSERT_NOT_NULL(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long long start, end, pgoff, ino;
		unsigned maj, min;
		char perms[8];
		int name_at = 0;
		if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &start, &end, perms, &pgoff,
			   &maj, &min, &ino, &name_at) < 7 ||
		    perms[2] != 'x' || !name_at || strncmp(line + name_at, path, strlen(path)))
			continue;
		fclose(f);
		line[strcspn(line, "\n")] = 0;
		snprintf(maps_path[slot], sizeof(maps_path[slot]), "%s", line + name_at);
		return (struct sonde_sym_module){
			.pid = (uint32_t)pid,
			.flags = SONDE_MODULE_EXEC,
			.start = start,
			.end = end,
			.pgoff = pgoff,
			.dev = makedev(maj, min),
			.inode = ino,
			.path = maps_path[slot],
		};
	}
	fclose(f);
	FAIL("%s is not mapped in %d", path, (int)pid);
}

static pid_t start_mapper(const char *lib1, const char *lib2)
{
	const char *ready = test_path("ready");
	const char *argv[] = {test_prog("sym_maplib"), lib1, lib2 ? lib2 : ready,
			      lib2 ? ready : NULL, NULL};
	pid_t pid = test_spawn(argv);
	struct stat st;

	for (int i = 0; i < 200 && stat(ready, &st) < 0; i++)
		usleep(50000);
	ASSERT_INT(stat(ready, &st), ==, 0);
	return pid;
}

static int resolves(struct sonde_symbolizer *s, const struct sonde_sym_module *m, uint64_t off,
		    const char *name)
{
	struct sonde_sym_frame f[8];
	int n = ASSERT_OK(sonde_symbolizer__symbolize(s, m, off, f, 8));

	return f[n - 1].origin != SONDE_SYM_ORIGIN_NONE && !strcmp(f[n - 1].name, name);
}

TEST(sym_deleted_library_through_map_files)
{
	const char *orig = test_prog("libsym_shlib.so");
	const char *lib = test_path("libdeleted.so");
	uint64_t off = sym_test_vaddr_to_off(orig, sym_test_nm(orig, "shlib_spin", 0) + 2);

	sym_test_copy(orig, lib);
	pid_t pid = start_mapper(lib, NULL);
	struct sonde_sym_module m = find_mapping(pid, lib, 0);
	ASSERT_INT(unlink(lib), ==, 0);
	struct stat st;
	ASSERT(stat(lib, &st) < 0);

	/* without the cache the deleted file is gone */
	struct sonde_symbolizer *plain = ASSERT_NOT_NULL(sonde_symbolizer__new(NULL));
	ASSERT(!resolves(plain, &m, off, "shlib_spin"));
	sonde_symbolizer__free(plain);

	/* the recorder saw the mapping before the deletion; the samples name it after */
	struct sonde_sym_module after = find_mapping(pid, lib, 3);
	ASSERT_CONTAINS(after.path, "(deleted)");
	struct sonde_symbolizer *s = ASSERT_NOT_NULL(sonde_symbolizer__new(NULL));
	ASSERT_OK(sonde_symbolizer__add_image_from_pid(s, &m));
	kill(pid, SIGKILL);
	test_wait(pid, 10);
	/* the process is gone too: the cached descriptor is all that is left */
	ASSERT(resolves(s, &m, off, "shlib_spin"));
	struct sonde_sym_frame f[8];
	int n = ASSERT_OK(sonde_symbolizer__symbolize(s, &after, off, f, 8));
	ASSERT_STR_EQ(f[n - 1].name, "shlib_spin");
	ASSERT_INT(f[n - 1].origin, ==, SONDE_SYM_ORIGIN_DWARF);
	ASSERT_CONTAINS(f[n - 1].module, "(deleted)");
	sonde_symbolizer__free(s);
}

TEST(sym_image_cache_checks_and_evicts)
{
	const char *orig = test_prog("libsym_shlib.so");
	const char *a = test_path("liba.so"), *b = test_path("libb.so");
	uint64_t off = sym_test_vaddr_to_off(orig, sym_test_nm(orig, "shlib_exported", 0) + 1);

	sym_test_copy(orig, a);
	sym_test_copy(orig, b);
	pid_t pid = start_mapper(a, b);
	struct sonde_sym_module ma = find_mapping(pid, a, 1), mb = find_mapping(pid, b, 2);
	ASSERT_UINT(ma.inode, !=, mb.inode);
	unlink(a);
	unlink(b);

	/* a build id that is not the file's is refused */
	static const uint8_t wrong[20] = {0xde, 0xad};
	struct sonde_sym_module bad = ma;
	bad.build_id = wrong;
	bad.build_id_len = sizeof(wrong);
	struct sonde_symbolizer *s = ASSERT_NOT_NULL(sonde_symbolizer__new(NULL));
	ASSERT_ERR(sonde_symbolizer__add_image_from_pid(s, &bad), -ESTALE);
	struct sonde_sym_module noino = ma;
	noino.inode = 0;
	ASSERT_ERR(sonde_symbolizer__add_image_from_pid(s, &noino), -EINVAL);
	sonde_symbolizer__free(s);

	/* room for one image: adding b evicts a */
	struct sonde_symbolizer_opts o = {.sz = sizeof(o), .image_cache_max = 1};
	s = ASSERT_NOT_NULL(sonde_symbolizer__new(&o));
	ASSERT_OK(sonde_symbolizer__add_image_from_pid(s, &ma));
	ASSERT_OK(sonde_symbolizer__add_image_from_pid(s, &mb));
	kill(pid, SIGKILL);
	test_wait(pid, 10);
	ASSERT(!resolves(s, &ma, off, "shlib_exported"));
	ASSERT(resolves(s, &mb, off, "shlib_exported"));
	sonde_symbolizer__free(s);

	/* a byte bound smaller than the file refuses it */
	struct sonde_symbolizer_opts tiny = {.sz = sizeof(tiny), .image_cache_bytes = 100};
	s = ASSERT_NOT_NULL(sonde_symbolizer__new(&tiny));
	int fd = open(orig, O_RDONLY);
	struct sonde_sym_module mo = sym_test_module(orig);
	mo.inode = 1;
	ASSERT_ERR(sonde_symbolizer__add_image(s, &mo, fd), -SONDE_E_LIMIT);
	close(fd);
	sonde_symbolizer__free(s);
}
