/* upstream_route_parse: a NameServer's TopicRouteData as the proxy's
 * brokers; upstream_topic_type_parse: a broker's TopicConfig as the
 * topic's message.type; upstream_group_parse: a broker's
 * SubscriptionGroupConfig as what a consumer's Settings take from it
 * (grpc/upstream.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "broker/subscription_group.h"
#include "broker/topic_config.h"
#include "grpc/upstream.h"

#define U8(s) ((const uint8_t *)(s))

static int
parse(const char *s, struct upstream_route *rt)
{
    return upstream_route_parse(U8(s), strlen(s), rt);
}

/* fastjson's own shape: bare integer keys in brokerAddrs, queueDatas
 * before or after brokerDatas, unknown keys skipped. */
static void
fastjson_body(void **state)
{
    (void)state;
    static struct upstream_route rt;
    const char *s =
        "{\"brokerDatas\":[{\"brokerAddrs\":{0:\"127.0.0.1:10911\",1:\"127.0.0.1:10921\"},"
        "\"brokerName\":\"b1\",\"cluster\":\"c\",\"enableActingMaster\":false},"
        "{\"brokerAddrs\":{\"0\":\"127.0.0.2:10911\"},\"brokerName\":\"b2\",\"cluster\":\"c\"}],"
        "\"filterServerTable\":{},\"queueDatas\":[{\"brokerName\":\"b1\",\"perm\":6,\"readQueueNums\":4,"
        "\"topicSysFlag\":0,\"writeQueueNums\":8},{\"brokerName\":\"b2\",\"perm\":4,\"readQueueNums\":2,"
        "\"topicSysFlag\":0,\"writeQueueNums\":0}]}";
    assert_int_equal(parse(s, &rt), 0);
    assert_int_equal(rt.n, 2);
    assert_string_equal(rt.b[0].name, "b1");
    assert_string_equal(rt.b[0].addr, "127.0.0.1:10911");
    assert_int_equal(rt.b[0].perm, 6);
    assert_int_equal(rt.b[0].read_queues, 4);
    assert_int_equal(rt.b[0].write_queues, 8);
    assert_string_equal(rt.b[1].name, "b2");
    assert_string_equal(rt.b[1].addr, "127.0.0.2:10911");
    assert_int_equal(rt.b[1].perm, 4);
    assert_int_equal(rt.b[1].write_queues, 0);

    s = "{\"queueDatas\":[{\"brokerName\":\"x\",\"perm\":6,\"readQueueNums\":1,\"writeQueueNums\":1}],"
        "\"brokerDatas\":[{\"brokerName\":\"x\",\"brokerAddrs\":{0:\"h:1\"}}]}";
    assert_int_equal(parse(s, &rt), 0);
    assert_int_equal(rt.n, 1);
    assert_int_equal(rt.b[0].read_queues, 1);
}

/* A broker without a master (brokerId 0) takes no requests: left out;
 * a broker without queue data has no queues of the topic. */
static void
no_master_no_queues(void **state)
{
    (void)state;
    static struct upstream_route rt;
    const char *s = "{\"brokerDatas\":[{\"brokerName\":\"s\",\"brokerAddrs\":{1:\"h:2\"}},"
                    "{\"brokerName\":\"m\",\"brokerAddrs\":{0:\"h:1\"}}],\"queueDatas\":[]}";
    assert_int_equal(parse(s, &rt), 0);
    assert_int_equal(rt.n, 1);
    assert_string_equal(rt.b[0].name, "m");
    assert_int_equal(rt.b[0].read_queues, 0);
    assert_int_equal(rt.b[0].write_queues, 0);
    assert_int_equal(parse("{}", &rt), 0);
    assert_int_equal(rt.n, 0);
}

/* Whatever a peer sends: -1, never a read past the end. */
static void
malformed(void **state)
{
    (void)state;
    static struct upstream_route rt;
    const char *bad[] = {
        "", "[", "{", "{\"brokerDatas\":", "{\"brokerDatas\":[{\"brokerName\":1}]}",
        "{\"brokerDatas\":[{\"brokerAddrs\":{0:5}}]}", "{\"queueDatas\":[{\"perm\":\"6\"}]}",
        "{\"queueDatas\":[{\"perm\":99999999999}]}", "{\"brokerDatas\":[],}", "{\"a\":[1,2,}",
        "{\"brokerDatas\":[{\"brokerName\":\"unterminated}]}", "nope",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(parse(bad[i], &rt), -1);
    /* Every prefix of a good body fails cleanly too. */
    const char *good = "{\"brokerDatas\":[{\"brokerAddrs\":{0:\"h:1\"},\"brokerName\":\"b\"}],"
                       "\"queueDatas\":[{\"brokerName\":\"b\",\"perm\":6,\"readQueueNums\":4,\"writeQueueNums\":4}]}";
    for (size_t n = 0; n < strlen(good); n++)
        assert_int_equal(upstream_route_parse(U8(good), n, &rt), -1);
    assert_int_equal(parse(good, &rt), 0);
}

/* More brokers than UPSTREAM_MAX_BROKERS: the first ones kept. */
static void
too_many_brokers(void **state)
{
    (void)state;
    static struct upstream_route rt;
    static char body[65536];
    size_t o = (size_t)snprintf(body, sizeof(body), "{\"brokerDatas\":[");
    for (int i = 0; i < UPSTREAM_MAX_BROKERS + 10; i++)
        o += (size_t)snprintf(body + o, sizeof(body) - o, "%s{\"brokerName\":\"b%d\",\"brokerAddrs\":{0:\"h:%d\"}}",
                              i > 0 ? "," : "", i, i + 1);
    snprintf(body + o, sizeof(body) - o, "]}");
    assert_int_equal(parse(body, &rt), 0);
    assert_int_equal(rt.n, UPSTREAM_MAX_BROKERS);
    assert_string_equal(rt.b[0].name, "b0");
}

static int
type_of(const char *s)
{
    return upstream_topic_type_parse(U8(s), strlen(s));
}

/* GET_TOPIC_CONFIG's body: 5.x writes attributes without the "+" they
 * were altered with; a topic without the attribute has none (0). */
static void
topic_types(void **state)
{
    (void)state;
    assert_int_equal(type_of("{\"topicName\":\"T\",\"readQueueNums\":4,\"attributes\":{\"message.type\":\"FIFO\"},"
                             "\"order\":false,\"mappingDetail\":null}"), TOPIC_MSG_FIFO);
    assert_int_equal(type_of("{\"attributes\":{\"queue.type\":\"SimpleCQ\",\"+message.type\":\"TRANSACTION\"}}"),
                     TOPIC_MSG_TRANSACTION);
    assert_int_equal(type_of("{\"topicName\":\"T\",\"attributes\":{}}"), 0);
    assert_int_equal(type_of("{\"topicName\":\"T\"}"), 0);
    assert_int_equal(type_of("{\"topicName\":\"message.type\",\"x\":{\"message.type\":\"FIFO\"}}"), 0);
    assert_int_equal(type_of("{\"attributes\":{\"message.type\":\"SOMETHING\"}}"), 0);
    const char *good = "{\"topicName\":\"T\",\"attributes\":{\"message.type\":\"NORMAL\"},\"perm\":6}";
    for (size_t n = 0; n < strlen(good); n++)
        assert_int_equal(upstream_topic_type_parse(U8(good), n), -1);
    assert_int_equal(type_of(good), TOPIC_MSG_NORMAL);
    assert_int_equal(type_of("{\"attributes\":{\"message.type\":5}}"), -1);
    assert_int_equal(type_of("[]"), -1);
}

/* GET_SUBSCRIPTIONGROUP_CONFIG's body: what a consumer's Settings take. */
static void
group_config(void **state)
{
    (void)state;
    struct subscription_group g;
    const char *good = "{\"brokerId\":0,\"consumeMessageOrderly\":true,\"groupName\":\"G\",\"groupRetryPolicy\":"
                       "{\"customizedRetryPolicy\":{\"next\":[1000,2500,60000]},\"type\":\"CUSTOMIZED\"},"
                       "\"retryMaxTimes\":4,\"retryQueueNums\":1}";
    assert_int_equal(upstream_group_parse(U8(good), strlen(good), &g), 0);
    assert_true(g.v5);
    assert_true(g.consume_message_orderly);
    assert_int_equal(g.retry_max_times, 4);
    assert_int_equal(g.retry.type, GROUP_RETRY_CUSTOMIZED);
    assert_true(g.retry.has_customized);
    assert_int_equal(g.retry.next_count, 3);
    assert_int_equal(g.retry.next[2], 60000);
    for (size_t n = 0; n < strlen(good); n++)
        assert_int_equal(upstream_group_parse(U8(good), n, &g), -1);
    const char *exp = "{\"groupRetryPolicy\":{\"type\":\"EXPONENTIAL\",\"exponentialRetryPolicy\":"
                      "{\"initial\":500,\"max\":30000,\"multiplier\":4}},\"consumeMessageOrderly\":false}";
    assert_int_equal(upstream_group_parse(U8(exp), strlen(exp), &g), 0);
    assert_true(g.v5);
    assert_false(g.consume_message_orderly);
    assert_int_equal(g.retry_max_times, 16);
    assert_int_equal(g.retry.type, GROUP_RETRY_EXPONENTIAL);
    assert_true(g.retry.has_exponential);
    assert_int_equal(g.retry.initial, 500);
    assert_int_equal(g.retry.max, 30000);
    assert_int_equal(g.retry.multiplier, 4);
    /* A 4.x group: none of the 5.x fields, v5 not set. */
    const char *old = "{\"groupName\":\"consumeMessageOrderly\",\"retryMaxTimes\":3}";
    assert_int_equal(upstream_group_parse(U8(old), strlen(old), &g), 0);
    assert_false(g.v5);
    assert_int_equal(g.retry_max_times, 3);
    const char *bad[] = { "{\"consumeMessageOrderly\":\"true\"x}", "{\"consumeMessageOrderly\":1}",
                          "{\"retryMaxTimes\":99999999999}", "{\"groupRetryPolicy\":{\"customizedRetryPolicy\":"
                          "{\"next\":[1,\"2\"]}}}", "[]" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(upstream_group_parse(U8(bad[i]), strlen(bad[i]), &g), -1);
    /* More levels than a record keeps: the first ones. */
    static char many[4096];
    size_t o = (size_t)snprintf(many, sizeof(many), "{\"groupRetryPolicy\":{\"customizedRetryPolicy\":{\"next\":[");
    for (int i = 0; i < GROUP_RETRY_NEXT_MAX + 5; i++)
        o += (size_t)snprintf(many + o, sizeof(many) - o, "%s%d", i > 0 ? "," : "", 1000 + i);
    snprintf(many + o, sizeof(many) - o, "]}}}");
    assert_int_equal(upstream_group_parse(U8(many), strlen(many), &g), 0);
    assert_int_equal(g.retry.next_count, GROUP_RETRY_NEXT_MAX);
    assert_int_equal(g.retry.next[0], 1000);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fastjson_body),
        cmocka_unit_test(no_master_no_queues),
        cmocka_unit_test(malformed),
        cmocka_unit_test(too_many_brokers),
        cmocka_unit_test(topic_types),
        cmocka_unit_test(group_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
