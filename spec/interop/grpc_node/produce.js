// RocketMQ 5's Node.js SDK (npm rocketmq-client-nodejs) producing to rmq's
// gRPC port: normal messages (tag, keys, properties) and FIFO messages in
// GROUPS message groups.  Driven by spec/integration/grpc_node_spec.lua;
// prints one JSON line at the end: what was sent, with each receipt.
//   ENDPOINT=host:port TOPIC=... FIFO_TOPIC=... COUNT=... GROUPS=...
'use strict';
const { Producer } = require('rocketmq-client-nodejs');

const endpoint = process.env.ENDPOINT;
const topic = process.env.TOPIC;
const fifoTopic = process.env.FIFO_TOPIC;
const count = Number(process.env.COUNT || 10);
const groups = Number(process.env.GROUPS || 2);
const quiet = { info() {}, warn() {}, debug() {}, error(...a) { console.error(...a); } };

async function main() {
  const producer = new Producer({ endpoints: endpoint, topics: [topic, fifoTopic], logger: quiet,
                                  requestTimeout: 5000 });
  const t0 = Date.now();
  // Progress on stderr: a run killed at its timeout says where it hung.
  const stage = (what) => process.stderr.write(`${new Date().toISOString()} ${what}\n`);
  await producer.startup();
  const startupMs = Date.now() - t0;
  stage('started');
  const normal = [];
  for (let i = 0; i < count; i++) {
    const body = Buffer.from(`normal-${i}-` + 'x'.repeat(i));
    const r = await producer.send({
      topic, tag: 'TagA', keys: [`key-${i}`, `k2-${i}`], body,
      properties: new Map([['color', i % 2 ? 'red' : 'blue'], ['seq', String(i)]]),
    });
    normal.push({ i, messageId: r.messageId, offset: r.offset, queue: r.messageQueue.queueId });
  }
  const fifo = [];
  for (let i = 0; i < count; i++) {
    const g = `group-${i % groups}`;
    const r = await producer.send({
      topic: fifoTopic, tag: 'TagF', keys: [`fkey-${i}`], messageGroup: g,
      body: Buffer.from(`${g}:${i}`),
    });
    fifo.push({ i, group: g, messageId: r.messageId, offset: r.offset });
  }
  stage('normal and FIFO sent');
  // An unknown topic: a clean error, not a hang.
  let unknownTopic = null;
  try {
    await producer.send({ topic: 'NoSuchTopicGrpc', body: Buffer.from('x') });
  } catch (e) {
    unknownTopic = String(e && e.message || e).slice(0, 300);
  }
  stage('unknown topic answered');
  await producer.shutdown();
  console.log(JSON.stringify({ startupMs, normal, fifo, unknownTopic }));
}

main().then(() => process.exit(0), (e) => {
  console.error('FAILED', e && e.stack || e);
  console.log(JSON.stringify({ error: String(e && e.message || e) }));
  process.exit(1);
});
