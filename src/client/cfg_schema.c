/* Field tables for the text-format TraceConfig parser, generated from the .proto files
 * under protos/config (mk/cfgschema.mk). Numbers are the wire contract: they never change
 * upstream, so a table is a faithful and allocation-free schema. */
#include <stddef.h>
#include <string.h>

#include "client/cfg_schema.h"

#include "cfg_schema.inc"

const struct cfg_field *sonde__cfg_find_field(const struct cfg_msg *m, const char *name, size_t len)
{
	for (const struct cfg_field *f = m->fields; f->name; f++)
		if (strlen(f->name) == len && memcmp(f->name, name, len) == 0)
			return f;
	return NULL;
}
