// RocketMQ 5's Node.js PushConsumer against rmq's gRPC port: its
// receive loop (ReceiveMessage with auto_renew), acks of what its
// listener consumed, and retries of what it failed: each failure changes
// the message's invisible duration by the group's backoff, the message
// comes back with deliveryAttempt one higher, and once the attempts the
// server's settings allow are spent the server moves it to %DLQ%group
// instead of handing it out again (5.x's proxy does the same).  FIFO
// groups (FIFO=1) consume each message group in order and forward to the
// DLQ themselves (ForwardMessageToDeadLetterQueue).
// Runs until DONE_FILE exists (the spec has checked the DLQ) or
// TIMEOUT_MS; prints one JSON line at the end.  HOLD_MS: idle that long
// after startup before sending.
//   ENDPOINT=host:port TOPIC=... GROUP=... COUNT=... DONE_FILE=...
'use strict';
const fs = require('fs');
const { PushConsumer, Producer, ConsumeResult } = require('rocketmq-client-nodejs');

const quiet = process.env.DEBUG
  ? { info: (...a) => console.error('I', ...a), warn: (...a) => console.error('W', ...a), debug() {}, error: (...a) => console.error('E', ...a) }
  : { info() {}, warn() {}, debug() {}, error() {} };
const topic = process.env.TOPIC;
const count = Number(process.env.COUNT || 10);
const fifo = process.env.FIFO === '1';
const groups = Number(process.env.GROUPS || 3);
const timeout = Number(process.env.TIMEOUT_MS || 90000);
const dbg = (...a) => { if (process.env.DEBUG) console.error(new Date().toISOString(), ...a); };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const consumed = [];           // bodies consumed OK, in order
  const failAttempts = [];       // deliveryAttempt of each failed delivery of 'fail-*'
  const failTimes = [];
  let warmSeen = false;
  let failId = null;
  const c = new PushConsumer({
    endpoints: process.env.ENDPOINT, consumerGroup: process.env.GROUP, logger: quiet,
    subscriptions: new Map([[topic, '*']]), requestTimeout: 5000,
    messageListener: {
      async consume(m) {
        const body = m.body.toString();
        if (body.startsWith('warm')) {
          warmSeen = true;
          return ConsumeResult.SUCCESS;
        }
        if (body.startsWith('fail')) {
          failAttempts.push(m.deliveryAttempt);
          failTimes.push(Date.now());
          failId = m.messageId;
          return ConsumeResult.FAILURE;
        }
        consumed.push({ body, attempt: m.deliveryAttempt, group: m.messageGroup || null });
        return ConsumeResult.SUCCESS;
      },
    },
  });
  await c.startup();
  dbg('consumer started');
  const p = new Producer({ endpoints: process.env.ENDPOINT, topics: [topic], logger: quiet });
  await p.startup();
  dbg('producer started');
  const deadline = Date.now() + timeout;
  // HOLD_MS: stay idle first (past serverChannelMaxIdleTimeSeconds).
  await sleep(Number(process.env.HOLD_MS || 0));
  // A new group starts at the end of the queues (5.x pops so): send until
  // the consumer has seen one message, then the real ones.
  for (let i = 0; !warmSeen && Date.now() < deadline; i++) {
    await p.send(fifo ? { topic, messageGroup: 'warm', body: Buffer.from(`warm-${i}`) }
                      : { topic, body: Buffer.from(`warm-${i}`) });
    for (let w = 0; w < 10 && !warmSeen; w++)
      await sleep(100);
  }
  dbg('warm seen', warmSeen);
  const sent = [];
  for (let i = 0; i < count; i++) {
    const g = `g${i % groups}`;
    const r = await p.send(fifo ? { topic, messageGroup: g, body: Buffer.from(`${g}:${i}`) }
                                : { topic, tag: 'Push', body: Buffer.from(`ok-${i}`) });
    sent.push(r.messageId);
  }
  const failed = await p.send(fifo ? { topic, messageGroup: 'bad', body: Buffer.from('fail-1') }
                                   : { topic, tag: 'Push', body: Buffer.from('fail-1') });
  const done = process.env.DONE_FILE;
  while (Date.now() < deadline && !(done && fs.existsSync(done)))
    await sleep(200);
  dbg('shutting down', JSON.stringify({ failAttempts, failTimes }));
  dbg('shutting down', JSON.stringify({ consumed, failAttempts }));
  await p.shutdown();
  dbg('producer down');
  await c.shutdown();
  console.log(JSON.stringify({ sent, consumed, failedId: failed.messageId, failId, failAttempts,
                               failGapsMs: failTimes.slice(1).map((t, i) => t - failTimes[i]) }));
}

main().then(() => process.exit(0), (e) => {
  console.error('FAILED', e && e.stack || e);
  console.log(JSON.stringify({ error: String(e && e.message || e) }));
  process.exit(1);
});
