/*
 * version: rmq's version and git revision, baked in at build time
 * (cmake/version.cmake): "1.2.3", "1.2.3+4.gREV" past a tag, "0.0.0+gREV"
 * before the first; the revision is git's short hash, "-dirty" when the
 * tree had uncommitted changes.
 */
#ifndef RMQ_VERSION_H
#define RMQ_VERSION_H

extern const char rmq_version[];
extern const char rmq_git_rev[];

#endif
