# Installation (README, "Installing").
#
#   make install [PREFIX=/usr/local] [DESTDIR=]   the programs, both libraries, the headers,
#                                                 sonde.pc, man pages, bash completion and
#                                                 a systemd unit for sonded
#   make uninstall [PREFIX=...] [DESTDIR=]        removes exactly those files
#
# Installs the current variant's build: `make SAN=1 install` installs the sanitizer build,
# whose sonde.pc then links programs with the sanitizer runtimes its library needs.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system

# Man pages are generated from the programs' --help (scripts/gen-man), so they say what
# the installed programs say.
MAN1_PAGES := sonde sonde-record sonde-report sonde-convert sonde-top sonde-trace sonde-run
MAN_PAGES := $(patsubst %,$(B)/man/%.1,$(MAN1_PAGES)) $(B)/man/sonded.8
HEADERS := $(wildcard include/sonde/*.h)

all: $(MAN_PAGES)

$(B)/man/sonde.1: $(B)/sonde scripts/gen-man
	@mkdir -p $(@D)
	scripts/gen-man sonde 1 $(SONDE_VERSION) "" $< > $@.tmp && mv $@.tmp $@

$(B)/man/sonde-%.1: $(B)/sonde scripts/gen-man
	@mkdir -p $(@D)
	scripts/gen-man sonde-$* 1 $(SONDE_VERSION) "" $< $* > $@.tmp && mv $@.tmp $@

$(B)/man/sonded.8: $(B)/sonded scripts/gen-man
	@mkdir -p $(@D)
	scripts/gen-man sonded 8 $(SONDE_VERSION) "" $< > $@.tmp && mv $@.tmp $@

.PHONY: install uninstall

INSTALLED_LIBS := libsonde.a libsonde.so.$(SONDE_VERSION) $(SONAME) libsonde.so

install: $(PROGRAM_BINS) $(LIB) $(SOLIBS) $(MAN_PAGES)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR)/sonde $(DESTDIR)$(PKGCONFIGDIR) \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(SYSTEMDUNITDIR)
	install -m 755 $(B)/sonde $(B)/sonded $(DESTDIR)$(BINDIR)/
	install -m 644 $(LIB) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(B)/libsonde.so.$(SONDE_VERSION) $(DESTDIR)$(LIBDIR)/
	ln -sf libsonde.so.$(SONDE_VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libsonde.so
	install -m 644 $(HEADERS) $(DESTDIR)$(INCLUDEDIR)/sonde/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' \
		-e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' -e 's|@VERSION@|$(SONDE_VERSION)|' \
		-e 's|@LIBS@|$(MODE_LDFLAGS)|' -e 's|@LIBS_PRIVATE@|$(LDLIBS)|' -e 's| *$$||' \
		dist/sonde.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/sonde.pc
	install -m 644 $(patsubst %,$(B)/man/%.1,$(MAN1_PAGES)) $(DESTDIR)$(MANDIR)/man1/
	install -m 644 $(B)/man/sonded.8 $(DESTDIR)$(MANDIR)/man8/
	install -m 644 dist/sonde.bash-completion $(DESTDIR)$(BASHCOMPDIR)/sonde
	ln -sf sonde $(DESTDIR)$(BASHCOMPDIR)/sonded
	sed -e 's|@BINDIR@|$(BINDIR)|' dist/sonded.service.in > $(DESTDIR)$(SYSTEMDUNITDIR)/sonded.service

# Directories are left in place (they may hold other packages' files), except sonde's own
# header directory once empty.
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/sonde $(DESTDIR)$(BINDIR)/sonded
	rm -f $(addprefix $(DESTDIR)$(LIBDIR)/,$(INSTALLED_LIBS))
	rm -f $(addprefix $(DESTDIR)$(INCLUDEDIR)/sonde/,$(notdir $(HEADERS)))
	rmdir $(DESTDIR)$(INCLUDEDIR)/sonde 2>/dev/null || true
	rm -f $(DESTDIR)$(PKGCONFIGDIR)/sonde.pc
	rm -f $(patsubst %,$(DESTDIR)$(MANDIR)/man1/%.1,$(MAN1_PAGES)) $(DESTDIR)$(MANDIR)/man8/sonded.8
	rm -f $(DESTDIR)$(BASHCOMPDIR)/sonde $(DESTDIR)$(BASHCOMPDIR)/sonded
	rm -f $(DESTDIR)$(SYSTEMDUNITDIR)/sonded.service
