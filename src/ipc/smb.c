/* Shared memory buffers: creating one, and checking one a peer hands over, for every side
 * that maps one. */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ipc/smb.h"

int sonde__smb_check_fd(int fd, size_t *size)
{
	const int need = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
	const int forbid = F_SEAL_WRITE | F_SEAL_FUTURE_WRITE;
	int seals = fcntl(fd, F_GET_SEALS), fl = fcntl(fd, F_GETFL);
	struct stat st;

	/* F_GET_SEALS fails on anything but a memfd (or another sealable shmem file) */
	if (seals < 0 || fl < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return -EBADF;
	/* unsealed, the producer could shrink the file and make the mapping side fault */
	if ((seals & need) != need || (seals & forbid))
		return -EPERM;
	if ((fl & O_ACCMODE) != O_RDWR)
		return -EACCES;
	if (st.st_size <= 0)
		return -EINVAL;
	*size = (size_t)st.st_size;
	return 0;
}

int sonde__smb_create(size_t size)
{
	int fd = memfd_create("perfetto_shmem", MFD_CLOEXEC | MFD_ALLOW_SEALING), rc;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}
