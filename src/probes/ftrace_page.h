/* The binary pages of a tracefs ring buffer (per_cpu/cpuN/trace_pipe_raw), and the two
 * tracefs files that describe their layout (events/header_page, events/header_event).
 * Internal to libsonde.
 *
 * A page (kernel/trace/ring_buffer.c, struct buffer_data_page) is
 *   u64 time_stamp; local_t commit; u8 data[];
 * where commit's low bits count the bytes of data in use and its high bits are flags:
 * RB_MISSED_EVENTS (bit 31, an int constant: on 64-bit kernels bits 32..63 are set too) says events
 * were lost before this page, RB_MISSED_STORED (bit 30) that their number, an unsigned long,
 * follows the data. Events start with a u32 header: type_len (5 low bits) and time_delta (27 high
 * bits), then array[]: type_len 1..28   data event, payload type_len * 4 bytes at array[0] type_len
 * 0       data event, array[0] = payload length + 4, payload at array[1] 29 (padding) time_delta 0:
 * the rest of the page is empty; else array[0] bytes follow the header, array[0] included (a
 * discarded event) 30 (time extend) the delta is (array[0] << 27) | time_delta 31 (time stamp)  an
 * absolute time, (array[0] << 27) | time_delta, whose top 5 bits come from the page's time_stamp
 * (rb_fix_abs_ts) The parsers below take untrusted (buf, len) and never read outside it.
 */
#ifndef SONDE_PROBES_FTRACE_PAGE_H
#define SONDE_PROBES_FTRACE_PAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Where the page header's fields are, from events/header_page. */
struct ftrace_page_layout {
	uint16_t timestamp_offset, timestamp_size;
	uint16_t commit_offset, commit_size;
	uint16_t data_offset;
	uint32_t page_size; /* data_offset + the size of the data field */
};

/* The layout of a 64-bit kernel (the defaults when header_page cannot be read). */
void sonde__ftrace_page_layout_default(struct ftrace_page_layout *l);

/* Parses events/header_page text. Returns 0, or -SONDE_E_FORMAT when a field is missing
 * or out of range (then *l holds the defaults). */
int sonde__ftrace_page_layout_parse(const char *buf, size_t len, struct ftrace_page_layout *l);

/* Checks events/header_event describes the event header this parser knows (5-bit
 * type_len, 27-bit time_delta, padding 29, time_extend 30, time_stamp 31, data max 28).
 * Returns 0 or -SONDE_E_UNSUPPORTED. */
int sonde__ftrace_header_event_check(const char *buf, size_t len);

/* What the page header said. */
struct ftrace_page_info {
	uint64_t timestamp;  /* the page's base time */
	uint32_t data_len;   /* bytes of events in the page */
	bool lost_events;    /* events were lost between the previous page and this one */
	bool lost_count_set; /* lost_count is known */
	uint64_t lost_count;
};

/* Reads only the page header. Returns 0, or -SONDE_E_TRUNCATED when len is shorter than
 * the header or than the data its commit claims (*info is filled in anyway). */
int sonde__ftrace_page_header(const struct ftrace_page_layout *l, const void *buf, size_t len,
		       struct ftrace_page_info *info);

/* Called for each data event: its absolute time and payload (the event's record, which
 * starts with the common_* fields). The payload stays valid during the call only. A
 * non-zero return stops the parse and is returned by sonde__ftrace_page_parse. */
typedef int (*ftrace_event_fn)(void *ctx, uint64_t ts, const uint8_t *data, size_t len);

/* Parses one page. Returns the number of data events delivered, or a negative error:
 * -SONDE_E_TRUNCATED if len is shorter than the header or the page's commit says, or
 * -SONDE_E_FORMAT for an event that runs past the data (events before it were delivered;
 * *info is filled in either case once the header was read). fn may be NULL to count. */
int sonde__ftrace_page_parse(const struct ftrace_page_layout *l, const void *buf, size_t len,
		      struct ftrace_page_info *info, ftrace_event_fn fn, void *ctx);

#endif
