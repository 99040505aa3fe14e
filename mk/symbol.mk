# Symbolizer test targets (tests/integration/test_sym*.c).
#   progs/sym_split_nopie   split.c as a fixed-address executable, where file offsets and
#                           virtual addresses differ
#   progs/libsym_shlib.so   a shared object with exported, local and ifunc symbols
#   progs/sym_cxx           a C++ program (demangling)
#   progs/sym_split_ibt     split.c linked with IBT PLT stubs (.plt.sec), named NAME@plt
SYM_PROG_BINS := $(B)/progs/sym_split_nopie $(B)/progs/libsym_shlib.so $(B)/progs/sym_cxx \
		 $(B)/progs/sym_split_ibt

all: $(SYM_PROG_BINS)

$(B)/progs/sym_split_nopie: tests/progs/split.c
	@mkdir -p $(@D)
	$(CC) $(PROG_CFLAGS) -fno-pie -no-pie $< -o $@ $(PROG_LDLIBS)

$(B)/progs/sym_split_ibt: tests/progs/split.c
	@mkdir -p $(@D)
	$(CC) $(PROG_CFLAGS) -fcf-protection=full -Wl,-z,ibtplt $< -o $@ $(PROG_LDLIBS)

$(B)/progs/libsym_shlib.so: tests/progs/sym_shlib/shlib.c
	@mkdir -p $(@D)
	$(CC) $(PROG_CFLAGS) -fPIC -shared -Wl,--build-id $< -o $@
LDLIBS += -liberty

$(B)/progs/sym_cxx: tests/progs/sym_cxx/cxx.cc
	@mkdir -p $(@D)
	$(CXX) -std=gnu++17 -O1 -g -fno-omit-frame-pointer -Wall -Wextra -Werror $< -o $@

# always_inline frames with real optimisation
PROG_EXTRA_CFLAGS_sym_inline := -O2

# bench-symbolize: sonde's symbolizer against eu-addr2line and addr2line (bench/symbolize.c)
all: $(B)/bench-symbolize

$(B)/bench-symbolize: $(B)/obj/bench/symbolize.o $(LIB)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

# PLT stubs sampled in a recording (test_record_symbols.c): plain lazy binding, -z now,
# and IBT stubs (.plt.sec); llabs is called through .plt.got in each. The builtins are
# off, or gcc would compute labs and llabs inline.
PROG_EXTRA_CFLAGS_plt_calls := -fno-builtin
all: $(B)/progs/plt_calls_now $(B)/progs/plt_calls_ibt

$(B)/progs/plt_calls_now: tests/progs/plt_calls.c
	@mkdir -p $(@D)
	$(CC) $(PROG_CFLAGS) -fno-builtin -Wl,-z,now $< -o $@ $(PROG_LDLIBS)

$(B)/progs/plt_calls_ibt: tests/progs/plt_calls.c
	@mkdir -p $(@D)
	$(CC) $(PROG_CFLAGS) -fno-builtin -fcf-protection=full -Wl,-z,ibtplt $< -o $@ $(PROG_LDLIBS)
