/* Perfetto's TraceConfig schema as the text-format parser knows it. Internal to libsonde
 * (src/client).
 *
 * The text format names fields instead of numbering them, so a field can only be encoded
 * if its number and type are known here. The tables are generated at build time from the
 * .proto files under protos/config (mk/cfgschema.mk, tools/cfg_schema_gen.c): TraceConfig
 * as of Perfetto v53, and DataSourceConfig's typed configs for the data sources sonde
 * serves.
 * Other data sources' configs are written in binary form (`sonde trace -c FILE` without
 * --txt), which passes any field through byte for byte.
 */
#ifndef SONDE_CLIENT_CFG_SCHEMA_H
#define SONDE_CLIENT_CFG_SCHEMA_H

#include <stdbool.h>
#include <stdint.h>

enum cfg_type {
	CT_BOOL,
	CT_U32,
	CT_U64,
	CT_I32,
	CT_I64,
	CT_S32, /* sint32: zigzag */
	CT_S64,
	CT_FX32, /* fixed32 */
	CT_FX64,
	CT_SFX32,
	CT_SFX64,
	CT_FLOAT,
	CT_DOUBLE,
	CT_STRING,
	CT_BYTES,
	CT_ENUM,
	CT_MSG,
};

struct cfg_enum_val {
	const char *name;
	int32_t value;
};

struct cfg_enum {
	const char *name;
	const struct cfg_enum_val *vals; /* terminated by a NULL name */
};

struct cfg_field {
	const char *name;
	uint32_t num;
	uint8_t type; /* enum cfg_type */
	bool repeated;
	uint8_t oneof;		    /* 1 + the index of its oneof in the message; 0: in none */
	const struct cfg_msg *msg;  /* CT_MSG */
	const struct cfg_enum *enm; /* CT_ENUM; NULL: integers only */
};

struct cfg_msg {
	const char *name;
	const struct cfg_field *fields; /* terminated by a NULL name; at most 64 */
};

extern const struct cfg_msg sonde__cfg_trace_config;

/* The field called name in m, or NULL. */
const struct cfg_field *sonde__cfg_find_field(const struct cfg_msg *m, const char *name,
					      size_t len);

#endif
