/*
 * sd_notify: systemd's readiness protocol, the few lines of it rmq needs
 * (no libsystemd): one datagram of "KEY=VALUE\n" lines to the unix
 * socket named by $NOTIFY_SOCKET (a path, or "@name" for the abstract
 * namespace).  Type=notify units wait for READY=1; without the variable
 * (not under systemd) nothing is sent.
 */
#ifndef RMQ_SD_NOTIFY_H
#define RMQ_SD_NOTIFY_H

/**
 * Sends `state` ("READY=1\nSTATUS=...") to $NOTIFY_SOCKET.  Returns 1
 * when sent, 0 when there is no $NOTIFY_SOCKET, -1 with err_set() when
 * it is malformed or the send fails.
 */
int sd_notify_send(const char *state);

#endif
