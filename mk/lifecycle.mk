# Recorder lifecycle tests (tests/integration/test_life*.c): the two look-alike libraries
# that tests/progs/life_dlswap loads and unloads in turn (same source, different names, so
# the loader maps them at the same address).
LIFE_LIBS := $(B)/progs/liblife_a.so $(B)/progs/liblife_b.so

all: $(LIFE_LIBS)

$(B)/progs/liblife_%.so: tests/progs/life_lib/lib.c
	@mkdir -p $(@D)
	$(CC) $(PROG_CFLAGS) -DLIFE_NAME=$* -fPIC -shared -Wl,--build-id $< -o $@
