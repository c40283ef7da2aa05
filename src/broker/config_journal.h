/*
 * config_journal: the one writer of a config table's file and journal
 * (STORE/config/topics.json, subscriptionGroup.json and their
 * PATH.journal; the format and the replay are lua/rmq/configfile.lua's).
 *
 * Two kinds of thread write: the main thread's persister (a change made
 * by admin, a slave's sync, a DataVersion bump; the rewrite of the whole
 * file) and a worker that auto-created a topic or a group a client
 * relies on before its answer leaves (a send's topic, a heartbeat's
 * group and retry topic, a send back's retry/DLQ topic: RocketMQ 4.9.8
 * writes the file there, inside createTopicInSendMessageMethod and
 * findSubscriptionGroupConfig, before the reply).  Both go through this
 * module: an append takes the journal's lock, encodes what changed since
 * the last append (config_table_snapshot since a generation: what
 * changed, not the table) and writes it with one write(2) of whole lines
 * (O_APPEND); a failed or short write is cut off again (ftruncate), so
 * the file only ever ends in whole batches or, after a SIGKILL inside
 * the write, one torn batch that the replay ignores.  An append does no
 * fsync: the page cache survives a SIGKILL (as 4.9.8's
 * MixAll.string2File, which never syncs); the main thread's next save
 * (at once when asked, at most a second later) fdatasyncs the journal,
 * and a rewrite is temp file + fsync + rename (store_write_file_atomic).
 *
 * The rewrite encodes the table outside the lock and writes it outside
 * the lock too: a worker's append meanwhile goes to the journal, which
 * is then kept (its older batches are skipped at replay: their
 * DataVersion is not newer than the file's).
 *
 * MT: every function from any thread; config_journal_save from one
 * thread at a time (the main thread).
 */
#ifndef RMQ_CONFIG_JOURNAL_H
#define RMQ_CONFIG_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "broker/config_table.h"

struct buf;

/* How a table's records are written: one JSON object per record (a
 * journal line, without its "\n") and the whole file. */
struct config_journal_codec {
    int (*line)(struct buf *out, const char *name, size_t len, const void *rec);
    config_encode_fn *whole;
    void *arg;                 /* given to whole */
};

struct config_journal;

/** A journal for table t (not opened: appends do nothing); NULL on ENOMEM. */
struct config_journal *config_journal_new(struct config_table *t);

/** The journals of config_table_topics() and config_table_groups() (made on first use). */
struct config_journal *config_journal_topics(void);
struct config_journal *config_journal_groups(void);

void config_journal_free(struct config_journal *j);

/**
 * Sets the file (its journal is path + ".journal") after a load: the
 * table holds what the file and the journal's first `valid` bytes hold
 * (anything after them, a torn batch, is cut off), so appends may go on
 * from here; the next config_journal_save rewrites the file.  Returns 0
 * or -errno (err_set).
 */
int config_journal_open(struct config_journal *j, const char *path, int64_t valid);

/**
 * Appends what changed since the last append or rewrite (nothing when
 * nothing did, or no file is set).  *gen (may be NULL): the table
 * generation the file and journal now hold.  Returns 0, or -errno
 * (err_set; the journal is as it was).
 */
int config_journal_append(struct config_journal *j, const struct config_journal_codec *c,
                          uint64_t *gen);

/**
 * The main thread's save to path: the whole file rewritten (force, the
 * first save after a load, a removal since the last rewrite, or a
 * journal over max(256, entries / 8) lines) and the journal dropped, or
 * an append; then an fdatasync of what appends left unsynced (and of the
 * directory for a new journal).  *gen: the generation on disk.  Returns
 * 0 or -errno (err_set).
 */
int config_journal_save(struct config_journal *j, const char *path, bool force,
                        const struct config_journal_codec *c, uint64_t *gen);

/** Records the table as it is now as on disk (a load that needs no rewrite). */
void config_journal_mark(struct config_journal *j);

#endif
