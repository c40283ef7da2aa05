// RocketMQ 5's Node.js SDK against rmq's gRPC port with TLS (SSL=1:
// sslEnabled, the server's certificate trusted through grpc-js's
// GRPC_DEFAULT_SSL_ROOTS_FILE_PATH) and/or ACL (AK/SK: sessionCredentials, so every
// call carries 5.x's signed authorization header).  A Producer starts and
// sends to TOPIC; then (DENIED set) sends to a topic the account may not
// publish to; with GROUP set, a SimpleConsumer started first (a new
// group pops from the queue's end, as 5.x) receives what was sent and
// acknowledges it.  One JSON line: what worked, each error's text.
//   ENDPOINT=host:port TOPIC=... [SSL=1] [AK=... SK=...] [DENIED=topic] [GROUP=...]
'use strict';
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

const quiet = { info() {}, warn() {}, debug() {}, error() {} };
const topic = process.env.TOPIC;
const opts = { endpoints: process.env.ENDPOINT, logger: quiet, requestTimeout: 5000,
               sslEnabled: process.env.SSL === '1' };
if (process.env.AK) {
  opts.sessionCredentials = { accessKey: process.env.AK, accessSecret: process.env.SK };
}
const text = (e) => String(e && e.message || e).slice(0, 400);

// The SDK (1.0.8) leaves its Telemetry stream without an error handler:
// when shutdown() closes a channel of its own (over TLS, grpc-js does not
// share one connection between the producer's and the consumer's
// channels) before the server's trailers for that stream are read, the
// stream's "Connection dropped" is thrown as an unhandled 'error' event.
// Only that error, once a shutdown began, is not a failure (the
// receive and ack results are checked on their own).
let closing = false;
process.on('uncaughtException', (e) => {
  if (closing && e && e.code === 14) return;
  console.error('FAILED', e && e.stack || e);
  console.log(JSON.stringify({ error: text(e) }));
  process.exit(1);
});

async function main() {
  const out = {};
  let c = null;
  if (process.env.GROUP) {
    c = new SimpleConsumer({ ...opts, consumerGroup: process.env.GROUP,
                             subscriptions: new Map([[topic, '*']]), awaitDuration: 2000 });
    try {
      await c.startup();
      await c.receive(16, 30000);
    } catch (e) {
      out.consumerError = text(e);
      await c.shutdown();
      c = null;
    }
  }
  const topics = [topic];
  if (process.env.DENIED) topics.push(process.env.DENIED);
  const p = new Producer({ ...opts, topics });
  try {
    await p.startup();
    out.started = true;
  } catch (e) {
    out.startError = text(e);
    if (c) await c.shutdown();
    console.log(JSON.stringify(out));
    return;
  }
  try {
    const r = await p.send({ topic, tag: 'Sec', keys: ['sec-1'], body: Buffer.from('secure-1') });
    out.sent = r.messageId;
  } catch (e) {
    out.sendError = text(e);
  }
  if (process.env.DENIED) {
    try {
      await p.send({ topic: process.env.DENIED, body: Buffer.from('denied') });
      out.deniedSent = true;
    } catch (e) {
      out.deniedError = text(e);
    }
  }
  closing = true;   // from here on (the error may come after shutdown returns)
  await p.shutdown();
  if (c && out.sent) {
    const deadline = Date.now() + 30000;
    while (!out.received && Date.now() < deadline) {
      for (const m of await c.receive(16, 30000)) {
        if (m.messageId === out.sent) {
          out.received = m.body.toString();
          await c.ack(m);
          out.acked = true;
        }
      }
    }
  }
  if (c) await c.shutdown();
  console.log(JSON.stringify(out));
}

main().then(() => process.exit(0), (e) => {
  console.error('FAILED', e && e.stack || e);
  console.log(JSON.stringify({ error: text(e) }));
  process.exit(1);
});
