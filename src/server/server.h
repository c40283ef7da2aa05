/*
 * server: the rmq-server process: arguments, the conf (through the Lua
 * module rmq.server), listening sockets, worker threads, the READY line,
 * signals and orderly shutdown.
 */
#ifndef RMQ_SERVER_H
#define RMQ_SERVER_H

/** Runs rmq-server; returns the process exit code. */
int server_main(int argc, char **argv);

#endif
