/* Central trace buffer: the service-side store of chunks copied out of producers' shared
 * memory (perfetto-wire.md §4.7-§4.9). Internal to the service.
 *
 * The buffer is one byte ring holding 16-byte-aligned records in commit order: a 16-byte
 * header followed by a verbatim copy of the chunk payload (the snapshot the spec asks
 * for: the producer can no longer change what gets parsed). Ingest is one copy (with
 * non-temporal stores in a ring of 8 MiB or more) and one store into the sequence's chunk
 * index per chunk, without parsing (a hash table indexed every chunk before: its random
 * accesses, a cache miss at each insert and each delete, cost a quarter of the service's
 * CPU at 4 KiB chunks). Packets are only parsed on the
 * read side, which walks records oldest first, reassembles fragments across consecutive
 * chunk ids of the same sequence (through that index), validates each packet and adds
 * the trusted suffix. Consumption state lives in the records, so a read can stop after
 * any packet and resume later.
 *
 * RING_BUFFER overwrites the oldest records; DISCARD stops accepting chunks the first
 * time one does not fit.
 */
#ifndef SONDE_SERVICE_TBUF_H
#define SONDE_SERVICE_TBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "base/u64map.h"
#include "ipc/smb.h"

struct tbuf_stats {
	uint64_t bytes_written, bytes_overwritten, bytes_read, padding_bytes_written;
	uint64_t chunks_written, chunks_rewritten, chunks_overwritten, chunks_discarded;
	uint64_t chunks_read, chunks_committed_out_of_order, write_wrap_count;
	uint64_t patches_succeeded, patches_failed, readaheads_succeeded, readaheads_failed;
	uint64_t abi_violations, trace_writer_packet_loss;
};

/* A writer's sequence within this buffer. */
struct tbuf_seq {
	uint32_t producer_id;
	uint16_t writer_id;
	int32_t uid, pid;
	bool uid_unknown;    /* a remote producer's: its packets carry no trusted_uid */
	uint32_t machine_id; /* a relayed producer's machine: TracePacket.machine_id */
	uint32_t trusted_id; /* trusted_packet_sequence_id, 0 until first read */
	bool has_last;	     /* last_* describe the newest chunk read from */
	bool loss;	     /* set previous_packet_dropped on the next packet */
	uint32_t last_chunk_id;
	uint16_t last_frags, last_off; /* fragments/bytes of it consumed */
	uint32_t blocked_pass;	       /* waiting for a patch or a continuation */
	bool has_newest;	       /* newest_chunk_id: the highest chunk id copied */
	uint32_t newest_chunk_id;
	uint8_t suffix_len;
	uint8_t suffix[30]; /* trusted fields, built once with trusted_id */
	/* Where this sequence's stored chunks are, for ids [win_base, win_base + win_len):
	 * the record offset of id win_base + i at win[(win_head + i) & (win_cap - 1)], or
	 * TBUF_WIN_NONE. A writer numbers its chunks consecutively, so the index of the
	 * common case is appended to and trimmed at its front in order, never hashed; a chunk
	 * id outside it (older than its front, or far ahead) goes to tbuf.chunks. */
	uint32_t *win;
	uint32_t win_base, win_len, win_head, win_cap, win_present;
};
#define TBUF_WIN_NONE UINT32_MAX

struct tbuf {
	uint8_t *data; /* the ring, 64-byte aligned in mem */
	void *mem;
	size_t size;
	size_t rd, wr, used; /* records live in [rd, wr) of the ring; used bytes incl. padding */
	bool discard;	     /* fill policy DISCARD */
	bool discard_full;
	bool stream; /* records are written with non-temporal stores (a ring beyond the caches) */
	struct u64map chunks; /* (seq index << 32 | chunk_id) -> record offset, for chunks
			       * outside their sequence's window (tbuf_seq.win) */
	struct u64map seqmap; /* (producer_id << 16 | writer_id) -> seq index */
	struct tbuf_seq *seqs;
	size_t nseqs, seqs_cap;
	uint64_t seq_cache_key; /* the last sequence looked up, skipping the hash */
	int seq_cache_idx;
	struct tbuf_stats st;
	uint32_t pass;
	bool sealed;	       /* sonde__tbuf_seal: takes no chunk or patch any more */
	struct tbuf_mem *lent; /* the ring's memory, once lent (sonde__tbuf_lend) */
	/* reader scratch, reused */
	struct iovec *iov;
	size_t iov_cap;
	uint8_t suffix[40];
};

/* Receives each packet read: its slices (the last one is the trusted suffix) and total
 * length. Returns 0 to go on, or non-zero to stop reading after this packet. */
typedef int (*tbuf_packet_fn)(void *ctx, const struct iovec *iov, size_t n, size_t total);

/* The ring's memory, shared once lent: freed when the buffer and every borrower have let
 * it go. */
struct tbuf_mem;

/* size is rounded down to a multiple of 16 (minimum 4096). Returns 0 or -ENOMEM. */
int sonde__tbuf_init(struct tbuf *tb, size_t size, bool discard);
void sonde__tbuf_free(struct tbuf *tb);

/* Makes dst an independent copy of src: its records, index, sequences, read positions
 * and stats (CloneSession). Returns 0 or -ENOMEM (dst is then empty). */
int sonde__tbuf_clone(struct tbuf *dst, const struct tbuf *src);

/* Copies a chunk payload (len bytes, a snapshot of shared memory) into the buffer.
 * Handles re-commits of the same (producer, writer, chunk_id) as §4.7 says. */
void sonde__tbuf_copy_chunk(struct tbuf *tb, uint32_t producer_id, int32_t uid, int32_t pid,
		     const struct smb_chunk_info *ci, const uint8_t *payload, size_t len);
/* Who wrote a chunk, as the service knows it: its packets' trusted fields. */
struct tbuf_ident {
	int32_t uid, pid; /* pid 0: none written */
	bool uid_unknown;
	uint32_t machine_id; /* 0: the host, none written */
};
void sonde__tbuf_copy_chunk_ident(struct tbuf *tb, uint32_t producer_id,
				  const struct tbuf_ident *who, const struct smb_chunk_info *ci,
				  const uint8_t *payload, size_t len);
/* The same for a producer whose uid and pid are unknown (a remote one). */
void sonde__tbuf_copy_chunk_remote(struct tbuf *tb, uint32_t producer_id,
				   const struct smb_chunk_info *ci, const uint8_t *payload,
				   size_t len);

/* Applies one 4-byte patch at payload offset `off` of a stored chunk. Returns 0, or
 * -ENOENT if the chunk is gone, -ERANGE if off is out of range (counted as failed). */
int sonde__tbuf_patch(struct tbuf *tb, uint32_t producer_id, uint16_t writer_id, uint32_t chunk_id,
	       uint32_t off, const uint8_t data[4]);
/* Clears the needs-patching flag of a stored chunk (its last patch arrived). */
void sonde__tbuf_patch_done(struct tbuf *tb, uint32_t producer_id, uint16_t writer_id, uint32_t chunk_id);

/* From now on the ring's bytes do not change: chunks and patches sent to it are dropped
 * (counted in chunks_discarded and patches_failed), and what is read stays where it is.
 * For the last drain of a write_into_file session, whose file is complete once the
 * buffers are read out: Perfetto's service reads them out at once, so that nothing
 * committed later reaches the file either. */
void sonde__tbuf_seal(struct tbuf *tb);
/* A reference to the ring's memory, for slices read from a sealed buffer that are used
 * after the buffer is freed (a file writer thread writing them from where they lie):
 * valid until sonde__tbuf_mem_release. NULL on -ENOMEM. Loop thread only. */
struct tbuf_mem *sonde__tbuf_lend(struct tbuf *tb);
void sonde__tbuf_mem_release(struct tbuf_mem *m);
/* Whether the n bytes at p lie in the ring. */
bool sonde__tbuf_holds(const struct tbuf *tb, const void *p, size_t n);

/* Reads packets oldest first into fn. *next_seq_id hands out trusted sequence ids (the
 * session's counter); invalid packets are dropped and counted in *invalid. Returns 1 if
 * fn asked to stop (more may remain), 0 when nothing readable is left. */
int sonde__tbuf_read(struct tbuf *tb, tbuf_packet_fn fn, void *ctx, uint32_t *next_seq_id,
	      uint64_t *invalid);

/* Whether the chunk index is consistent with the records: every entry names the start of
 * a live record of its sequence and chunk id, every window's front is a stored chunk and
 * its count of stored chunks is right. For tests and fuzz targets: it walks the ring for
 * each entry. */
bool sonde__tbuf_index_ok(const struct tbuf *tb);

/* Checks a TracePacket written by a producer (§4.8): well-formed top-level fields and
 * no reserved (service-only) field. */
bool sonde__tbuf_packet_valid(const uint8_t *p, size_t len);

#endif
