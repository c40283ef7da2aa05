// gRPC SendMessage load for scripts/bench/grpc.lua: CONNECTIONS grpc-js
// channels, CONCURRENCY calls in flight in all, SIZE-byte bodies, for
// SECONDS.  The request is serialized once (raw bytes per call), so the
// client spends its CPU on HTTP/2, not on protobuf.  Prints one JSON
// line: ok, failed, tps, avg_ms, p99_ms.
//   ENDPOINT=host:port TOPIC=... SIZE=1024 CONCURRENCY=64 CONNECTIONS=4 SECONDS=10
'use strict';
const grpc = require('@grpc/grpc-js');
const svc = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/service_pb');
const def = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

const env = process.env;
const size = Number(env.SIZE || 1024), conc = Number(env.CONCURRENCY || 64);
const nconn = Number(env.CONNECTIONS || 4), seconds = Number(env.SECONDS || 10);

const m = new def.Message();
m.setTopic(new def.Resource().setName(env.TOPIC));
const sp = new def.SystemProperties();
sp.setMessageId('BENCH0000000000000000000000000000');
sp.setTag('Bench');
sp.setMessageType(def.MessageType.NORMAL);
sp.setQueueId(-1);
m.setSystemProperties(sp);
m.setBody(Buffer.alloc(size, 0x61));
const rq = new svc.SendMessageRequest();
rq.addMessages(m);
const bytes = Buffer.from(rq.serializeBinary());

const ident = (x) => x;
const Ctor = grpc.makeGenericClientConstructor({
  send: { path: '/apache.rocketmq.v2.MessagingService/SendMessage', requestStream: false,
          responseStream: false, requestSerialize: ident, requestDeserialize: ident,
          responseSerialize: ident, responseDeserialize: ident },
}, 'Bench');
const clients = [];
for (let i = 0; i < nconn; i++)
  clients.push(new Ctor(env.ENDPOINT, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 }));

let ok = 0, failed = 0, stop = false;
const lat = [];
const end = Date.now() + seconds * 1000;

function one(c) {
  if (stop || Date.now() >= end) return Promise.resolve();
  const t = process.hrtime.bigint();
  return new Promise((resolve) => {
    c.send(bytes, (e, r) => {
      const ms = Number(process.hrtime.bigint() - t) / 1e6;
      if (e || svc.SendMessageResponse.deserializeBinary(r).getStatus().getCode() !== def.Code.OK) {
        if (failed++ === 0) console.error(e ? e.message : svc.SendMessageResponse.deserializeBinary(r).getStatus().toObject());
      }
      else { ok++; if (lat.length < 1000000) lat.push(ms); }
      resolve();
    });
  }).then(() => one(c));
}

(async () => {
  const t0 = Date.now();
  const loops = [];
  for (let i = 0; i < conc; i++) loops.push(one(clients[i % nconn]));
  await Promise.all(loops);
  const el = (Date.now() - t0) / 1000;
  lat.sort((a, b) => a - b);
  const avg = lat.reduce((a, b) => a + b, 0) / Math.max(1, lat.length);
  console.log(JSON.stringify({ ok, failed, tps: ok / el, avg_ms: avg,
                               p99_ms: lat.length ? lat[Math.floor(lat.length * 0.99)] : 0 }));
  clients.forEach((c) => c.close());
  process.exit(0);
})();
