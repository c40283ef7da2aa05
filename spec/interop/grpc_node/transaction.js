// RocketMQ 5's Node.js SDK sending transactional messages to rmq's gRPC
// port: one committed, one rolled back (EndTransaction), and an
// EndTransaction with a transaction id this server never issued.  One
// JSON line at the end.   ENDPOINT=host:port TOPIC=...
'use strict';
const { Producer } = require('rocketmq-client-nodejs');
const def = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

const topic = process.env.TOPIC;
const quiet = { info() {}, warn() {}, debug() {}, error() {} };

async function main() {
  const producer = new Producer({ endpoints: process.env.ENDPOINT, topics: [topic], logger: quiet,
                                  requestTimeout: 5000, checker: { check: async () => def.TransactionResolution.COMMIT } });
  await producer.startup();
  const out = {};
  const t1 = producer.beginTransaction();
  const r1 = await producer.send({ topic, tag: 'Tx', keys: ['tx-commit'], body: Buffer.from('commit-me') }, t1);
  out.committed = { messageId: r1.messageId, transactionId: r1.transactionId };
  await t1.commit();
  const t2 = producer.beginTransaction();
  const r2 = await producer.send({ topic, tag: 'Tx', keys: ['tx-rollback'], body: Buffer.from('rollback-me') }, t2);
  out.rolledBack = { messageId: r2.messageId };
  await t2.rollback();
  // A plain message after both: the topic then holds exactly two.
  await producer.send({ topic, tag: 'Tx', keys: ['marker'], body: Buffer.from('marker') });
  // A second commit of the first: refused, the message is not stored twice.
  try {
    await producer.endTransaction(r1.endpoints, { topic }, r1.messageId, r1.transactionId,
                                  def.TransactionResolution.COMMIT);
    out.second = 'accepted';
  } catch (e) {
    out.second = String(e && e.message || e).slice(0, 300);
  }
  try {
    await producer.endTransaction(r1.endpoints, { topic }, r1.messageId, 'forged',
                                  def.TransactionResolution.COMMIT);
    out.forged = 'accepted';
  } catch (e) {
    out.forged = String(e && e.message || e).slice(0, 300);
  }
  await producer.shutdown();
  console.log(JSON.stringify(out));
}

main().then(() => process.exit(0), (e) => {
  console.error('FAILED', e && e.stack || e);
  console.log(JSON.stringify({ error: String(e && e.message || e) }));
  process.exit(1);
});
