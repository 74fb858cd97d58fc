/* shmdone.h — answering a same-host session's ShmWrite once its queued device copy is done.
 *
 * Why: on a GPU session the region is pinned, so a ShmWrite is one DMA. Waiting for it on
 * the device worker means waiting for every kernel queued before it on the session's
 * stream: the worker then has nothing queued ahead when it goes on, the GPU idles while it
 * launches the next step, and a training loop over a unix socket ran up to 1.45x its local
 * time (BENCHMARKS.md, "H100 host, 2026-12-07 08:53"). Instead the worker queues the copy
 * (td__session_write_queued), hands its fence here and goes on; this session's own thread
 * waits for the fences in order and sends each ShmDone (or a Failure when the copy failed).
 * The client keeps a slot until its ShmDone, so the region bytes a copy reads stay put.
 *
 * A ShmWrite whose copy is already done when the worker returns from it (a CPU session, a
 * transfer too small to pin the region for, a copy the backend could not queue) is answered
 * from here as well, with an empty fence: a ShmDone sent by the worker took it into gRPC's
 * write path (grpc_call_start_batch) between one training step's ops and the next. On the
 * H100 host a b128 step's ShmWrite cost the worker 40-57 us that way and 23-31 us now, and
 * the same-host session's epochs at batch 128, 1.02-1.30x local before, are 0.82-1.12x
 * (BENCHMARKS.md, "H100 host, 2026-12-07 15:35"). TENSORD_SHM_DONE_INLINE=1 keeps the
 * worker's own answer (an A/B aid).
 *
 * One thread per session that has had a ShmWrite, started at the first one; a session's
 * fences never wait behind another session's. At most TD_SHM_DONE_MAX fences wait at once:
 * past that, td__shm_done_add waits for the oldest (a client that sends ShmWrites without
 * waiting for their answers only holds up its own worker turn, as any long job does).
 *
 * Reply order: replies keep request order (tensord.proto), so a later job's reply (a
 * FenceDone, a read, a Failure of a batch) must not overtake these answers: before it is
 * sent, td__ss_reply waits until this thread has answered everything handed to it
 * (td__shm_done_wait_answered). Jobs that send nothing (the op batches of a training step)
 * do not wait; reads and fences have waited for the stream, and so for these copies, anyway.
 *
 * Thread-safety: add, wait_answered and stop on the session's worker side (its jobs,
 * queue_closed); the thread answers through td__ss_reply (any thread).
 */
#ifndef TD_SERVER_SHMDONE_H
#define TD_SERVER_SHMDONE_H

#include "engine/session.h"

#include <stdint.h>

#define TD_SHM_DONE_MAX 64

struct td__srv_session;
typedef struct td__shm_done td__shm_done;

/* Answer seq (a ShmWrite of tensor `tensor`) once fence f has finished (at once for an empty
 * fence, handle NULL): ShmDone, or a Failure TD_EDEVICE naming the seq and tensor. Starts
 * the session's thread at the first call (*slot, NULL before, keeps it); when no thread or
 * memory can be had, finishes the fence here and answers at once. */
void td__shm_done_add(td__shm_done **slot, struct td__srv_session *ss, td__fence f,
                      uint64_t seq, uint64_t tensor);
/* Wait until every fence handed over so far has finished and been answered (NULL: at
 * once). */
void td__shm_done_wait_answered(td__shm_done *d);
/* Wait until every fence handed over has finished and been answered, then end the thread
 * and free *slot (NULL: nothing to do). Before the region is unpinned or unmapped. */
void td__shm_done_stop(td__shm_done **slot);
#endif
