/*
 * timer: timer messages (RocketMQ 5's RIP-43): a message sent with
 * TIMER_DELIVER_MS, TIMER_DELAY_SEC or TIMER_DELAY_MS is held until its
 * time and then written to its real topic and queue.  docs/timer.md has
 * the design; in short:
 *
 * SEND.  timer_classify() is the one home of the send rule (5.x's
 * HookUtils.checkIfTimerMessage + transformTimerMessage): a send that
 * holds the message is stored in rmq_sys_wheel_timer queue 0 with
 * REAL_TOPIC, REAL_QID and TIMER_OUT_MS (the delivery time rounded down
 * to the precision, as 5.x), its consume queue tags code = TIMER_OUT_MS.
 * The commit log is the durable copy of every pending timer.
 *
 * WHEEL.  The service reads that consume queue in order and appends one
 * 32-byte unit per timer to its own log (STORE/timer/log/<offset>
 * files): {bucket ms, commit log offset, size, magic, previous unit of
 * the same slot}.  In memory there is one int64 per slot of a timing
 * wheel (the position of the slot's last unit; units chain backwards on
 * disk), nslots = 2 * timerMaxDelaySec / precision: memory is flat in
 * the number of pending timers.  The wheel is rebuilt from the log at
 * open, so it is never written.
 *
 * DELIVERY.  Bucket b holds the times t with b < t <= b + precision
 * (TIMER_OUT_MS = b); it is delivered once the clock reaches
 * b + precision: never early, at most one precision (plus a tick) late,
 * newest first within the bucket (the chain's order).  A delivered
 * message carries __RMQ_TIMER_SRC = the commit log offset of its timer
 * record.  A recall record (TIMER_DEL_UNIQKEY) in the bucket is met
 * before the message it names, which is then not delivered.
 *
 * DURABILITY.  STORE/timer/checkpoint holds (consume queue offset read,
 * next bucket, the position inside the bucket being delivered, the log's
 * end, the commit log's end) written every timerFlushIntervalMs after
 * an fdatasync of the log.  After a crash the log is cut back to the
 * checkpoint, the wheel rebuilt, the commit log read from the
 * checkpoint's end for records carrying __RMQ_TIMER_SRC (deliveries made
 * after the checkpoint), and those sources are skipped when the service
 * replays from the checkpoint: nothing lost, nothing delivered twice (a
 * marker counts only when the body and born time match the timer
 * record; until the replay passes the crash point, checkpoints keep the
 * old scan start, for a second crash).
 *
 * MT: a timer service runs on one thread (the broker's main thread
 * calls timer_tick); timer_classify and timer_now_ms are pure, any
 * thread; the counters in struct store are atomics any thread reads.
 */
#ifndef RMQ_TIMER_H
#define RMQ_TIMER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

struct store;

#define TIMER_TOPIC "rmq_sys_wheel_timer"   /* TimerMessageStore.TIMER_TOPIC */
#define TIMER_SRC_KEY "__RMQ_TIMER_SRC"      /* rmq: the delivered marker */

/** The timer clock: wall ms plus the timer_clock_ms injection (tests). */
int64_t timer_now_ms(void);

/** timerPrecisionMs as 5.x's setter snaps it (100, 200, 500 or 1000). */
int timer_precision_snap(int64_t ms);

enum timer_class {
    TIMER_PLAIN = 0,        /* not a timer message (or due: store it as is) */
    TIMER_HOLD,             /* hold it: *bucket is its TIMER_OUT_MS */
    TIMER_ILLEGAL,          /* MESSAGE_ILLEGAL, remark in why */
    TIMER_DISABLED,         /* timerWheelEnable is false: SYSTEM_ERROR, why */
};

/**
 * The send rule for a message's properties p (n bytes) at time now:
 * TIMER_DELAY_SEC, else TIMER_DELAY_MS, else TIMER_DELIVER_MS decide the
 * delivery time (Java's Long.parseLong; a value that does not parse is
 * illegal); a time in the future more than max_delay_ms away is
 * illegal; a time not in the future is PLAIN (delivered at once), unless
 * TIMER_DEL_UNIQKEY is set (illegal).  A message with TIMER_OUT_MS (one
 * the wheel delivered) or a DELAY level is PLAIN.  why (n >= 64) names
 * the field.
 */
int timer_classify(const char *p, size_t n, bool enable, int64_t max_delay_ms,
                   int precision_ms, int64_t now, int64_t *bucket, char *why,
                   size_t whyn);

/**
 * Writes p with what the timer topic's copy carries added: TIMER_OUT_MS
 * = bucket, REAL_TOPIC, REAL_QID (replacing any the producer set).
 * Returns 0 or -ENOMEM / -EINVAL.
 */
int timer_hold_props(struct buf *out, const char *p, size_t n, int64_t bucket,
                     const char *topic, size_t tlen, int32_t qid);

/**
 * 5.x's recall handle for a held message (RecallMessageHandle.HandleV1):
 * base64url("v1 TOPIC BROKER TIMER_OUT_MS+1 UNIQ_KEY"), appended to out.
 * Returns 0, -EINVAL (too long) or -ENOMEM.
 */
int timer_recall_handle(struct buf *out, const char *topic, size_t tlen, const char *broker,
                        size_t blen, int64_t bucket, const char *uniq, size_t ulen);

/**
 * The consume queue tags code of a timer-topic record: its TIMER_OUT_MS
 * (what the send rule stored it with; recovery and a slave's dispatch
 * rebuild entries with it).  Returns 0, or -1 (no valid TIMER_OUT_MS:
 * *tags untouched).
 */
int timer_tags_of(const char *p, size_t n, int64_t *tags);

struct timer_store;

/**
 * Opens the timer service of store s (its files in STORE/timer), with
 * s->conf's timer settings, recovering as the header says.  Returns the
 * service or NULL with err_set().  Takes a store reference.
 */
struct timer_store *timer_open(struct store *s, const char *root);

/** One service step at the timer clock `now`: reads new timer records,
 *  delivers what is due, checkpoints when timerFlushIntervalMs passed.
 *  Does at most `budget` units of work.  The real queues written to are
 *  appended to wake as "topic@qid\n" lines (each at most once per
 *  call).  Returns 1 when work is left (call again soon), 0 when idle,
 *  -1 on a failure that will be retried (logged). */
int timer_tick(struct timer_store *t, int64_t now, int budget, struct buf *wake);

/** Figures for stats (this run): see struct timer_counters; plus. */
struct timer_info {
    int64_t pending, enqueued, delivered, dropped, skipped_redelivery;
    int64_t cursor;             /* next bucket to deliver (ms) */
    int64_t enq_offset;         /* timer topic offset read up to */
    int64_t log_end;            /* bytes of timer log written */
    int64_t log_files;
    int64_t slots;
    int64_t recovered_seen;     /* deliveries found after the checkpoint */
    int64_t recalled;           /* not delivered: recalled (RECALL_MESSAGE) */
};
void timer_info(struct timer_store *t, struct timer_info *out);

/** Writes a final checkpoint (fsync'd), closes the files, drops the
 *  store reference. */
void timer_close(struct timer_store *t);

/**
 * Removes a closed timer service's files under ROOT/timer (checkpoint and
 * log segments): a master demoted to a slave drops its timer state, as
 * its commit log may be cut back to the new master's and the timers are
 * the new master's to deliver.  The next timer_open on this store then
 * rebuilds from the commit log (the timer topic's queue, and a scan for
 * deliveries already made), as a slave promoted does.  Returns 0 or -1
 * (err_set).
 */
int timer_discard(const char *root);

#endif
