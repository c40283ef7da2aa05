// What the Java 5.x SDK (apache/rocketmq-clients java 5.2.1) does on the
// wire that the Node SDK does not, reproduced against rmq's gRPC port
// with the SDK's generated stubs (docs/grpc.md, "Compatibility with the
// Java 5.x SDK").  Driven by spec/integration/grpc_java_sdk_spec.lua; one
// JSON line at the end.
//   ENDPOINT=host:port TOPIC=... GROUP=...
//
// Java's SimpleConsumer names one of the topic route's queues in each
// ReceiveMessage (round robin over QueryRoute's queues), where Node names
// the assignment's queue -1.  So: a receive naming queue 2 is held, a
// message is sent to queue 0, and the receive must return it (5.x's
// proxy pops the broker's every queue whatever queue is named).  Java
// also checks each message's body digest (and logs an error for none):
// the digest received is returned beside the CRC-32 of the body.  And
// it shows user properties: the broker's own (CLUSTER, ...) must not be.
// Its born_host (the sending host's name) comes back on receive, as
// 5.x's proxy keeps it (__BORNHOST); a send without one comes back with
// the sender's address (ip:port); one with a property separator in it is
// refused (it would cut the stored properties).
//
// MODE=deadline: a receive whose deadline leaves less than the long
// poll's minimum (5.x's grpcClientConsumerMinLongPollingTimeoutMillis) is
// answered at once ILLEGAL_POLLING_TIME, as 5.x's proxy does, and is not
// held past its deadline: Java's AsyncSimpleConsumerExample sends such
// calls (they waited in the client behind the stream limit), and held,
// each popped the message sent next for a call already gone.  A long
// poll of 2^60 s is bounded the same way (not overflowed).
'use strict';
const grpc = require('@grpc/grpc-js');
const svc = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/service_pb');
const def = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');
const { MessagingServiceClient } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/service_grpc_pb');

const topic = process.env.TOPIC;
const group = process.env.GROUP;
const client = new MessagingServiceClient(process.env.ENDPOINT, grpc.credentials.createInsecure());

// CRC-32 (zlib's), as Java's Utilities.crc32CheckSum writes it: upper-case hex, no leading zeros.
function crc32Hex(buf) {
  let c = ~0;
  for (const b of buf) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = (c >>> 1) ^ (0xEDB88320 & -(c & 1));
  }
  return ((~c) >>> 0).toString(16).toUpperCase();
}

function meta() {
  const m = new grpc.Metadata();
  m.set('x-mq-client-id', 'jsdk@1@0@wire');
  return m;
}

// One ReceiveMessage naming queue `id`, as Java's SimpleConsumer sends it.
function receive(id, pollMs, deadlineMs) {
  const rq = new svc.ReceiveMessageRequest();
  rq.setGroup(new def.Resource().setName(group));
  rq.setMessageQueue(new def.MessageQueue().setTopic(new def.Resource().setName(topic)).setId(id)
    .setBroker(new def.Broker().setName('broker-grpc')));
  rq.setFilterExpression(new def.FilterExpression().setType(def.FilterType.TAG).setExpression('*'));
  rq.setBatchSize(16);
  rq.setInvisibleDuration(new (require('google-protobuf/google/protobuf/duration_pb').Duration)().setSeconds(30));
  rq.setLongPollingTimeout(new (require('google-protobuf/google/protobuf/duration_pb').Duration)()
    .setSeconds(Math.floor(pollMs / 1000)));
  rq.setAutoRenew(false);
  return new Promise((resolve) => {
    const out = { messages: [], status: null };
    const st = client.receiveMessage(rq, meta(), { deadline: Date.now() + (deadlineMs || pollMs + 10000) });
    st.on('data', (r) => {
      if (r.hasStatus()) out.status = r.getStatus().getCode();
      if (r.hasMessage()) {
        const m = r.getMessage();
        const sp = m.getSystemProperties();
        const body = Buffer.from(m.getBody_asU8());
        out.messages.push({ id: sp.getMessageId(), queueId: sp.getQueueId(), body: body.toString(),
                            digestType: sp.getBodyDigest() ? sp.getBodyDigest().getType() : null,
                            checksum: sp.getBodyDigest() ? sp.getBodyDigest().getChecksum() : null,
                            crc32: crc32Hex(body), bornHost: sp.getBornHost(), properties: Object.fromEntries(m.getUserPropertiesMap().entries()) });
      }
    });
    st.on('error', (e) => { out.grpc = e.code; out.details = e.details; resolve(out); });
    st.on('end', () => resolve(out));
  });
}

function sendToQueue(qid, body, bornHost) {
  const m = new def.Message();
  m.setTopic(new def.Resource().setName(topic));
  const sp = new def.SystemProperties();
  sp.setMessageId(`JSDK${Date.now()}`);
  sp.setTag('Java');
  sp.setMessageType(def.MessageType.NORMAL);
  sp.setBodyEncoding(def.Encoding.IDENTITY);
  sp.setQueueId(qid);
  if (bornHost) sp.setBornHost(bornHost);
  m.setSystemProperties(sp);
  m.setBody(Buffer.from(body));
  const rq = new svc.SendMessageRequest();
  rq.addMessages(m);
  return new Promise((resolve) => {
    client.sendMessage(rq, meta(), { deadline: Date.now() + 10000 }, (e, r) => {
      if (e) return resolve({ grpc: e.code, details: e.details });
      const en = r.getEntriesList()[0];
      resolve({ status: en.getStatus().getCode(), id: en.getMessageId() });
    });
  });
}

async function main() {
  // The group's first receive: its offsets, the empty queues' start.
  const first = await receive(2, 1000);
  // Held on "queue 2"; the message goes to queue 0 meanwhile.
  const held = receive(2, 20000);
  await new Promise((r) => setTimeout(r, 1500));
  const sent = await sendToQueue(0, 'java-sdk-wire', 'jsdk-born-host');
  const got = await held;
  const sent2 = await sendToQueue(1, 'no-born-host');
  const got2 = await receive(1, 10000);
  const badHost = await sendToQueue(1, 'bad-born-host', 'host\u0001name');
  return { first: { count: first.messages.length, grpc: first.grpc }, sent, got, sent2, got2, badHost };
}

async function deadline() {
  const first = await receive(0, 1000);
  // Asks 30 s of long polling with 3 s to its deadline.
  const late = await receive(0, 30000, 3000);
  // A long poll of 2^60 s (its ms overflow an int64 unless saturated).
  const huge = await receive(0, 2 ** 60 * 1000, 3000);
  const sent = await sendToQueue(0, 'after-late');
  const got = await receive(0, 5000);
  return { first: { count: first.messages.length, grpc: first.grpc }, late, huge, sent, got };
}

(process.env.MODE === 'deadline' ? deadline() : main()).then((r) => { client.close(); console.log(JSON.stringify(r)); },
            (e) => { console.log(JSON.stringify({ error: String(e && e.stack || e) })); process.exit(1); });
