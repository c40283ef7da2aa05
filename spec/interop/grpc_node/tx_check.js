// A transactional message sent with RocketMQ 5's Node.js SDK and never
// committed: rmq's transaction check asks the producer over Telemetry
// (RecoverOrphanedTransactionCommand), the SDK's checker answers COMMIT
// and the SDK ends the transaction (EndTransaction, source SERVER_CHECK).
// One JSON line: the message sent and what the checker was shown.
//   ENDPOINT=host:port TOPIC=...
'use strict';
const { Producer } = require('rocketmq-client-nodejs');
const def = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

const topic = process.env.TOPIC;
const quiet = { info() {}, warn() {}, debug() {}, error(...a) { console.error(...a); } };

async function main() {
  let seen = null;
  let resolveSeen;
  const checked = new Promise((r) => { resolveSeen = r; });
  const producer = new Producer({
    endpoints: process.env.ENDPOINT, topics: [topic], logger: quiet, requestTimeout: 5000,
    checker: {
      async check(view) {
        seen = { messageId: view.messageId, topic: view.topic, tag: view.tag, keys: view.keys,
                 body: view.body.toString(), color: view.properties.get('color') };
        resolveSeen();
        return def.TransactionResolution.COMMIT;
      },
    },
  });
  await producer.startup();
  const tx = producer.beginTransaction();
  const r = await producer.send({ topic, tag: 'Orphan', keys: ['orphan-1'], body: Buffer.from('orphan-body'),
                                  properties: new Map([['color', 'green']]) }, tx);
  // No commit, no rollback: the broker has to ask.
  await Promise.race([checked, new Promise((res) => setTimeout(res, Number(process.env.WAIT_MS || 60000)))]);
  // Let the SDK's EndTransaction go out before shutting down.
  await new Promise((res) => setTimeout(res, 1000));
  await producer.shutdown();
  console.log(JSON.stringify({ sent: { messageId: r.messageId }, seen }));
}

main().then(() => process.exit(0), (e) => {
  console.error('FAILED', e && e.stack || e);
  console.log(JSON.stringify({ error: String(e && e.message || e) }));
  process.exit(1);
});
