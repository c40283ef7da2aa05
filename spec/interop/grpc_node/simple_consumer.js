// RocketMQ 5's Node.js SimpleConsumer against rmq's gRPC port.  Its
// startup (QueryRoute, Telemetry with its subscription settings,
// Heartbeat) always works.  Receiving rides on the broker's POP: on a
// broker without it, receive() must fail with a clean UNIMPLEMENTED error
// ({unimplemented: ...}); with it, messages sent after the first receive
// (which fixes the new group's offset at the empty queue's start) are
// received, one lease extended
// (ChangeInvisibleDuration), all acknowledged, and one left
// unacknowledged comes back after its invisible duration with
// deliveryAttempt 2.  One JSON line at the end.
//   ENDPOINT=host:port TOPIC=... GROUP=... COUNT=...
'use strict';
const { SimpleConsumer, Producer } = require('rocketmq-client-nodejs');

const quiet = { info() {}, warn() {}, debug() {}, error() {} };
const topic = process.env.TOPIC;
const count = Number(process.env.COUNT || 8);

async function main() {
  const c = new SimpleConsumer({
    endpoints: process.env.ENDPOINT, consumerGroup: process.env.GROUP, logger: quiet,
    subscriptions: new Map([[topic, '*']]), awaitDuration: 2000, requestTimeout: 5000,
  });
  const t0 = Date.now();
  await c.startup();
  const startupMs = Date.now() - t0;
  try {
    await c.receive(16, 30000);
  } catch (e) {
    const msg = String(e && e.message || e).slice(0, 300);
    await c.shutdown();
    console.log(JSON.stringify({ startupMs, unimplemented: msg }));
    return;
  }
  const p = new Producer({ endpoints: process.env.ENDPOINT, topics: [topic], logger: quiet });
  await p.startup();
  const sent = [];
  for (let i = 0; i < count; i++) {
    const r = await p.send({ topic, tag: 'Simple', keys: [`s-${i}`], body: Buffer.from(`simple-${i}`),
                             properties: new Map([['n', String(i)]]) });
    sent.push(r.messageId);
  }
  const received = [];
  let changed = null, acked = 0;
  const deadline = Date.now() + 30000;
  while (received.length < count && Date.now() < deadline) {
    for (const m of await c.receive(16, 30000)) {
      received.push({ messageId: m.messageId, body: m.body.toString(), tag: m.tag, keys: m.keys,
                      n: m.properties.get('n'), attempt: m.deliveryAttempt, topic: m.topic });
      if (changed === null) {
        const before = m.receiptHandle;
        await c.changeInvisibleDuration(m, 20000);
        changed = { differs: before !== m.receiptHandle };
      }
      await c.ack(m);
      acked++;
    }
  }
  // One more, never acknowledged: back after its 10 s invisible duration
  // (the shortest a server takes: 5.x's minInvisibleTimeMillsForRecv).
  const r = await p.send({ topic, tag: 'Again', body: Buffer.from('again') });
  let first = null, second = null;
  const until = Date.now() + 50000;
  while (second === null && Date.now() < until) {
    for (const m of await c.receive(1, first === null ? 10000 : 30000)) {
      if (m.messageId !== r.messageId)
        continue;
      if (first === null) {
        first = m.deliveryAttempt;
      } else {
        second = m.deliveryAttempt;
        await c.ack(m);
      }
    }
  }
  await p.shutdown();
  await c.shutdown();
  console.log(JSON.stringify({ startupMs, sent, received, changed, acked, redelivery: { first, second } }));
}

main().then(() => process.exit(0), (e) => {
  console.error('FAILED', e && e.stack || e);
  console.log(JSON.stringify({ error: String(e && e.message || e) }));
  process.exit(1);
});
