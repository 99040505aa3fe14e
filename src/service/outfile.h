/* write_into_file, the session's side (perfetto-wire.md §3.3): the output file is written
 * by a thread of its own (fwriter.h); the loop moves packets from the session's buffers
 * into it every file_write_period_ms, at the end, and soon again while its queue is full.
 * A file that takes nothing for SVC_FILE_STALL_MS, or fails, ends its session with an
 * error; max_file_size_bytes ends it normally. The EnableTracing reply of a DISABLED
 * session waits until the file is complete (sonde__session_resolve_if_disabled). */
#ifndef SONDE_SERVICE_OUTFILE_H
#define SONDE_SERVICE_OUTFILE_H

#include <stdbool.h>
#include <stdint.h>

struct svc;
struct session;
struct conn;

/* Sets up ss's output: the consumer's fd (taken on success), or output_path created
 * with consumer c's rights (sonde__sec_create_output). 0, -EINVAL (neither or both), -ENOMEM,
 * or the creation's -errno. */
int sonde__outfile_open(struct session *ss, const struct conn *c, const char *path, int fd);
/* Moves what the buffers hold into the file (service packets first), as far as the
 * writer's queue takes it; at the end (file_closing) completes the file. */
void sonde__session_drain_file(struct svc *s, struct session *ss);
/* The session is being freed: its writer finishes the queue on its own and is reaped by
 * sonde__session_reap_writers (or stopped at once past SVC_MAX_DRAINING). */
void sonde__outfile_release(struct svc *s, struct session *ss);
/* Stops the retired writers that are done or stalled and frees those whose thread ended;
 * with wait_ms, gives all of them that long in all to finish, then lets them go (shutdown
 * only: it blocks). */
void sonde__session_reap_writers(struct svc *s, int wait_ms);
/* The eventfd through which writers say their queue has room (sonde__fwriter_notify),
 * watched by the loop: created with the service (0 or -errno), closed with it. */
int sonde__outfile_init(struct svc *s);
void sonde__outfile_fini(struct svc *s);
/* Handles the loop's event for cookie if it is that eventfd's: drains the files whose
 * queue had no room. Returns false for another cookie. */
bool sonde__outfile_io(struct svc *s, uint64_t cookie);

#endif
