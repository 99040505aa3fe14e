# Layering (docs/architecture.md's table, docs/probes.md, docs/record.md): each directory of
# src/ may include only the internal headers ("dir/x.h") and public headers (<sonde/x.h>)
# of the layers below it listed here; anything else fails `make check-layers`, which
# `make test` runs first. base (errors, logging, the allocator) is below everything.
#
#   perf     the kernel interface: perf_event setup, rings, decoding, the stream,
#            tracefs and event format files; below both record and probes
#   unwind   takes perf's sampled registers (perf/regs.h); SONDE_UNWIND_* of record.h
#   service  the daemon's core: no data source, no recorder, unwinder, symbolizer,
#            spool or exporter
#   probes   data sources, on the client library, never the service's internals
#   view     the read-side model (docs/view.md): below the exporters, whose folded
#            writer is its own
LAYER_ALLOW_base     :=
LAYER_ALLOW_perf     := base
LAYER_ALLOW_proc     := base
LAYER_ALLOW_ipc      := base
LAYER_ALLOW_spool    := base spool spool_reader
LAYER_ALLOW_unwind   := base perf record
LAYER_ALLOW_symbol   := base proc spool symbolize
LAYER_ALLOW_tail     := base spool spool_reader symbolize
LAYER_ALLOW_record   := base perf proc unwind symbol symbolize spool tail record
LAYER_ALLOW_view     := base view
LAYER_ALLOW_export   := base tail spool spool_reader symbolize profile export view view_source
LAYER_ALLOW_service  := base ipc proc service connector
LAYER_ALLOW_client   := base ipc client connector
LAYER_ALLOW_relay    := base ipc service relay
LAYER_ALLOW_probes   := base perf proc ipc export record symbol symbolize client profile spool

# Public headers that are part of base: every layer may include them.
LAYER_PUBLIC_BASE := error log alloc

.PHONY: check-layers
check-layers:
	@bad=0; \
	for dir in $(patsubst src/%/,%,$(wildcard src/*/)); do \
		case " $(filter-out LAYER_ALLOW_%,$(patsubst LAYER_ALLOW_%,%,$(filter LAYER_ALLOW_%,$(.VARIABLES)))) " in \
		*" $$dir "*) ;; \
		*) echo "layering: src/$$dir/ has no row in mk/layers.mk" >&2; bad=1; continue;; \
		esac; \
		allow=$$(make -s --no-print-directory -f mk/layers.mk layer-allow-$$dir); \
		for inc in $$(grep -hoE '^#include *("[a-z_]+/|<sonde/[a-z_]+\.h>)' src/$$dir/*.[ch] | \
			sed -E 's/^#include *//; s#^"([a-z_]+)/#\1#; s#^<sonde/([a-z_]+)\.h>#\1#' | sort -u); do \
			case " $$dir $$allow $(LAYER_PUBLIC_BASE) " in \
			*" $$inc "*) ;; \
			*) grep -nE "^#include *(\"$$inc/|<sonde/$$inc\.h>)" src/$$dir/*.[ch] >&2; \
			   echo "layering: src/$$dir/ may not include $$inc (mk/layers.mk)" >&2; bad=1;; \
			esac; \
		done; \
	done; exit $$bad

layer-allow-%:
	@echo $(LAYER_ALLOW_$*)

test: check-layers
