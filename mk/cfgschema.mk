# The text-format config parser's schema (src/client/cfg_schema.c) is generated from
# protos/config/*.proto: protoc writes them as a FileDescriptorSet, and
# tools/cfg_schema_gen.c (a build-machine tool reading it with src/base/pb.c) turns that
# into C tables, $(B)/gen/cfg_schema.inc. A new field is one line in a .proto.
CFG_PROTOS := $(wildcard protos/config/*.proto)
CFG_GEN := $(B)/gen
HOST_CC ?= cc
CFG_GEN_SRC := tools/cfg_schema_gen.c src/base/pb.c src/base/buf.c src/base/alloc.c
CFLAGS += -I$(CFG_GEN)

# built with the host compiler and no sanitizer or fuzzer flags, whatever the variant
$(CFG_GEN)/cfg_schema_gen: $(CFG_GEN_SRC) src/base/pb.h src/base/buf.h src/base/alloc.h
	@mkdir -p $(@D)
	$(HOST_CC) -std=gnu11 -O1 $(WARN) -D_GNU_SOURCE -Iinclude -Isrc $(CFG_GEN_SRC) -o $@

$(CFG_GEN)/config.desc: $(CFG_PROTOS)
	@mkdir -p $(@D)
	@command -v protoc >/dev/null || { echo "protoc not found: apt-get install protobuf-compiler (scripts/packages)" >&2; exit 1; }
	protoc --proto_path=protos --include_imports --descriptor_set_out=$@ config/trace_config.proto

$(CFG_GEN)/cfg_schema.inc: $(CFG_GEN)/config.desc $(CFG_GEN)/cfg_schema_gen
	$(CFG_GEN)/cfg_schema_gen $< perfetto.protos.TraceConfig $@

$(B)/obj/src/client/cfg_schema.o: $(CFG_GEN)/cfg_schema.inc
