/* rmq-server: a RocketMQ-compatible NameServer and broker. See server/server.c. */
#include "server/server.h"

int
main(int argc, char **argv)
{
    return server_main(argc, argv);
}
