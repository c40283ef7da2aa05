// A SimpleConsumer of GROUP on a one-queue TOPIC, as 5.x's proxy serves
// a consumeMessageOrderly group: while a received message is leased
// (not acknowledged) the queue's next is not handed out; acknowledged,
// it is.  Without the flag the next comes at once.  One JSON line:
// {first, whileLeased, afterAck}: the bodies each receive(1) returned
// ('none': nothing within its time).
//   ENDPOINT=host:port TOPIC=... GROUP=...
'use strict';
const { SimpleConsumer, Producer } = require('rocketmq-client-nodejs');

const quiet = { info() {}, warn() {}, debug() {}, error() {} };
const topic = process.env.TOPIC;

async function receive1(c, until) {
  // Empty answers are normal (long polling ends): ask until one comes
  // or the deadline passes.
  while (Date.now() < until) {
    const got = await c.receive(1, 30000);
    if (got.length > 0) return got[0];
  }
  return null;
}

async function main() {
  const c = new SimpleConsumer({
    endpoints: process.env.ENDPOINT, consumerGroup: process.env.GROUP, logger: quiet,
    subscriptions: new Map([[topic, '*']]), awaitDuration: 2000, requestTimeout: 5000,
  });
  await c.startup();
  await c.receive(16, 30000);   // the new group's offset: the empty queue's start
  const p = new Producer({ endpoints: process.env.ENDPOINT, topics: [topic], logger: quiet });
  await p.startup();
  for (let i = 0; i < 3; i++) {
    await p.send({ topic, tag: 'Fifo', body: Buffer.from(`m${i}`) });
  }
  const first = await receive1(c, Date.now() + 20000);
  // The lease (30 s) still runs: 6 s of asking.
  const second = await receive1(c, Date.now() + 6000);
  if (first) await c.ack(first);
  if (second) await c.ack(second);
  const third = await receive1(c, Date.now() + 20000);
  if (third) await c.ack(third);
  await p.shutdown();
  await c.shutdown();
  const body = (m) => (m ? m.body.toString() : 'none');
  console.log(JSON.stringify({ first: body(first), whileLeased: body(second), afterAck: body(third) }));
}

main().then(() => process.exit(0), (e) => {
  console.error('FAILED', e && e.stack || e);
  console.log(JSON.stringify({ error: String(e && e.message || e) }));
  process.exit(1);
});
