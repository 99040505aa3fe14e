# Client benchmarks (link libsonde; not part of `make test`):
#   bench/trace_bench.c -> build/VARIANT/bench/trace_bench
#   bench/fullrate.c    -> build/VARIANT/bench/fullrate
CLIENT_BENCHES := $(B)/bench/trace_bench $(B)/bench/fullrate
all: $(CLIENT_BENCHES)
$(CLIENT_BENCHES): $(B)/bench/%: $(B)/obj/bench/%.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)
