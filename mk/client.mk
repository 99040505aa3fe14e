# Client benchmarks (link libsonde; not part of `make test`):
#   bench/trace_bench.c -> build/VARIANT/bench/trace_bench
#   bench/fullrate.c    -> build/VARIANT/bench/fullrate
#   bench/relay_bench.c -> build/VARIANT/bench/relay_bench
CLIENT_BENCHES := $(B)/bench/trace_bench $(B)/bench/fullrate $(B)/bench/relay_bench
all: $(CLIENT_BENCHES)
$(CLIENT_BENCHES): $(B)/bench/%: $(B)/obj/bench/%.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)
