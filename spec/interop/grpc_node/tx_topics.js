// One transactional producer of RocketMQ 5's Node.js SDK publishing TOPIC,
// for grpc_tx_topics_spec.lua: which producer a transaction check reaches.
//   ENDPOINT=host:port TOPIC=... ROLE=...
//   ROLE=watch   started (READY file written), its checker records every
//                check and answers UNKNOWN; ends when the STOP file exists
//                (or after WAIT_MS)
//   ROLE=half    sends one half message (no commit, no rollback), ends at once
//   ROLE=check   its checker records every check and answers COMMIT; ends
//                once asked about EXPECT (a message id), or after WAIT_MS
//   ROLE=each    publishes TOPICS (comma-separated), sends a half message on
//                each; its checker answers UNKNOWN; ends once asked twice
//                about the first one (two check rounds), or after WAIT_MS
// One JSON line: { sent: messageId (half), checks: [{ messageId, topic, body }] }.
'use strict';
const fs = require('fs');
const { Producer } = require('rocketmq-client-nodejs');
const def = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

const topic = process.env.TOPIC;
const role = process.env.ROLE;
const waitMs = Number(process.env.WAIT_MS || 60000);
const quiet = { info() {}, warn() {}, debug() {}, error(...a) { console.error(...a); } };
const sleep = (ms) => new Promise((res) => setTimeout(res, ms));

async function main() {
  const checks = [];
  const producer = new Producer({
    endpoints: process.env.ENDPOINT, topics: role === 'each' ? process.env.TOPICS.split(',') : [topic], logger: quiet, requestTimeout: 5000,
    checker: {
      async check(view) {
        checks.push({ messageId: view.messageId, topic: view.topic, body: view.body.toString() });
        return role === 'check' ? def.TransactionResolution.COMMIT : def.TransactionResolution.UNKNOWN;
      },
    },
  });
  await producer.startup();
  let sent = null;
  const deadline = Date.now() + waitMs;
  if (role === 'half') {
    const tx = producer.beginTransaction();
    const r = await producer.send({ topic, tag: 'Half', keys: ['half-1'], body: Buffer.from('half-of-' + topic) }, tx);
    sent = r.messageId;
  } else if (role === 'each') {
    sent = [];
    for (const t of process.env.TOPICS.split(',')) {
      const tx = producer.beginTransaction();
      sent.push((await producer.send({ topic: t, tag: 'Half', body: Buffer.from('half-of-' + t) }, tx)).messageId);
    }
    while (checks.filter((c) => c.messageId === sent[0]).length < 2 && Date.now() < deadline) await sleep(100);
  } else if (role === 'watch') {
    fs.writeFileSync(process.env.READY, 'ready\n');
    while (!fs.existsSync(process.env.STOP) && Date.now() < deadline) await sleep(100);
  } else {
    while (!checks.some((c) => c.messageId === process.env.EXPECT) && Date.now() < deadline) await sleep(100);
    // Let the SDK's EndTransaction go out before shutting down.
    await sleep(1000);
  }
  await producer.shutdown();
  console.log(JSON.stringify({ sent, checks }));
}

main().then(() => process.exit(0), (e) => {
  console.error('FAILED', e && e.stack || e);
  console.log(JSON.stringify({ error: String(e && e.message || e) }));
  process.exit(1);
});
