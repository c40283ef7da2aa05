/* rmq-server: a RocketMQ-compatible NameServer and broker. See server/server.c. */
#include "server/server.h"

#ifdef RMQ_JEMALLOC
/* jemalloc reads its options from this symbol: unused dirty pages go back
 * to the system after 1 s, from its own background thread, so memory a
 * flood made the server allocate is returned once it is freed
 * (docs/memory.md).  MALLOC_CONF in the environment still overrides. */
extern const char *malloc_conf;
const char *malloc_conf = "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0";
#endif

int
main(int argc, char **argv)
{
    return server_main(argc, argv);
}
