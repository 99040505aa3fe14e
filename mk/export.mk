# export: bench-convert-synth writes large spools from the real stacks of a recording, for
# bench/convert.sh. Built with the library of the current variant.
all: $(B)/bench-convert-synth

$(B)/bench-convert-synth: $(B)/obj/bench/convert_synth.o $(LIB)
	$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)
