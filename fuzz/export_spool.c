/* Fuzz target: any bytes as a spool, through the profile builder (without symbolization,
 * which would open whatever paths the input names) and every exporter. The builder must
 * reject what the decoder rejects and never index out of its id maps; the exporters must
 * cope with whatever profile results, under every metric. */
#include <fcntl.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/mman.h>
#include <unistd.h>

#include <sonde/log.h>

#include "export/profile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int null_fd = -1;
	struct sonde_profile_spool_opts opts = {.sz = sizeof(opts), .no_symbolize = 1};
	int fd = memfd_create("spool", MFD_CLOEXEC);

	sonde_log__set_level(SONDE_LOG_OFF);
	if (null_fd < 0)
		null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (fd < 0 || null_fd < 0)
		return 0;
	if (write(fd, data, size) == (ssize_t)size && lseek(fd, 0, SEEK_SET) == 0) {
		struct sonde_profile *p = sonde__prof_from_spool_fd(fd, "fuzz", &opts);
		/* every format under every metric: the time metrics weigh off-CPU intervals */
		for (int m = SONDE_PROFILE_METRIC_CPU; p && m <= SONDE_PROFILE_METRIC_WALL; m++) {
			struct sonde_profile_write_opts wo = {
				.sz = sizeof(wo), .metric = (enum sonde_profile_metric)m};
			for (int f = SONDE_PROFILE_PPROF; f <= SONDE_PROFILE_SVG; f++)
				sonde_profile__write(p, (enum sonde_profile_format)f, null_fd, &wo);
		}
		sonde_profile__free(p);
	}
	close(fd);
	return 0;
}
