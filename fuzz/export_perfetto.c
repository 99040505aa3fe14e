/* Fuzz target: any bytes as a spool stream, through the Perfetto packet encoder (without
 * symbolization, which would open whatever paths the input names), fed in two pieces cut
 * at an input-chosen point as a live stream arrives; with a state clear and a loss record
 * in between. The encoder must reject what the decoder rejects and never index out of its
 * tables; every packet it emits must be a well-formed protobuf message. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <sonde/log.h>

#include "base/pb.h"
#include "export/perfetto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int check_packet(void *ctx, const uint8_t *pkt, size_t len)
{
	struct pb_reader r = pb_reader_init(pkt, len);
	struct pb_field f;
	int rc;

	while ((rc = sonde__pb_next(&r, &f)) > 0)
		;
	if (rc < 0)
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pf_enc_opts o = {.sink = check_packet};

	sonde_log__set_level(SONDE_LOG_OFF);
	if (size < 1)
		return 0;
	size_t cut = size > 1 ? data[0] % size : 0;
	struct pf_enc *e = sonde__pf_enc_new(&o);
	if (!e)
		return 0;
	if (sonde__pf_enc_feed(e, data + 1, cut > 0 ? cut - 1 : 0) == 0) {
		sonde__pf_enc_clear_incremental(e);
		sonde__pf_enc_lost(e, 1, 3);
		sonde__pf_enc_feed(e, data + (cut > 0 ? cut : 1), size - (cut > 0 ? cut : 1));
		sonde__pf_enc_stop_event(e, 2, PF_STOP_REASON_GUARDRAIL);
	}
	sonde__pf_enc_free(e);
	return 0;
}
