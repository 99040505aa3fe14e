/* The symbolizer: turns recorded addresses into function names, source lines and inline
 * frames.
 *
 * Order of lookup (docs/recorder.md): JIT perf maps (/tmp/perf-PID.map) for JIT modules
 * and raw addresses, then the ELF (found through the image cache, its path, or the build-id
 * cache the recorder fills with deleted and replaced images; symtab, dynsym, separate debug files
 * by build-id or debuglink, debuginfod when configured, DWARF lines and inline frames), then kernel
 * symbols (kallsyms), then an address-only fallback "module+0xoffset".
 *
 * Strings in results are owned by the symbolizer and stay valid until it is freed.
 * A warm (cached) lookup allocates nothing. A symbolizer is used by one thread at a time.
 */
#ifndef SONDE_SYMBOLIZE_H
#define SONDE_SYMBOLIZE_H

#include <stddef.h>
#include <stdint.h>

#include <sonde/export.h>

struct sonde_symbolizer;

struct sonde_symbolizer_opts {
	size_t sz;		     /* sizeof(struct sonde_symbolizer_opts) */
	int no_demangle;	     /* keep mangled C++/Rust names */
	const char *debuginfod_urls; /* NULL: the DEBUGINFOD_URLS environment variable */
	const char *kallsyms_path;   /* NULL: /proc/kallsyms */
	const char *perf_map_dir;    /* NULL: /tmp (perf-PID.map files) */
	/* Global debug directories, colon-separated, searched by build id
	 * (DIR/.build-id/xx/rest.debug) and by .gnu_debuglink (DIR/MODULE_DIR/NAME).
	 * NULL: /usr/lib/debug. */
	const char *debug_dirs;
	/* Bound of the image cache (sonde_symbolizer__add_image): total bytes of the files
	 * kept open, 0: 1 GiB; and their number, 0: 128. Least recently used go first. */
	uint64_t image_cache_bytes;
	uint32_t image_cache_max;
	/* The build-id cache the recorder keeps deleted or replaced images in, searched by
	 * build id when a module's path no longer leads to its image. NULL: as the recorder
	 * chooses it ($SONDE_BUILDID_CACHE, else $XDG_CACHE_HOME/sonde/buildid, else
	 * ~/.cache/sonde/buildid); "": none. */
	const char *buildid_cache_dir;
};

/* A module as recorded (see struct sonde_spool_module_def). */
struct sonde_sym_module {
	uint32_t pid;
	uint32_t flags; /* SONDE_MODULE_* of include/sonde/spool.h */
	uint64_t start, end, pgoff;
	uint64_t dev, inode;
	const uint8_t *build_id;
	size_t build_id_len;
	const char *path;
};

enum sonde_sym_kind {
	SONDE_SYM_NATIVE,
	SONDE_SYM_KERNEL,
	SONDE_SYM_JIT,
	SONDE_SYM_INTERPRETER,
};

enum sonde_sym_origin {
	SONDE_SYM_ORIGIN_NONE, /* unresolved: name is "module+0xoffset" or "0xaddr" */
	SONDE_SYM_ORIGIN_SYMTAB,
	SONDE_SYM_ORIGIN_DYNSYM,
	SONDE_SYM_ORIGIN_DWARF,	     /* from debug info (local or separate file) */
	SONDE_SYM_ORIGIN_DEBUGINFOD, /* from debug info fetched through debuginfod */
	SONDE_SYM_ORIGIN_PERF_MAP,
	SONDE_SYM_ORIGIN_KALLSYMS,
	/* named by the recording itself (a module of that name, docs/spool.md): "[kernel]", a
	 * sample's time in the kernel recorded without kernel frames; "[exiting]", the user
	 * part of a wait of a thread exiting after it released its memory */
	SONDE_SYM_ORIGIN_RECORDING,
};

struct sonde_sym_frame {
	const char *name;      /* demangled unless no_demangle; never NULL */
	const char *module;    /* module path, or NULL */
	const char *file;      /* source file, or NULL */
	uint32_t line;	       /* 0 when unknown */
	uint32_t inline_depth; /* 0 for the real function, >0 for frames inlined into it */
	uint8_t kind;	       /* enum sonde_sym_kind */
	uint8_t origin;	       /* enum sonde_sym_origin */
};

/* NULL and errno on failure. opts may be NULL. */
SONDE_API struct sonde_symbolizer *sonde_symbolizer__new(const struct sonde_symbolizer_opts *opts);
SONDE_API void sonde_symbolizer__free(struct sonde_symbolizer *s);

/* Resolves file offset `offset` inside module m (for a kernel module: the absolute kernel
 * address). Fills out[0..n-1], innermost first: inlined frames come before the function
 * they were inlined into, which is last (inline_depth 0). Returns n >= 1 (an unresolved
 * address still yields one frame, origin NONE), or a negative error for invalid
 * arguments. At most max frames are filled; max must be >= 1. */
SONDE_API int sonde_symbolizer__symbolize(struct sonde_symbolizer *s, const struct sonde_sym_module *m,
			      uint64_t offset, struct sonde_sym_frame *out, size_t max);
/* Resolves an address no module covered (JIT perf map of pid, else "0xaddr"). */
SONDE_API int sonde_symbolizer__symbolize_raw(struct sonde_symbolizer *s, uint32_t pid, uint64_t addr,
				  struct sonde_sym_frame *out, size_t max);

/* Keeps the exact image of module m (dev and inode must be set) open in the image cache:
 * fd is a descriptor of the mapped file, typically from /proc/PID/map_files/START-END,
 * so that a library deleted or replaced after it was mapped still symbolizes. The
 * symbolizer keeps a duplicate; the caller keeps fd. Lookups of a module with the same
 * dev, inode (and build id, when recorded) prefer this image over the module's path.
 * Returns 0, -ESTALE when the file's build id differs from m's, -SONDE_E_LIMIT when the
 * file alone exceeds the cache's byte bound, or another -errno. */
SONDE_API int sonde_symbolizer__add_image(struct sonde_symbolizer *s,
					 const struct sonde_sym_module *m, int fd);
/* The same, opening /proc/m->pid/map_files/START-END itself (the process must be alive,
 * and reading map_files needs CAP_SYS_ADMIN). */
SONDE_API int sonde_symbolizer__add_image_from_pid(struct sonde_symbolizer *s,
						  const struct sonde_sym_module *m);
/* Files the symbolizer refused to read, by reason (docs/symbolize.md, "Files at paths
 * others control"): a perf map, image, debug file or build-id cache entry that was a
 * symbolic link where none may be, no regular file (a FIFO, device, socket, directory),
 * bigger than its cap, or (perf maps) owned by neither root nor the process's user. The
 * first refusal of each reason is also logged as a warning. */
struct sonde_symbolizer_stats {
	size_t sz; /* set by the caller: sizeof(struct sonde_symbolizer_stats) */
	uint64_t refused_symlink;
	uint64_t refused_not_regular;
	uint64_t refused_too_big;
	uint64_t refused_owner;
};

/* Fills out (out->sz set by the caller; a smaller struct gets what fits). 0 or -EINVAL. */
SONDE_API int sonde_symbolizer__get_stats(const struct sonde_symbolizer *s,
					 struct sonde_symbolizer_stats *out);

/* Forgets what is cached for process pid (its JIT perf map), because the process exited
 * or exec'd and a reused pid brings a new map. Strings handed out earlier stay valid.
 * Returns 1 when something was dropped, 0 when nothing was cached, -EINVAL. */
SONDE_API int sonde_symbolizer__forget_pid(struct sonde_symbolizer *s, uint32_t pid);

#endif
