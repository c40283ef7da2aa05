-- rmq gRPC proxy (cluster mode) configuration.
--
-- Start it with:
--
--     rmq-server conf/proxy.lua
--
-- A stateless RocketMQ 5 proxy, as 5.x's proxy in cluster mode: it serves
-- RocketMQ 5's gRPC API (apache.rocketmq.v2.MessagingService, what every
-- rocketmq-clients SDK speaks) on grpcServerPort and reaches the brokers
-- over remoting, finding them from the NameServers.  It keeps no messages:
-- only caches (topic routes and configs, consumer group configs, pooled
-- broker connections) and, as 5.x's proxy, the transactions it may end
-- (a restart forgets them: the brokers' checks then ask the producers), so
-- run as many as you like behind one address.  It fronts rmq brokers and
-- Java RocketMQ brokers alike.
--
-- Point a 5.x SDK at it:
--
--     const producer = new Producer({ endpoints: '127.0.0.1:8081' });
--
-- Keys a proxy does not use are refused (`rmq-server -t conf/proxy.lua`
-- checks the file).  See docs/grpc.md, "Cluster mode".

return {
    role = "proxy",

    -- The NameServers the brokers register with ("host:port;host:port").
    namesrvAddr = "127.0.0.1:9876",

    -- The gRPC port (5.x proxy's key and default).
    grpcServerPort = 8081,

    -- Routes are fetched again after this long (the old one serves
    -- meanwhile) and dropped when unused this long (5.x's keys).
    topicRouteServiceCacheRefreshSeconds = 20,
    topicRouteServiceCacheExpiredSeconds = 20,
    topicRouteServiceCacheMaxNum = 20000,
    -- A topic's config (its message.type, checked on sends) is asked
    -- from one of its brokers again after this long (5.x's key).
    topicConfigCacheRefreshSeconds = 20,
    -- A consumer group's config (consumeMessageOrderly: orderly POPs,
    -- the Settings' fifo) likewise, in a cache of its own (5.x's keys).
    subscriptionGroupConfigCacheRefreshSeconds = 20,
    subscriptionGroupConfigCacheExpiredSeconds = 300,
    subscriptionGroupConfigCacheMaxNum = 20000,

    -- Per worker: remoting connections to brokers/NameServers, requests
    -- waiting for a route, and how long a broker may take to answer.
    proxyMaxBrokerConnections = 256,
    proxyMaxWaitingRequests = 65536,
    proxyBrokerCallTimeoutMillis = 10000,

    -- EndTransaction as 5.x's proxy takes it: only a transaction this
    -- proxy sent (or relayed a broker's check of), once, within this long
    -- (5.x's keys); at most this many kept per worker (the oldest goes).
    transactionDataExpireMillis = 30000,
    transactionDataMaxNum = 15,
    proxyMaxTransactionData = 65536,

    -- A ReceiveMessage's invisible duration is at least this (5.x's key).
    minInvisibleTimeMillsForRecv = 10000,
}
