# spool: bench-spool-write replays a recording's samples through the spool writer and times
# the writer alone (bench/spool_write.c). Built with the library of the current variant.
all: $(B)/bench-spool-write

$(B)/bench-spool-write: $(B)/obj/bench/spool_write.o $(LIB)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)
