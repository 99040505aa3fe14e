/* The writer of one write_into_file output: a thread of its own doing blocking writes
 * into the file, fed through a bounded queue by the service loop. Internal to the service.
 *
 * Why a thread: the fd usually comes from the consumer, which may be anyone, and may be a
 * pipe nobody reads, a socket, a tty whose output is stopped, or a file on a FUSE mount
 * that never answers; a write() into any of them can block forever. The loop must not.
 * Non-blocking writes are not an option: O_NONBLOCK belongs to the open file description,
 * which the consumer shares (setting it would change the consumer's own reads and
 * writes), and RWF_NOWAIT / MSG_DONTWAIT work only for some kinds of files. A thread can
 * block; the loop only watches how long it has made no progress, and ends the session
 * when that lasts too long.
 *
 * A write in progress is abandoned with pthread_cancel: write() and fsync() are
 * cancellation points, and the thread enables cancellation only around them and holds no
 * lock there, so a cancel lands either in the call or at the next one. The loop never
 * joins: it cancels and reaps the thread once it has ended.
 *
 * All functions are called from the loop thread.
 */
#ifndef SONDE_SERVICE_FWRITER_H
#define SONDE_SERVICE_FWRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

struct fwriter;

/* Starts the writer of fd; max_queued bounds the bytes waiting besides the batch being
 * written (which the thread took whole). The writer owns fd on success (closed when the
 * writer is freed); NULL with errno on failure, fd untouched. */
struct fwriter *sonde__fwriter_new(int fd, size_t max_queued);
/* Queues the bytes of b, which are taken unless it returns < 0: b is left empty, its
 * storage handed to the writer as it is (no copy; b gets an emptied buffer of the
 * writer's back, its memory kept), or, for fewer than 64 KiB behind other queued bytes,
 * appended to them. 0, -ENOBUFS if they would pass the bound (nothing is queued; an
 * empty queue takes any amount), -ENOMEM, or the writer's error once a write failed
 * (-errno; everything queued is dropped then). */
int sonde__fwriter_push_buf(struct fwriter *w, struct buf *b);
/* Queues the bytes of `before` (taken as by sonde__fwriter_push_buf), then the n bytes at
 * p, which are not copied: the thread writes them from where they lie, so they must stay
 * as they are until the writer is destroyed (sonde__fwriter_hold keeps their memory
 * alive that long). Both are taken whatever the bound, which counts them: 0 when the
 * queue has room left, 1 when it is past its bound (a wake-up is asked for, as by a push
 * refused for room), else -ENOMEM or the writer's error (nothing taken then). */
int sonde__fwriter_push_ref(struct fwriter *w, struct buf *before, const void *p, size_t n);
/* Calls release(arg) once the writer is destroyed (its thread ended: nothing it borrowed
 * is read any more), from sonde__fwriter_reap or sonde__fwriter_free; never if the thread
 * is left running to the process's exit. 0 or -ENOMEM (release not registered). */
int sonde__fwriter_hold(struct fwriter *w, void (*release)(void *), void *arg);
/* Whether a push of n bytes would be taken now. */
bool sonde__fwriter_room(struct fwriter *w, size_t n);
/* After a push or a room check found the queue full, the thread writes 1 to wake_fd (an
 * eventfd the loop watches) as soon as it takes the queue: the loop refills it while the
 * batch is written, instead of finding out at its next timer; and again once a finish is
 * done. Until the writer is cancelled. */
void sonde__fwriter_notify(struct fwriter *w, int wake_fd);
/* Nanoseconds of now_ns's clock (the service's) since this call first saw the writer
 * without progress while bytes wait: the thread counts its progress and reads no clock,
 * so the time counts from the first call that found it stuck, at most one call's period
 * late. 0 when nothing waits or it moved since the last call. */
uint64_t sonde__fwriter_stalled_ns(struct fwriter *w, uint64_t now_ns);
/* Bytes are queued or being written, or a finish asked for is not done. */
bool sonde__fwriter_busy(struct fwriter *w);
/* The file is being completed (its session is disabled): each batch written from now on
 * is sent to the disk at once (sync_file_range), so that the fsync of the finish has only
 * the last ones to wait for. */
void sonde__fwriter_closing(struct fwriter *w);
/* After what is queued: fsync, and fchmod to mode unless it is 0. */
void sonde__fwriter_finish(struct fwriter *w, unsigned mode);
/* The finish asked for is done (or the writer failed). */
bool sonde__fwriter_finished(struct fwriter *w);
/* -errno of the first failed write, or 0. */
int sonde__fwriter_error(struct fwriter *w);
/* Copies everything pushed so far into fd: the bytes the thread already wrote, read back
 * from the writer's file from offset 0, then those still queued; *copied is their count.
 * For cloning a write_into_file session, which Perfetto's service copies synchronously
 * too. Waits up to timeout_ms for a write in progress to end; the thread takes nothing new
 * while the copy runs. Since the caller's thread does the reads and writes, both files
 * must be regular files off FUSE mounts, whose reads and writes end by themselves:
 * otherwise -EINVAL and *why says which is not (NULL on any other error). The writer's
 * file must be readable (-EBADF otherwise), and -ETIMEDOUT if the write in progress did
 * not end. */
int sonde__fwriter_copy_to(struct fwriter *w, int fd, int timeout_ms, uint64_t *copied,
			   const char **why);
/* Stops the writer now: a write in progress is abandoned. Does not wait: the thread ends
 * on its own, sonde__fwriter_reap then frees it. */
void sonde__fwriter_cancel(struct fwriter *w);
/* After sonde__fwriter_cancel: true (the writer is freed, its fd closed) once its thread ended,
 * false while it has not (a write the kernel does not interrupt, e.g. on a FUSE mount
 * whose server ignores interrupts): try again later. */
bool sonde__fwriter_reap(struct fwriter *w);
/* Blocking, for shutdown only: waits up to timeout_ms in all for the queue to be written
 * out and the thread to end after a cancel. True when the writer is freed; false if its
 * thread still runs (it is left to the process's exit). NULL is fine. */
bool sonde__fwriter_free(struct fwriter *w, int timeout_ms);

#endif
