# bench-ftrace: linux.ftrace draining a context-switch-heavy workload, side by side with
# trace-cmd record (or perf record) on the same run (bench/ftrace.c).
all: $(B)/bench-ftrace

$(B)/bench-ftrace: $(B)/obj/bench/ftrace.o $(LIB)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)
