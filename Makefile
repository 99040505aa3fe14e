# sonde build.
#
#   make               release build (-O2 -g) into build/release
#   make SAN=1         ASan + UBSan build into build/san
#   make FUZZ=1        libFuzzer build (clang) into build/fuzz; targets are build/fuzz/fuzz-NAME
#   make test          build, then run the whole test suite (also with SAN=1; TEST_JOBS=N
#                      tests at once, default the CPU count)
#   make format        clang-format every source file in place
#   make install       install into $(DESTDIR)$(PREFIX) (default /usr/local); make uninstall
#
# Sources are found by globbing: a new .c file under src/ joins libsonde, one under
# programs/NAME/ joins that program, one under tests/{unit,integration}/ joins the test
# runner, one under tests/progs/ becomes a target program, one under fuzz/ a fuzz target.
# Modules that need extra rules add a fragment mk/NAME.mk (included at the end).

ifeq ($(FUZZ),1)
  VARIANT := fuzz
  CC := clang
  MODE_CFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined \
		 -fno-sanitize-recover=undefined
  MODE_LDFLAGS := -fsanitize=address,undefined
else ifeq ($(SAN),1)
  VARIANT := san
  MODE_CFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
		 -fno-sanitize-recover=undefined
  MODE_LDFLAGS := -fsanitize=address,undefined
else
  VARIANT := release
  MODE_CFLAGS := -O2 -g
  MODE_LDFLAGS :=
endif

B := build/$(VARIANT)
CC ?= cc

# libsonde's version, MAJOR.MINOR.PATCH (README, "ABI"): MAJOR changes when the ABI breaks
# and names the SONAME (libsonde.so.MAJOR); MINOR when functions or opts fields are added;
# PATCH for fixes alone.
SONDE_MAJOR := 0
SONDE_MINOR := 1
SONDE_PATCH := 0
SONDE_VERSION := $(SONDE_MAJOR).$(SONDE_MINOR).$(SONDE_PATCH)

WARN := -Wall -Wextra -Werror -Wshadow -Wpointer-arith -Wstrict-prototypes -Wmissing-prototypes \
	-Wno-unused-parameter -Wno-missing-field-initializers
CFLAGS += -std=gnu11 $(WARN) $(MODE_CFLAGS) -fvisibility=hidden -fPIC \
	  -D_GNU_SOURCE -Iinclude -Isrc -MMD -MP -DSONDE_VERSION='"$(SONDE_VERSION)"'
LDFLAGS += $(MODE_LDFLAGS)
LDLIBS += -ldw -lelf -lzstd -lz -lpthread -lm -ldl

# Target programs that tests and benchmarks profile: always built the same way, never
# sanitized, so that what is measured does not depend on the build variant.
PROG_CFLAGS := -std=gnu11 -O1 -g -fno-omit-frame-pointer -fno-inline -fno-optimize-sibling-calls \
	       -Wall -Wextra -Werror -Wno-unused-parameter -D_GNU_SOURCE
PROG_LDLIBS := -lpthread -ldl -lm

src_of = $(sort $(shell find $(1) -name '*.c' 2>/dev/null))
obj_of = $(patsubst %.c,$(B)/obj/%.o,$(1))

LIB_SRC := $(call src_of,src)
LIB := $(B)/libsonde.a
# The shared library: the real file carries the full version, libsonde.so.MAJOR (the
# SONAME) and libsonde.so (for -lsonde) are symlinks to it. Every object is compiled with
# -fPIC once and goes into both libraries: a second, non-PIC object set would double the
# build for a difference hidden visibility already makes negligible.
SONAME := libsonde.so.$(SONDE_MAJOR)
SOLIB := $(B)/libsonde.so
SOLIBS := $(B)/libsonde.so.$(SONDE_VERSION) $(B)/$(SONAME) $(SOLIB)
LIB_MAP := src/libsonde.map
PROGRAMS := $(notdir $(wildcard programs/*))
PROGRAM_BINS := $(addprefix $(B)/,$(PROGRAMS))
TEST_SRC := $(wildcard tests/*.c) $(call src_of,tests/unit) $(call src_of,tests/integration)
TEST_BIN := $(B)/sonde-test
PROG_BINS := $(patsubst tests/progs/%.c,$(B)/progs/%,$(wildcard tests/progs/*.c))
EXAMPLE_BINS := $(patsubst examples/%.c,$(B)/examples/%,$(wildcard examples/*.c))
FUZZ_SRC := $(filter-out fuzz/driver.c,$(wildcard fuzz/*.c))
ifeq ($(FUZZ),1)
  FUZZ_BINS := $(patsubst fuzz/%.c,$(B)/fuzz-%,$(FUZZ_SRC))
else
  # Outside FUZZ=1 every fuzz target is linked with a small driver that replays files,
  # so the test suite can run each target's corpus under the sanitizers.
  FUZZ_BINS := $(patsubst fuzz/%.c,$(B)/replay-%,$(FUZZ_SRC))
endif

.PHONY: all fuzz test format clean programs progs FORCE
ifeq ($(FUZZ),1)
# The fuzz variant exists to run the fuzz targets: `make FUZZ=1` builds only them. Tests,
# target programs and benchmarks are built by the release and SAN variants (some use
# gcc-only attributes to shape the code they unwind).
.DEFAULT_GOAL := fuzz
endif
all: $(SOLIBS) $(PROGRAM_BINS) $(TEST_BIN) $(PROG_BINS) $(EXAMPLE_BINS) $(FUZZ_BINS)

# The examples' and fuzz targets' objects are reached only through pattern rules, which
# makes them intermediate: make deleted them after linking, and the next make (`make test`
# after `make`), which names them in their .d files, compiled and linked all of them again.
.SECONDARY: $(call obj_of,$(wildcard examples/*.c) $(wildcard fuzz/*.c))
fuzz: $(FUZZ_BINS)

# Objects are rebuilt when the compiler or its flags change: $(B)/cflags holds them and is
# rewritten only when they differ.
$(B)/cflags: FORCE
	@mkdir -p $(@D)
	@echo '$(CC) $(CFLAGS)' | cmp -s - $@ || echo '$(CC) $(CFLAGS)' > $@

$(B)/obj/%.o: %.c $(B)/cflags
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(LIB): $(call obj_of,$(LIB_SRC))
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# Exports exactly what the version script lists (tests/integration/test_abi.c checks it
# against include/sonde/); -z defs: every dependency is named, none left to the program.
$(B)/libsonde.so.$(SONDE_VERSION): $(call obj_of,$(LIB_SRC)) $(LIB_MAP)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=$(LIB_MAP) \
		-Wl,-z,defs $(filter %.o,$^) -o $@ $(LDLIBS)

$(B)/$(SONAME): $(B)/libsonde.so.$(SONDE_VERSION)
	ln -sf $(<F) $@

$(SOLIB): $(B)/$(SONAME)
	ln -sf $(<F) $@

# The programs, the test runner and the examples link libsonde.a: the programs install
# self-contained and use internal helpers, the runner tests internals, and the examples are
# run from copies where no libsonde.so is found (tests run them as another user).
# test_install links record_stacks with the installed libsonde.so instead.
.SECONDEXPANSION:
$(PROGRAM_BINS): $(B)/%: $$(call obj_of,$$(call src_of,programs/%)) $(LIB)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(TEST_BIN): $(call obj_of,$(TEST_SRC)) $(LIB)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(B)/progs/%: tests/progs/%.c
	@mkdir -p $(@D)
	$(CC) $(PROG_CFLAGS) $(PROG_EXTRA_CFLAGS_$*) $< -o $@ $(PROG_LDLIBS)

$(B)/examples/%: $(B)/obj/examples/%.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(B)/fuzz-%: $(B)/obj/fuzz/%.o $(LIB)
	$(CC) $(LDFLAGS) -fsanitize=fuzzer $^ -o $@ $(LDLIBS)

$(B)/replay-%: $(B)/obj/fuzz/%.o $(B)/obj/fuzz/driver.o $(LIB)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

test: all
	SONDE_BUILD=$(B) $(TEST_BIN) $(if $(TEST_JOBS),-j$(TEST_JOBS)) $(TESTS)

format:
	clang-format -i $$(find include src programs tests fuzz bench examples -name '*.[ch]')

clean:
	rm -rf build

-include $(wildcard mk/*.mk)
-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)
