/* Fuzz target: a hostile shared memory buffer. The input is the SMB's contents (4 KiB
 * pages); the service side takes every Complete chunk with CAS and copies it, scrapes
 * BeingWritten ones like sonded does, frees what it took, and then reads the buffer. No
 * bitmap or header value may lead outside the mapping. */
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/smb.h"
#include "service/tbuf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int on_packet(void *ctx, const struct iovec *iov, size_t n, size_t total)
{
	(void)iov;
	(void)n;
	(void)total;
	(*(size_t *)ctx)++;
	return 0;
}

static void take_page(struct tbuf *tb, uint8_t *smb, size_t page_size, size_t pg)
{
	uint32_t bm = smb_bitmap_load(smb_page_bitmap(smb, page_size, pg));
	unsigned layout = smb_bitmap_layout(bm), n = smb_layout_nchunks(layout);

	for (unsigned i = 0; i < SMB_MAX_CHUNKS_PER_PAGE; i++) {
		struct smb_chunk_info ci;
		uint8_t *c = smb_acquire_for_reading(smb, page_size, pg, i, &ci);
		if (c) {
			if (i >= n)
				abort(); /* acquired a chunk outside the layout */
			sonde__tbuf_copy_chunk(tb, 1, 0, 1, &ci, c + SMB_CHUNK_HDR_SIZE,
					ci.size - SMB_CHUNK_HDR_SIZE);
			smb_release_read_chunk(smb, page_size, pg, i, c);
		} else if (i < n && smb_bitmap_state(bm, i) == SMB_CHUNK_BEING_WRITTEN) {
			uint8_t *w = smb_chunk_ptr(smb, page_size, pg, layout, i);
			struct smb_chunk_info wi = smb_chunk_read_hdr(w);
			if (wi.count >= 2) {
				wi.count--;
				wi.flags &= (uint8_t) ~(SMB_FLAG_LAST_PACKET_CONTINUES |
							SMB_FLAG_NEEDS_PATCHING);
				sonde__tbuf_copy_chunk(tb, 1, 0, 1, &wi, w + SMB_CHUNK_HDR_SIZE,
						smb_chunk_size(page_size, layout) -
							SMB_CHUNK_HDR_SIZE);
			}
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const size_t page_size = 4096;
	size_t pages = (size + page_size - 1) / page_size;
	struct tbuf tb;
	uint32_t next_seq = 2;
	uint64_t invalid = 0;
	size_t packets = 0;
	uint8_t *smb;

	if (pages == 0 || pages > 16)
		return 0;
	smb = aligned_alloc(page_size, pages * page_size);
	if (!smb)
		return 0;
	memset(smb, 0, pages * page_size);
	memcpy(smb, data, size);
	if (sonde__tbuf_init(&tb, 65536, false) == 0) {
		for (size_t pg = 0; pg < pages; pg++)
			take_page(&tb, smb, page_size, pg);
		sonde__tbuf_read(&tb, on_packet, &packets, &next_seq, &invalid);
		sonde__tbuf_free(&tb);
	}
	free(smb);
	return 0;
}
