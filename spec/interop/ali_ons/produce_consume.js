'use strict';
// Produces COUNT messages with ali-ons and consumes them back with an
// ali-ons push consumer, through the NameServer at $NAMESRV.  Prints one
// JSON line with what happened and exits 0 only if every message came
// back with its body, tags and keys intact.  Bounded: gives up after
// $TIMEOUT_MS (default 60 s).
const httpclient = require('urllib');
const { Producer, Consumer, Message } = require('ali-ons');

const nameSrv = process.env.NAMESRV;
const topic = process.env.TOPIC || 'FxAliOns';
const group = process.env.GROUP || 'FxAliOnsGroup';
const count = Number(process.env.COUNT || 20);
const timeoutMs = Number(process.env.TIMEOUT_MS || 60000);

// ali-ons signs every request with these (ACL 1.0: AccessKey, OnsChannel,
// Signature); $ACCESS_KEY / $SECRET_KEY for a broker with aclEnable.
const common = { httpclient, nameSrv, accessKeyId: process.env.ACCESS_KEY || 'rmq',
                 accessKeySecret: process.env.SECRET_KEY || 'rmq' };

function done(result, code) {
  console.log(JSON.stringify(result));
  process.exit(code);
}

(async () => {
  const timer = setTimeout(() => done({ error: 'timeout', received: received.size }, 2), timeoutMs);
  const received = new Map();
  const consumer = new Consumer({ ...common, consumerGroup: group, pullBatchSize: 32 });
  consumer.on('error', err => console.error('consumer error:', err.message));
  consumer.subscribe(topic, '*', async msg => {
    received.set(msg.body.toString(), { tags: msg.tags, keys: msg.keys, msgId: msg.msgId });
  });
  await consumer.ready();

  const producer = new Producer({ ...common, producerGroup: group + 'Producer' });
  producer.on('error', err => console.error('producer error:', err.message));
  await producer.ready();
  const sent = [];
  for (let i = 0; i < count; i++) {
    const msg = new Message(topic, i % 2 ? 'TagOdd' : 'TagEven', `ali-ons message ${i}`);
    msg.keys = [ `key-${i}` ];
    const r = await producer.send(msg);
    if (r.sendStatus !== 'SEND_OK') done({ error: 'send', result: r }, 1);
    sent.push(r);
  }

  while (received.size < count) await new Promise(r => setTimeout(r, 50));
  clearTimeout(timer);
  let intact = 0;
  for (let i = 0; i < count; i++) {
    const m = received.get(`ali-ons message ${i}`);
    if (m && m.tags === (i % 2 ? 'TagOdd' : 'TagEven') && m.keys.includes(`key-${i}`)) intact++;
  }
  await producer.close();
  await consumer.close();
  done({ sent: sent.length, received: received.size, intact,
         firstMsgId: sent[0].msgId, queues: new Set(sent.map(s => s.messageQueue.brokerName + ':' + s.messageQueue.queueId)).size },
       intact === count ? 0 : 1);
})().catch(err => done({ error: err.message, stack: err.stack }, 1));
