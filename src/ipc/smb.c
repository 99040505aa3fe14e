/* Checks of a shared memory buffer a peer hands over, for every side that maps one. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

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
