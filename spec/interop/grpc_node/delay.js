// RocketMQ 5's Node.js SDK: a message with a delivery timestamp DELAY_MS
// ahead, then receive with a SimpleConsumer of GROUP until it comes.  One
// JSON line: { sentAt, deliverAt, receivedAt, messageId, body } (times
// from this process's clock, the one the timestamp was set by).
//   ENDPOINT=host:port TOPIC=... GROUP=... DELAY_MS=...
'use strict';
const { SimpleConsumer, Producer } = require('rocketmq-client-nodejs');

const quiet = { info() {}, warn() {}, debug() {}, error() {} };
const topic = process.env.TOPIC;
const delay = Number(process.env.DELAY_MS || 4000);

async function main() {
  const c = new SimpleConsumer({
    endpoints: process.env.ENDPOINT, consumerGroup: process.env.GROUP, logger: quiet,
    subscriptions: new Map([[topic, '*']]), awaitDuration: 2000, requestTimeout: 5000,
  });
  await c.startup();
  await c.receive(16, 30000);   // a new group pops from the end: start it now
  const p = new Producer({ endpoints: process.env.ENDPOINT, topics: [topic], logger: quiet });
  await p.startup();
  const sentAt = Date.now();
  const deliverAt = sentAt + delay;
  const r = await p.send({ topic, tag: 'Later', body: Buffer.from('later'), deliveryTimestamp: new Date(deliverAt) });
  let got = null;
  const until = Date.now() + delay + 60000;
  while (got === null && Date.now() < until) {
    for (const m of await c.receive(16, 30000)) {
      await c.ack(m);
      if (m.messageId === r.messageId) got = { receivedAt: Date.now(), body: m.body.toString() };
    }
  }
  await p.shutdown();
  await c.shutdown();
  console.log(JSON.stringify({ sentAt, deliverAt, messageId: r.messageId, ...(got || {}) }));
}

main().then(() => process.exit(0), (e) => {
  console.error('FAILED', e && e.stack || e);
  console.log(JSON.stringify({ error: String(e && e.message || e) }));
  process.exit(1);
});
