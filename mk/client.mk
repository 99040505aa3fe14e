# Client benchmarks: bench/trace_bench.c -> build/VARIANT/bench/trace_bench (links libsonde).
TRACE_BENCH := $(B)/bench/trace_bench
all: $(TRACE_BENCH)
$(TRACE_BENCH): $(B)/obj/bench/trace_bench.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)
