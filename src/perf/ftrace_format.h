/* tracefs event format files (events/GROUP/NAME/format) into field descriptors.
 * Internal to libsonde.
 *
 * A format file reads
 *   name: sched_switch
 *   ID: 372
 *   format:
 *   	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
 *   	...
 *   	field:char prev_comm[16];	offset:8;	size:16;	signed:0;
 *   	field:__data_loc char[] name;	offset:12;	size:4;	signed:0;
 *   print fmt: ...
 * The parser takes untrusted (buf, len); fields whose offset and size do not fit in an
 * event record (64 KiB) are rejected.
 */
#ifndef SONDE_PERF_FTRACE_FORMAT_H
#define SONDE_PERF_FTRACE_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ftrace_field_kind {
	FTRACE_FIELD_INT,	   /* an integer of 1, 2, 4 or 8 bytes (pointers included) */
	FTRACE_FIELD_CHARS,	   /* char name[N]: a NUL-padded string in place */
	FTRACE_FIELD_DATA_LOC_STR, /* __data_loc char[]: u32 (len << 16 | offset from record) */
	FTRACE_FIELD_REL_LOC_STR,  /* __rel_loc char[]: the offset counts from the field's end */
	FTRACE_FIELD_DATA_LOC,	   /* __data_loc / __rel_loc of anything else: opaque bytes */
	FTRACE_FIELD_ARRAY,	   /* TYPE name[N] of non-char TYPE: opaque bytes */
	FTRACE_FIELD_OTHER,	   /* any other size: opaque bytes */
};

enum { FTRACE_NAME_MAX = 64, FTRACE_TYPE_MAX = 64 };

struct ftrace_field {
	char name[FTRACE_NAME_MAX];
	char type[FTRACE_TYPE_MAX]; /* the C type as written, without the array suffix */
	uint16_t offset, size;
	bool is_signed;
	bool common; /* a common_* field of every event */
	enum ftrace_field_kind kind;
};

struct ftrace_format {
	char group[FTRACE_NAME_MAX]; /* not in the file: the caller fills it in */
	char name[FTRACE_NAME_MAX];
	uint32_t id;
	uint16_t record_size; /* the end of the last fixed field */
	size_t nfields;
	struct ftrace_field *fields; /* owned; sonde__ftrace_format_free releases it */
};

/* Parses a format file. Returns 0, -SONDE_E_FORMAT for a file without a name, an ID or
 * any field, or for a malformed field line, or -ENOMEM. On success *f owns its fields;
 * on failure *f is left empty. */
int sonde__ftrace_format_parse(const char *buf, size_t len, struct ftrace_format *f);
void sonde__ftrace_format_free(struct ftrace_format *f);

/* Parses one "field:TYPE NAME;	offset:N;	size:N;	signed:N;" line (leading blanks
 * allowed). Returns 0 or -SONDE_E_FORMAT. Also used for events/header_page. */
int sonde__ftrace_field_parse(const char *line, size_t len, struct ftrace_field *out);

/* The field named name, or NULL. */
const struct ftrace_field *sonde__ftrace_format_field(const struct ftrace_format *f, const char *name);

/* Reads an integer field of a record: sign- or zero-extended per the field. Returns false
 * if the field does not fit in the record or is not a 1/2/4/8-byte integer. */
bool sonde__ftrace_field_int(const struct ftrace_field *fd, const uint8_t *rec, size_t len, int64_t *out);

/* The string a CHARS, DATA_LOC_STR or REL_LOC_STR field holds in a record, bounded by the
 * record and by the first NUL: sets *s and *n and returns true, or false if the field or
 * its location is out of bounds. */
bool sonde__ftrace_field_str(const struct ftrace_field *fd, const uint8_t *rec, size_t len, const char **s,
		      size_t *n);

#endif
