'use strict';
// An ali-ons push consumer subscribed with a SQL92 expression
// ({ expressionType: 'SQL92', subString }), then COUNT messages with a
// property `a` = i produced with ali-ons, through the NameServer at
// $NAMESRV.  Prints one JSON line: what was sent and the a values
// received, sorted; waits $SETTLE_MS after the last expected one so an
// extra delivery would be seen.  Bounded by $TIMEOUT_MS.
const httpclient = require('urllib');
const { Producer, Consumer, Message } = require('ali-ons');

const nameSrv = process.env.NAMESRV;
const topic = process.env.TOPIC;
const group = process.env.GROUP;
const count = Number(process.env.COUNT || 20);
const expr = process.env.EXPR;
const expected = Number(process.env.EXPECTED);
const timeoutMs = Number(process.env.TIMEOUT_MS || 60000);
const settleMs = Number(process.env.SETTLE_MS || 1500);

const common = { httpclient, nameSrv, accessKeyId: 'rmq', accessKeySecret: 'rmq' };

function done(result, code) {
  console.log(JSON.stringify(result));
  process.exit(code);
}

(async () => {
  const received = [];
  const timer = setTimeout(() => done({ error: 'timeout', received }, 2), timeoutMs);
  const consumer = new Consumer({ ...common, consumerGroup: group, pullBatchSize: 32 });
  consumer.on('error', err => console.error('consumer error:', err.message));
  consumer.subscribe(topic, { expressionType: 'SQL92', subString: expr }, async msg => {
    received.push(Number(msg.properties.a));
  });
  await consumer.ready();

  const producer = new Producer({ ...common, producerGroup: group + 'Producer' });
  producer.on('error', err => console.error('producer error:', err.message));
  await producer.ready();
  for (let i = 0; i < count; i++) {
    const msg = new Message(topic, i % 2 ? 'TagOdd' : 'TagEven', `ali-ons sql ${i}`);
    msg.properties.a = String(i);
    const r = await producer.send(msg);
    if (r.sendStatus !== 'SEND_OK') done({ error: 'send', result: r }, 1);
  }
  while (received.length < expected) await new Promise(r => setTimeout(r, 50));
  await new Promise(r => setTimeout(r, settleMs));
  clearTimeout(timer);
  await producer.close();
  await consumer.close();
  done({ sent: count, received: received.sort((x, y) => x - y) }, 0);
})().catch(err => done({ error: err.message, stack: err.stack }, 1));
