# Symbolizer test targets (tests/integration/test_sym*.c).
#   progs/sym_split_nopie   split.c as a fixed-address executable, where file offsets and
#                           virtual addresses differ
#   progs/libsym_shlib.so   a shared object with exported, local and ifunc symbols
SYM_PROG_BINS := $(B)/progs/sym_split_nopie $(B)/progs/libsym_shlib.so

all: $(SYM_PROG_BINS)

$(B)/progs/sym_split_nopie: tests/progs/split.c
	@mkdir -p $(@D)
	$(CC) $(PROG_CFLAGS) -fno-pie -no-pie $< -o $@ $(PROG_LDLIBS)

$(B)/progs/libsym_shlib.so: tests/progs/sym_shlib/shlib.c
	@mkdir -p $(@D)
	$(CC) $(PROG_CFLAGS) -fPIC -shared -Wl,--build-id $< -o $@
