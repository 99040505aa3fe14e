# Layering (docs/probes.md): the service core holds no data source, so src/service/
# includes nothing of the recorder, the unwinder, the symbolizer, the exporters or the
# probes; and the probes reach the service only through the client library, never its
# internals. `make test` runs this check first.
LAYER_SERVICE_BANNED := \#include *[<"](record|unwind|symbol|export|spool|tail|perf|probes)/|\#include *<sonde/(record|symbolize|profile|spool|spool_reader|tail)\.h>
LAYER_PROBES_BANNED := \#include *[<"]service/|\#include *<sonde/service\.h>

.PHONY: check-layers
check-layers:
	@if grep -nE '$(LAYER_SERVICE_BANNED)' src/service/*.[ch]; then \
		echo "layering: src/service/ must not include the lines above" >&2; exit 1; fi
	@if grep -nE '$(LAYER_PROBES_BANNED)' src/probes/*.[ch]; then \
		echo "layering: src/probes/ must not include the lines above" >&2; exit 1; fi

test: check-layers
