/* rmq-server: a RocketMQ-compatible NameServer and broker. See l_server.c. */
#include "lua/l_server.h"

int
main(int argc, char **argv)
{
    return server_main(argc, argv);
}
