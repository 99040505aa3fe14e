# unwind: extra target programs for the CFI unwinder's tests and benchmark.
#
# split-nofp: the reference target built the way release software is (-O2, no frame
# pointers), so that only DWARF CFI can unwind it.
all: $(B)/progs/split-nofp

$(B)/progs/split-nofp: tests/progs/split.c
	@mkdir -p $(@D)
	$(CC) -std=gnu11 -O2 -g -fomit-frame-pointer -Wall -Wextra -Werror -D_GNU_SOURCE $< \
		-o $@ $(PROG_LDLIBS)

# unwind_dbgframe: CFI only in .debug_frame (no asynchronous unwind tables), moved to a
# separate debug file the way distributions ship it; the binary itself is stripped.
all: $(B)/progs/unwind_dbgframe.debug

$(B)/progs/unwind_dbgframe.full: tests/progs/split.c
	@mkdir -p $(@D)
	$(CC) -std=gnu11 -O2 -g -fomit-frame-pointer -fno-asynchronous-unwind-tables \
		-fno-exceptions -Wall -Wextra -Werror -D_GNU_SOURCE $< -o $@ $(PROG_LDLIBS)

$(B)/progs/unwind_dbgframe.debug: $(B)/progs/unwind_dbgframe.full
	objcopy --only-keep-debug $< $@
	objcopy --strip-debug --strip-unneeded $< $(B)/progs/unwind_dbgframe

# bench-unwind: replays recorded samples through the DWARF unwinder (bench/unwind.sh runs
# it next to perf). Built with the library of the current variant.
all: $(B)/bench-unwind

$(B)/bench-unwind: $(B)/obj/bench/unwind.o $(LIB)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)
