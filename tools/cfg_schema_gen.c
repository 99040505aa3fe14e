/* cfg_schema_gen: a FileDescriptorSet (protoc --descriptor_set_out --include_imports) to
 * the C tables of the text-format config parser (src/client/cfg_schema.h).
 *
 *   cfg_schema_gen DESCRIPTOR_SET ROOT_MESSAGE OUT.inc
 *
 * Emits every message and enum reachable from ROOT_MESSAGE (a full name such as
 * perfetto.protos.TraceConfig), the root as sonde__cfg_trace_config. Runs on the build
 * machine; reads the descriptor set with libsonde's own protobuf reader, so the build needs
 * no protobuf library, only protoc. A schema the parser cannot represent (groups, packed
 * fields, more than 64 fields in a message) stops the build with the message's name.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pb.h"

/* descriptor.proto field numbers */
enum {
	FDS_FILE = 1,
	FILE_PACKAGE = 2,
	FILE_MESSAGE = 4,
	FILE_ENUM = 5,
	MSG_NAME = 1,
	MSG_FIELD = 2,
	MSG_NESTED = 3,
	MSG_ENUM = 4,
	FIELD_NAME = 1,
	FIELD_NUMBER = 3,
	FIELD_LABEL = 4,
	FIELD_TYPE = 5,
	FIELD_TYPE_NAME = 6,
	FIELD_OPTIONS = 8,
	FIELD_ONEOF_INDEX = 9,
	FIELD_OPTIONS_PACKED = 2,
	ENUM_NAME = 1,
	ENUM_VALUE = 2,
	ENUMV_NAME = 1,
	ENUMV_NUMBER = 2,
	LABEL_REPEATED = 3,
	MAX_FIELDS = 64,
};

/* FieldDescriptorProto.Type to enum cfg_type's names */
static const char *const cfg_types[19] = {
	[1] = "CT_DOUBLE", [2] = "CT_FLOAT", [3] = "CT_I64",   [4] = "CT_U64",	  [5] = "CT_I32",
	[6] = "CT_FX64",   [7] = "CT_FX32",  [8] = "CT_BOOL",  [9] = "CT_STRING", [11] = "CT_MSG",
	[12] = "CT_BYTES", [13] = "CT_U32",  [14] = "CT_ENUM", [15] = "CT_SFX32", [16] = "CT_SFX64",
	[17] = "CT_S32",   [18] = "CT_S64",
};

struct def {
	char *full;	    /* ".perfetto.protos.TraceConfig.BufferConfig" */
	const char *simple; /* points into full: "BufferConfig" */
	struct pb_field body;
	int is_enum;
	int id; /* emission order, -1 until reached */
};

static struct def *defs;
static size_t ndefs, capdefs;
static const char *prog = "cfg_schema_gen";

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static char *join(const char *scope, const struct pb_field *name)
{
	size_t n = strlen(scope);
	char *s = malloc(n + 1 + name->len + 1);

	if (!s)
		die("out of memory");
	memcpy(s, scope, n);
	s[n] = '.';
	memcpy(s + n + 1, name->ptr, name->len);
	s[n + 1 + name->len] = 0;
	return s;
}

static void add_def(char *full, const struct pb_field *body, int is_enum)
{
	if (ndefs == capdefs) {
		capdefs = capdefs ? capdefs * 2 : 64;
		defs = realloc(defs, capdefs * sizeof(*defs));
		if (!defs)
			die("out of memory");
	}
	defs[ndefs++] = (struct def){full, strrchr(full, '.') + 1, *body, is_enum, -1};
}

static int next(struct pb_reader *r, struct pb_field *f)
{
	int n = sonde__pb_next(r, f);

	if (n < 0)
		die("malformed descriptor set");
	return n;
}

/* The length-delimited field num of msg into *out; 0 if it has none. */
static int find_str(const struct pb_field *msg, uint32_t num, struct pb_field *out)
{
	struct pb_reader r = pb_sub(msg);
	struct pb_field f;

	while (next(&r, &f))
		if (f.num == num && f.wire == PB_LEN) {
			*out = f;
			return 1;
		}
	return 0;
}

static void collect_message(const char *scope, const struct pb_field *msg)
{
	struct pb_field name, f;
	struct pb_reader r = pb_sub(msg);

	if (!find_str(msg, MSG_NAME, &name))
		die("a message in %s has no name", scope);
	char *full = join(scope, &name);
	add_def(full, msg, 0);
	while (next(&r, &f)) {
		if (f.wire != PB_LEN)
			continue;
		if (f.num == MSG_NESTED)
			collect_message(full, &f);
		else if (f.num == MSG_ENUM && find_str(&f, ENUM_NAME, &name))
			add_def(join(full, &name), &f, 1);
	}
}

static void collect(const uint8_t *set, size_t len)
{
	struct pb_reader r = pb_reader_init(set, len), fr;
	struct pb_field file, f, name;

	while (next(&r, &file)) {
		if (file.num != FDS_FILE || file.wire != PB_LEN)
			continue;
		char scope[256] = "";
		if (find_str(&file, FILE_PACKAGE, &name)) {
			if (name.len + 2 > sizeof(scope))
				die("package name too long");
			snprintf(scope, sizeof(scope), ".%.*s", (int)name.len,
				 (const char *)name.ptr);
		}
		fr = pb_sub(&file);
		while (next(&fr, &f)) {
			if (f.wire != PB_LEN)
				continue;
			if (f.num == FILE_MESSAGE)
				collect_message(scope, &f);
			else if (f.num == FILE_ENUM && find_str(&f, ENUM_NAME, &name))
				add_def(join(scope, &name), &f, 1);
		}
	}
}

static struct def *lookup(const uint8_t *name, size_t len)
{
	for (size_t i = 0; i < ndefs; i++)
		if (strlen(defs[i].full) == len && memcmp(defs[i].full, name, len) == 0)
			return &defs[i];
	return NULL;
}

static int next_id;

static void reach(struct def *d);

/* One FieldDescriptorProto, decoded. */
struct field {
	struct pb_field name, type_name;
	uint64_t number, label, type, oneof;
	int has_type_name, packed;
};

static void decode_field(const struct pb_field *fd, struct field *out)
{
	struct pb_reader r = pb_sub(fd), or ;
	struct pb_field f, o;

	memset(out, 0, sizeof(*out));
	while (next(&r, &f)) {
		switch (f.num) {
		case FIELD_NAME:
			out->name = f;
			break;
		case FIELD_NUMBER:
			out->number = f.u;
			break;
		case FIELD_LABEL:
			out->label = f.u;
			break;
		case FIELD_TYPE:
			out->type = f.u;
			break;
		case FIELD_TYPE_NAME:
			out->type_name = f;
			out->has_type_name = 1;
			break;
		case FIELD_ONEOF_INDEX:
			out->oneof = f.u + 1;
			break;
		case FIELD_OPTIONS:
			or = pb_sub(&f);
			while (next(& or, &o))
				if (o.num == FIELD_OPTIONS_PACKED && o.wire == PB_VARINT && o.u)
					out->packed = 1;
			break;
		}
	}
}

static struct def *field_target(const struct def *m, const struct field *fl)
{
	if (fl->type != 11 && fl->type != 14)
		return NULL;
	if (!fl->has_type_name)
		die("%s.%.*s: no type name", m->full + 1, (int)fl->name.len,
		    (const char *)fl->name.ptr);
	struct def *t = lookup(fl->type_name.ptr, fl->type_name.len);
	if (!t)
		die("%s.%.*s: type %.*s not in the descriptor set", m->full + 1, (int)fl->name.len,
		    (const char *)fl->name.ptr, (int)fl->type_name.len,
		    (const char *)fl->type_name.ptr);
	return t;
}

/* Numbers every definition reachable from d, depth first. */
static void reach(struct def *d)
{
	if (d->id >= 0)
		return;
	d->id = next_id++;
	if (d->is_enum)
		return;
	struct pb_reader r = pb_sub(&d->body);
	struct pb_field f;
	struct field fl;
	while (next(&r, &f)) {
		if (f.num != MSG_FIELD || f.wire != PB_LEN)
			continue;
		decode_field(&f, &fl);
		struct def *t = field_target(d, &fl);
		if (t)
			reach(t);
	}
}

static void ident(FILE *out, const struct def *d, int root)
{
	if (root)
		fputs("sonde__cfg_trace_config", out);
	else
		fprintf(out, "%s%d", d->is_enum ? "cfg_e" : "cfg_m", d->id);
}

static void emit_enum(FILE *out, const struct def *d)
{
	struct pb_reader r = pb_sub(&d->body), vr;
	struct pb_field f, v;

	fprintf(out, "/* %s */\nstatic const struct cfg_enum_val cfg_e%d_vals[] = {\n", d->full + 1,
		d->id);
	while (next(&r, &f)) {
		if (f.num != ENUM_VALUE || f.wire != PB_LEN)
			continue;
		struct pb_field name = {0};
		int64_t num = 0;
		vr = pb_sub(&f);
		while (next(&vr, &v)) {
			if (v.num == ENUMV_NAME && v.wire == PB_LEN)
				name = v;
			else if (v.num == ENUMV_NUMBER && v.wire == PB_VARINT)
				num = (int32_t)v.u;
		}
		fprintf(out, "\t{\"%.*s\", %lld},\n", (int)name.len, (const char *)name.ptr,
			(long long)num);
	}
	fprintf(out,
		"\t{NULL, 0}};\nstatic const struct cfg_enum cfg_e%d = {\"%s\", cfg_e%d_vals};\n\n",
		d->id, d->simple, d->id);
}

static void emit_message(FILE *out, const struct def *d, int root)
{
	struct pb_reader r = pb_sub(&d->body);
	struct pb_field f;
	struct field fl;
	int n = 0;

	fprintf(out, "/* %s */\nstatic const struct cfg_field cfg_m%d_fields[] = {\n", d->full + 1,
		d->id);
	while (next(&r, &f)) {
		if (f.num != MSG_FIELD || f.wire != PB_LEN)
			continue;
		decode_field(&f, &fl);
		if (fl.type >= 19 || !cfg_types[fl.type])
			die("%s.%.*s: field type %llu (groups) cannot be written in a text config",
			    d->full + 1, (int)fl.name.len, (const char *)fl.name.ptr,
			    (unsigned long long)fl.type);
		if (fl.packed)
			die("%s.%.*s: packed fields are not supported by the text config parser",
			    d->full + 1, (int)fl.name.len, (const char *)fl.name.ptr);
		if (fl.oneof > 255)
			die("%s: too many oneofs", d->full + 1);
		if (++n > MAX_FIELDS)
			die("%s: more than %d fields (txtcfg.c tracks the fields seen in 64 bits)",
			    d->full + 1, MAX_FIELDS);
		const struct def *t = field_target(d, &fl);
		fprintf(out, "\t{\"%.*s\", %llu, %s, %s, %llu, ", (int)fl.name.len,
			(const char *)fl.name.ptr, (unsigned long long)fl.number,
			cfg_types[fl.type], fl.label == LABEL_REPEATED ? "true" : "false",
			(unsigned long long)fl.oneof);
		if (t && !t->is_enum) {
			fputc('&', out);
			ident(out, t, 0);
			fputs(", NULL},\n", out);
		} else if (t) {
			fputs("NULL, &", out);
			ident(out, t, 0);
			fputs("},\n", out);
		} else {
			fputs("NULL, NULL},\n", out);
		}
	}
	fprintf(out, "\t{NULL, 0, 0, false, 0, NULL, NULL}};\n%sconst struct cfg_msg ",
		root ? "" : "static ");
	ident(out, d, root);
	fprintf(out, " = {\"%s\", cfg_m%d_fields};\n\n", d->simple, d->id);
}

static uint8_t *read_all(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *p = NULL;
	size_t cap = 0, n = 0, got;

	if (!f)
		die("%s: %s", path, strerror(errno));
	do {
		if (n == cap) {
			cap = cap ? cap * 2 : 65536;
			p = realloc(p, cap);
			if (!p)
				die("out of memory");
		}
		got = fread(p + n, 1, cap - n, f);
		n += got;
	} while (got);
	if (ferror(f))
		die("%s: read error", path);
	fclose(f);
	*len = n;
	return p;
}

int main(int argc, char **argv)
{
	size_t len;

	if (argc != 4) {
		fprintf(stderr, "usage: %s DESCRIPTOR_SET ROOT_MESSAGE OUT\n", prog);
		return 2;
	}
	uint8_t *set = read_all(argv[1], &len);
	collect(set, len);
	char root_name[512];
	snprintf(root_name, sizeof(root_name), ".%s", argv[2]);
	struct def *root = lookup((const uint8_t *)root_name, strlen(root_name));
	if (!root || root->is_enum)
		die("message %s not in %s", argv[2], argv[1]);
	reach(root);

	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s.tmp", argv[3]);
	FILE *out = fopen(tmp, "w");
	if (!out)
		die("%s: %s", tmp, strerror(errno));
	fprintf(out,
		"/* Generated by tools/cfg_schema_gen.c from the .proto files of protos/config "
		"(%s);"
		" do not edit. */\n\n",
		argv[2]);
	/* enums first, then every message declared before any is defined: fields point at
	 * messages defined later */
	for (int id = 0; id < next_id; id++)
		for (size_t i = 0; i < ndefs; i++)
			if (defs[i].id == id && defs[i].is_enum)
				emit_enum(out, &defs[i]);
	for (int id = 0; id < next_id; id++)
		for (size_t i = 0; i < ndefs; i++)
			if (defs[i].id == id && !defs[i].is_enum && &defs[i] != root)
				fprintf(out, "static const struct cfg_msg cfg_m%d;\n", id);
	fputc('\n', out);
	for (int id = next_id - 1; id >= 0; id--)
		for (size_t i = 0; i < ndefs; i++)
			if (defs[i].id == id && !defs[i].is_enum)
				emit_message(out, &defs[i], &defs[i] == root);
	if (fclose(out) != 0 || rename(tmp, argv[3]) != 0)
		die("%s: %s", argv[3], strerror(errno));
	return 0;
}
