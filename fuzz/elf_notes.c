/* Fuzz target: the byte-level parsers next to the ELF reader: note sections (build id),
 * .gnu_debuglink contents, perf-PID.map text and kallsyms text. The first byte picks the
 * parser, so one corpus covers all four. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "symbol/elfimg.h"
#include "symbol/kallsyms.h"
#include "symbol/perfmap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint8_t sink;

static void fuzz_perfmap(const char *buf, size_t len)
{
	struct perfmap pm = {0};
	/* parse in two pieces, as a growing file is read */
	size_t half = len / 2;
	ssize_t used = sonde__perfmap_parse(&pm, buf, half, 0);

	if (used >= 0 && sonde__perfmap_parse(&pm, buf + used, len - (size_t)used, 1) >= 0 &&
	    sonde__perfmap_index(&pm) == 0) {
		for (size_t i = 0; i < pm.n_lines; i++) {
			sonde__perfmap_find(&pm, pm.lines[i].start);
			sonde__perfmap_find(&pm, pm.lines[i].end - 1);
		}
	}
	sonde__perfmap_free(&pm);
}

static void fuzz_kallsyms(const char *buf, size_t len)
{
	struct kallsyms k = {0};

	if (sonde__kallsyms_parse(&k, buf, len) == 0)
		for (size_t i = 0; i < k.n; i++)
			sonde__kallsyms_find(&k, k.v[i].addr + 1);
	sonde__kallsyms_free(&k);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *id;
	const char *name;
	size_t id_len;
	uint32_t crc;

	if (size < 1)
		return 0;
	switch (data[0] & 3) {
	case 0:
		/* touching every byte lets ASan check the returned bounds */
		if (sonde__elf_notes_build_id(data + 1, size - 1, &id, &id_len) == 0)
			sink = id_len ? id[0] ^ id[id_len - 1] : 0;
		break;
	case 1:
		if (sonde__elf_debuglink_parse(data + 1, size - 1, &name, &crc) == 0)
			sink = (uint8_t)strlen(name);
		break;
	case 2:
		fuzz_perfmap((const char *)data + 1, size - 1);
		break;
	case 3:
		fuzz_kallsyms((const char *)data + 1, size - 1);
		break;
	}
	return 0;
}
