# perf: bench-stream times the perf stream alone, draining samples from a ring in memory and
# popping them (bench/stream.c). Built with the library of the current variant.
all: $(B)/bench-stream

$(B)/bench-stream: $(B)/obj/bench/stream.o $(LIB)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)
