# bpf: the BPF off-CPU backend (docs/record.md, "Off-CPU backends").
#
# bpf/offcpu.bpf.c is compiled once per variant with clang -target bpf against a vmlinux.h
# that bpftool generates from the build machine's kernel BTF (the object is CO-RE: libbpf
# relocates it to the running kernel), and bpftool makes the skeleton offcpu_bpf.c embeds.
# Without bpftool, clang, libbpf or BTF the build goes on without the backend and says so:
# the off-CPU recordings then use perf_event alone.
BPFTOOL ?= $(or $(shell command -v bpftool 2>/dev/null),$(wildcard /usr/sbin/bpftool))
BPF_CLANG ?= clang
VMLINUX_BTF ?= /sys/kernel/btf/vmlinux
BPF_OUT := $(B)/bpf

BPF_MISSING := $(strip \
	$(if $(BPFTOOL),,bpftool) \
	$(if $(shell command -v $(BPF_CLANG) 2>/dev/null),,$(BPF_CLANG)) \
	$(if $(wildcard $(VMLINUX_BTF)),,kernel BTF ($(VMLINUX_BTF))) \
	$(if $(shell pkg-config --exists libbpf 2>/dev/null && echo y),,libbpf (libbpf-dev)))

ifeq ($(BPF_MISSING),)
$(BPF_OUT)/vmlinux.h:
	@mkdir -p $(@D)
	$(BPFTOOL) btf dump file $(VMLINUX_BTF) format c > $@.tmp && mv $@.tmp $@

$(BPF_OUT)/offcpu.bpf.o: bpf/offcpu.bpf.c bpf/offcpu.h $(BPF_OUT)/vmlinux.h
	$(BPF_CLANG) -target bpf -g -O2 -Wall -Werror -D__TARGET_ARCH_x86 -I$(BPF_OUT) -Ibpf \
		-c $< -o $@

$(BPF_OUT)/offcpu.skel.h: $(BPF_OUT)/offcpu.bpf.o
	$(BPFTOOL) gen skeleton $< name offcpu_bpf > $@.tmp && mv $@.tmp $@

$(B)/obj/src/record/offcpu_bpf.o: $(BPF_OUT)/offcpu.skel.h
$(B)/obj/src/record/offcpu_bpf.o: CFLAGS += -DSONDE_HAVE_BPF -I$(BPF_OUT) -Ibpf
LDLIBS += -lbpf
else
$(info sonde: building without the BPF off-CPU backend: missing $(BPF_MISSING))
endif

# sleep_loop-nofp: the off-CPU BPF tests' blocked stacks on a binary built the way release
# software is (-O2, no frame pointers), which only DWARF CFI unwinds to main.
all: $(B)/progs/sleep_loop-nofp

$(B)/progs/sleep_loop-nofp: tests/progs/sleep_loop.c
	@mkdir -p $(@D)
	$(CC) -std=gnu11 -O2 -g -fomit-frame-pointer -Wall -Wextra -Werror -D_GNU_SOURCE $< \
		-o $@ $(PROG_LDLIBS)
