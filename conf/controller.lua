-- A RocketMQ 5 controller whose state lives in etcd (docs/controller.md).
-- Start several on the same etcd for failover: one is active at a time.
return {
    role = "controller",
    listenPort = 19876,
    etcdEndpoints = "http://127.0.0.1:2379",
}
