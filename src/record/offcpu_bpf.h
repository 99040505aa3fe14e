/* The BPF off-CPU backend (offcpu_bpf.c, bpf/offcpu.bpf.c): the scheduler switches are
 * tracked in the kernel, and only the waits at or above the threshold come out, through a
 * BPF ring buffer, as records the recorder orders with the perf records and writes as the
 * perf_event backend's intervals are written (docs/record.md, "Off-CPU backends").
 * Internal. Without libbpf at build time every function says the backend is not built. */
#ifndef SONDE_RECORD_OFFCPU_BPF_H
#define SONDE_RECORD_OFFCPU_BPF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <sonde/record.h>
#include <sonde/spool.h>

struct sonde_recorder;
struct rec_offcpu_bpf;
struct perf_rec;

/* Whether libsonde was built with the BPF backend. */
bool sonde__rec_offcpu_bpf_built(void);
/* Chooses the off-CPU backend for opts (off_cpu set): 1 BPF (loaded and attached, waiting
 * for targets unless system-wide), 0 perf_event, -errno when BPF was forced and refused
 * (logged). The summary's offcpu_backend and offcpu_backend_why are set. */
int sonde__rec_offcpu_bpf_choose(struct sonde_recorder *r, const struct sonde_record_opts *o);
/* Records process pid (from its exec when on_exec). 0 or -errno. */
int sonde__rec_offcpu_bpf_target(struct sonde_recorder *r, pid_t pid, bool on_exec);
/* Records thread tid alone (-t). 0 or -errno. */
int sonde__rec_offcpu_bpf_thread(struct sonde_recorder *r, pid_t tid);
/* The recording is enabled: with -a the programs track nothing before. */
void sonde__rec_offcpu_bpf_arm(struct sonde_recorder *r);
/* Moves the waits in the ring buffer into the recorder's perf stream. 0 or -errno. */
int sonde__rec_offcpu_bpf_drain(struct sonde_recorder *r);
/* An event popped from the stream: 1 when it is a wait of this backend (handled, errors
 * kept in the recorder), 0 when it is a perf record. */
int sonde__rec_offcpu_bpf_record(struct sonde_recorder *r, const struct perf_rec *rec);
/* Whether ev (an epoll event of the recorder's set) is the ring buffer's. */
bool sonde__rec_offcpu_bpf_is_ring(uint64_t ev_data);
/* Detaches the programs: no wait is recorded after this. */
void sonde__rec_offcpu_bpf_stop(struct sonde_recorder *r);
/* After the final drain: the waits still open are written (open), the short waits'
 * totals, and the counters into the summary. 0 or the first error. */
int sonde__rec_offcpu_bpf_finish(struct sonde_recorder *r);
/* Detaches and frees everything (NULL state is fine). */
void sonde__rec_offcpu_bpf_free(struct sonde_recorder *r);
/* Whether the program on sys_exit is attached: only once a recorded thread without a
 * restartable sequence blocked in a system call (a drain attaches it). */
bool sonde__rec_offcpu_bpf_sys_exit_attached(const struct sonde_recorder *r);
/* The processes the programs track by pid (not with -a over every process): those alive
 * of the targets and their descendants. */
size_t sonde__rec_offcpu_bpf_targets(const struct sonde_recorder *r);

/* Each CPU's switch sequence (SWITCHES spool records), kept by offcpu.c for both backends.
 * Whether the recording keeps it: -a over every process (a recording limited to some
 * processes must not name the others' tasks). */
bool sonde__rec_offcpu_keeps_switches(const struct sonde_recorder *r);
/* Announces the sequence (an empty run per CPU) before the first interval is written, so
 * that readers take the switches from it. 0 or -errno. */
int sonde__rec_offcpu_switches_begin(struct sonde_recorder *r);
/* A switch of cpu at `time`: prev leaves in prev_state (a SONDE_OFFCPU_* state or
 * SONDE_SWITCH_EXITED), next comes in (0: the idle task). A CPU's switches come in time
 * order. 0 or -errno. */
int sonde__rec_offcpu_switch_seen(struct sonde_recorder *r, uint32_t cpu, uint64_t time,
				  uint32_t prev, uint32_t next, uint32_t prev_state);
/* Writes iv, an interval whose stack is r->frames[0, n), as an OFFCPU record or, when
 * unknown, an UNKNOWN one, and counts it; one with a frame in a module retired meanwhile is
 * dropped (counted). 0 or the recorder's error. */
int sonde__rec_offcpu_put(struct sonde_recorder *r, const struct sonde_spool_offcpu *iv, size_t n,
			  bool unknown, pid_t tid);
/* Switches of cpu were lost: the run so far is written, the next starts after a gap. */
void sonde__rec_offcpu_switches_gap(struct sonde_recorder *r, uint32_t cpu);

#endif
