// gRPC calls and HTTP/2 abuse against rmq's gRPC port, below the SDK:
// @grpc/grpc-js (the SDK's transport) with the SDK's generated stubs for
// well-formed calls, raw bytes for malformed ones, and node's own http2
// module for peers that misbehave at the HTTP/2 level.  Driven by
// spec/integration/grpc_wire_spec.lua; CASE selects what runs, and one
// JSON line at the end says what happened.
//   ENDPOINT=host:port TOPIC=... CASE=calls|oversize|flood|idle|garbage|auth (AK= SK=)
'use strict';
const grpc = require('@grpc/grpc-js');
const http2 = require('node:http2');
const net = require('node:net');
const svc = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/service_pb');
const def = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');
const { MessagingServiceClient } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/service_grpc_pb');

const endpoint = process.env.ENDPOINT;
const topic = process.env.TOPIC;
const PREFIX = '/apache.rocketmq.v2.MessagingService/';

function message(body, i) {
  const m = new def.Message();
  m.setTopic(new def.Resource().setName(topic));
  const sp = new def.SystemProperties();
  sp.setMessageId(`WIRE${Date.now()}${i}`);
  sp.setTag('Wire');
  sp.setKeysList([`wire-${i}`]);
  sp.setMessageType(def.MessageType.NORMAL);
  sp.setBodyEncoding(def.Encoding.IDENTITY);
  sp.setQueueId(0);
  m.setSystemProperties(sp);
  m.setBody(body);
  return m;
}

function sendRequest(bodies) {
  const rq = new svc.SendMessageRequest();
  bodies.forEach((b, i) => rq.addMessages(message(Buffer.from(b), i)));
  return rq;
}

function unary(client, method, rq, deadlineMs = 5000) {
  return new Promise((resolve) => {
    client[method](rq, new grpc.Metadata(), { deadline: Date.now() + deadlineMs }, (e, r) => {
      resolve(e ? { code: e.code, details: e.details } : { code: 0, r });
    });
  });
}

// A client that sends and returns raw bytes for a method path.
function rawCall(path, bytes, deadlineMs = 5000) {
  const ident = (x) => x;
  const Ctor = grpc.makeGenericClientConstructor({
    call: { path, requestStream: false, responseStream: false, requestSerialize: ident,
            requestDeserialize: ident, responseSerialize: ident, responseDeserialize: ident },
  }, 'Raw');
  const c = new Ctor(endpoint, grpc.credentials.createInsecure());
  return new Promise((resolve) => {
    c.call(bytes, new grpc.Metadata(), { deadline: Date.now() + deadlineMs }, (e, r) => {
      c.close();
      resolve(e ? { code: e.code, details: e.details } : { code: 0, r });
    });
  });
}

function statusOf(res) {
  return res.code === 0 ? res.r.getStatus().getCode() : null;
}

async function calls() {
  const out = {};
  const client = new MessagingServiceClient(endpoint, grpc.credentials.createInsecure());
  // A batch of three: each its own result.
  let res = await unary(client, 'sendMessage', sendRequest(['b-0', 'b-1', 'b-2']));
  out.batch = { grpc: res.code, status: statusOf(res),
                entries: res.code === 0 ? res.r.getEntriesList().map((e) => e.getStatus().getCode()) : [],
                offsets: res.code === 0 ? res.r.getEntriesList().map((e) => e.getOffset()) : [] };
  // gzip-compressed request messages.
  const gz = new MessagingServiceClient(endpoint, grpc.credentials.createInsecure(),
                                        { 'grpc.default_compression_algorithm': 2 });
  res = await unary(gz, 'sendMessage', sendRequest(['gzip-' + 'z'.repeat(2000)]));
  out.gzip = { grpc: res.code, status: statusOf(res) };
  gz.close();
  // Unknown fields (a field 99 varint at the top level and inside the
  // message): skipped, as protobuf readers do.
  const bytes = Buffer.from(sendRequest(['unknown-fields']).serializeBinary());
  const withUnknown = Buffer.concat([bytes, Buffer.from([0x98, 0x06, 0x01])]);
  res = await rawCall(PREFIX + 'SendMessage', withUnknown);
  out.unknownFields = { grpc: res.code,
                        status: res.code === 0 ? svc.SendMessageResponse.deserializeBinary(res.r).getStatus().getCode() : null };
  // Bytes that are not a SendMessageRequest.
  res = await rawCall(PREFIX + 'SendMessage', Buffer.from([0x0a, 0xff, 0xff, 0xff, 0x0f, 0x01]));
  out.garbage = { grpc: res.code, details: res.details };
  // Methods not served yet, and one that does not exist.
  const rm = new svc.ReceiveMessageRequest();
  rm.setGroup(new def.Resource().setName('WireGroup'));
  rm.setMessageQueue(new def.MessageQueue().setTopic(new def.Resource().setName(topic)).setId(-1));
  rm.setBatchSize(1);
  out.receive = await new Promise((resolve) => {
    const st = client.receiveMessage(rm, new grpc.Metadata(), { deadline: Date.now() + 5000 });
    st.on('data', () => {});
    st.on('error', (e) => resolve({ code: e.code, details: e.details }));
    st.on('end', () => resolve({ code: 0 }));
  });
  const ack = new svc.AckMessageRequest();
  ack.setGroup(new def.Resource().setName('WireGroup'));
  ack.setTopic(new def.Resource().setName(topic));
  ack.addEntries(new svc.AckMessageEntry().setMessageId('X').setReceiptHandle('0 1 60000 0 0 broker-grpc 0 0'));
  res = await unary(client, 'ackMessage', ack);
  out.ack = { code: res.code, details: res.details,
              status: res.code === 0 ? res.r.getEntriesList()[0].getStatus().getCode() : null };
  const badAck = new svc.AckMessageRequest();
  badAck.setGroup(new def.Resource().setName('WireGroup'));
  badAck.setTopic(new def.Resource().setName(topic));
  badAck.addEntries(new svc.AckMessageEntry().setMessageId('X').setReceiptHandle('forged'));
  res = await unary(client, 'ackMessage', badAck);
  out.badAck = { code: res.code, status: res.code === 0 ? res.r.getEntriesList()[0].getStatus().getCode() : null };
  res = await rawCall(PREFIX + 'SyncLiteSubscription', Buffer.alloc(0));
  out.syncLite = { code: res.code, details: res.details };
  res = await rawCall(PREFIX + 'NoSuchMethod', Buffer.alloc(0));
  out.unknownMethod = { code: res.code };
  res = await rawCall('/some.Other/Method', Buffer.alloc(0));
  out.otherService = { code: res.code };
  // Header fields over grpcMaxInboundMetadataSize: the call is reset.
  out.bigHeaders = await new Promise((resolve) => {
    h2connect().then((sess) => {
      sess.on('error', () => {});
      const st = sess.request(Object.assign(GRPC_HEADERS('SendMessage'), { 'x-big': 'h'.repeat(40000) }),
                              { endStream: true });
      st.on('error', () => {});
      st.on('response', () => {});
      st.on('close', () => { resolve({ rst: st.rstCode }); sess.destroy(); });
    }, (e) => resolve({ error: String(e) }));
  });
  // And the connection still serves.
  res = await unary(client, 'sendMessage', sendRequest(['after']));
  out.after = { grpc: res.code, status: statusOf(res) };
  client.close();
  return out;
}

async function oversize() {
  const out = {};
  const client = new MessagingServiceClient(endpoint, grpc.credentials.createInsecure(),
                                            { 'grpc.max_send_message_length': 64 << 20 });
  const big = Number(process.env.BIG || 200000);
  let res = await unary(client, 'sendMessage', sendRequest(['x'.repeat(big)]));
  out.overInbound = { code: res.code, details: res.details };
  const body = Number(process.env.BODY || 20000);
  res = await unary(client, 'sendMessage', sendRequest(['y'.repeat(body)]));
  out.overBody = { grpc: res.code, status: statusOf(res),
                   entry: res.code === 0 ? res.r.getEntriesList()[0].getStatus().getCode() : null };
  res = await unary(client, 'sendMessage', sendRequest(['small']));
  out.after = { grpc: res.code, status: statusOf(res) };
  client.close();
  return out;
}

function h2connect() {
  return new Promise((resolve, reject) => {
    const s = http2.connect('http://' + endpoint);
    s.on('connect', () => resolve(s));
    s.on('error', reject);
  });
}

const GRPC_HEADERS = (method) => ({
  ':method': 'POST', ':path': PREFIX + method, 'content-type': 'application/grpc', te: 'trailers',
});

// Rapid reset: open streams and cancel them at once, as fast as possible.
async function flood() {
  const n = Number(process.env.STREAMS || 2000);
  const s = await h2connect();
  const result = { goaway: null, closed: false, opened: 0 };
  s.on('goaway', (code) => { result.goaway = code; });
  s.on('error', () => {});
  const closed = new Promise((resolve) => s.on('close', resolve));
  for (let i = 0; i < n && !s.destroyed && !s.closed; i++) {
    try {
      const st = s.request(GRPC_HEADERS('SendMessage'));
      st.on('error', () => {});
      st.close(http2.constants.NGHTTP2_CANCEL);
      result.opened++;
    } catch (e) {
      break;
    }
    if (i % 50 === 0)
      await new Promise((r) => setImmediate(r));
  }
  await Promise.race([closed, new Promise((r) => setTimeout(r, 10000))]);
  result.closed = s.destroyed || s.closed;
  s.destroy();
  // Others are served meanwhile and after.
  const client = new MessagingServiceClient(endpoint, grpc.credentials.createInsecure());
  const res = await unary(client, 'sendMessage', sendRequest(['after-flood']));
  result.after = { grpc: res.code, status: statusOf(res) };
  client.close();
  return result;
}

// Idle streams: headers, never a request, never END_STREAM.
async function idle() {
  const n = Number(process.env.STREAMS || 64);
  const s = await h2connect();
  s.on('error', () => {});
  const codes = [];
  const done = [];
  for (let i = 0; i < n; i++) {
    const st = s.request(GRPC_HEADERS('SendMessage'), { endStream: false });
    st.on('error', () => {});
    done.push(new Promise((resolve) => st.on('close', () => { codes.push(st.rstCode); resolve(); })));
  }
  // Meanwhile another connection is served.
  const client = new MessagingServiceClient(endpoint, grpc.credentials.createInsecure());
  const res = await unary(client, 'sendMessage', sendRequest(['while-idle']));
  client.close();
  await Promise.race([Promise.all(done), new Promise((r) => setTimeout(r, 20000))]);
  s.destroy();
  return { served: { grpc: res.code, status: statusOf(res) }, closedStreams: codes.length,
           cancel: codes.filter((c) => c === http2.constants.NGHTTP2_CANCEL).length,
           refused: codes.filter((c) => c === http2.constants.NGHTTP2_REFUSED_STREAM).length };
}

// Not HTTP/2 at all, and a preface followed by junk frames.
async function garbage() {
  const send = (bytes) => new Promise((resolve) => {
    const c = net.connect(Number(endpoint.split(':')[1]), endpoint.split(':')[0]);
    let got = 0;
    c.on('connect', () => c.write(bytes));
    c.on('data', (d) => { got += d.length; });
    c.on('error', () => {});
    c.on('close', () => resolve({ closed: true, got }));
    setTimeout(() => { c.destroy(); resolve({ closed: false, got }); }, 10000);
  });
  const http1 = await send(Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n'));
  const junk = await send(Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'),
                                          Buffer.from([0, 0, 4, 0xee, 0, 0, 0, 0, 1, 1, 2, 3, 4]),
                                          Buffer.alloc(64, 0xff)]));
  const client = new MessagingServiceClient(endpoint, grpc.credentials.createInsecure());
  const res = await unary(client, 'sendMessage', sendRequest(['after-garbage']));
  client.close();
  return { http1, junk, after: { grpc: res.code, status: statusOf(res) } };
}

// Raw HTTP/2 frames (HPACK literals, no Huffman), for a peer that never
// reads: it writes SendMessage calls as fast as the socket takes them.
function frame(type, flags, stream, payload) {
  const h = Buffer.alloc(9);
  h.writeUIntBE(payload.length, 0, 3);
  h[3] = type;
  h[4] = flags;
  h.writeUInt32BE(stream, 5);
  return Buffer.concat([h, payload]);
}
function literal(name, value) {
  return Buffer.concat([Buffer.from([0, name.length]), Buffer.from(name), Buffer.from([value.length]),
                        Buffer.from(value)]);
}

async function noread() {
  const port = Number(endpoint.split(':')[1]), host = endpoint.split(':')[0];
  const c = net.connect(port, host);
  c.on('error', () => {});
  await new Promise((resolve) => c.on('connect', resolve));
  c.pause();   // never read a byte of what the server answers
  const hdrs = Buffer.concat([literal(':method', 'POST'), literal(':scheme', 'http'),
    literal(':path', PREFIX + 'QueryRoute'), literal(':authority', 'x'),
    literal('content-type', 'application/grpc'), literal('te', 'trailers')]);
  // QueryRoute: nothing stored, answers larger than requests.
  const rq = new svc.QueryRouteRequest();
  rq.setTopic(new def.Resource().setName(topic));
  const req = Buffer.from(rq.serializeBinary());
  const msg = Buffer.concat([Buffer.from([0]), Buffer.alloc(4), req]);
  msg.writeUInt32BE(req.length, 1);
  c.write(Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), frame(4, 0, 0, Buffer.alloc(0))]));
  let sent = 0, closed = false, stream = 1;
  c.on('close', () => { closed = true; });
  // Write until the server stops reading (it pauses a connection whose
  // answers pile up unread): a write that has not drained for a second.
  const deadline = Date.now() + 20000;
  let stalled = false;
  while (!closed && !stalled && Date.now() < deadline) {
    const batch = [];
    for (let i = 0; i < 64; i++, stream += 2) {
      batch.push(frame(1, 4, stream, hdrs), frame(0, 1, stream, msg));
    }
    sent += 64;
    if (!c.write(Buffer.concat(batch))) {
      stalled = !(await new Promise((r) => { c.once('drain', () => r(true)); setTimeout(() => r(false), 1000); }));
      c.removeAllListeners('drain');
    }
  }
  const buffered = c.writableLength;
  // Meanwhile and after, another client is served.
  const client = new MessagingServiceClient(endpoint, grpc.credentials.createInsecure());
  const res = await unary(client, 'sendMessage', sendRequest(['while-not-reading']));
  client.close();
  // The server closes it once its answers have waited long enough.
  const t0 = Date.now();
  while (!closed && Date.now() - t0 < 30000)
    await new Promise((r) => setTimeout(r, 100));
  c.destroy();
  return { sent, stalled, buffered, closed, served: { grpc: res.code, status: statusOf(res) } };
}

// GOAWAY when the server stops: a Telemetry stream is open; the script
// says "OPEN" and waits for the server's GOAWAY.
async function goaway() {
  const s = await h2connect();
  s.on('error', () => {});
  let code = null;
  const got = new Promise((resolve) => s.on('goaway', (c) => { code = c; resolve(); }));
  const st = s.request(GRPC_HEADERS('Telemetry'), { endStream: false });
  st.on('error', () => {});
  let status = null;
  st.on('trailers', (t) => { status = t['grpc-status']; });
  // The client's Settings; the server's answer proves the session is
  // served by a worker before the server is told to stop.
  const settings = new def.Settings();
  settings.setClientType(def.ClientType.PRODUCER);
  settings.setPublishing(new def.Publishing());
  const cmd = Buffer.from(new svc.TelemetryCommand().setSettings(settings).serializeBinary());
  const pre = Buffer.alloc(5);
  pre.writeUInt32BE(cmd.length, 1);
  const answered = new Promise((resolve) => st.once('data', resolve));
  st.write(Buffer.concat([pre, cmd]));
  await Promise.race([answered, new Promise((r) => setTimeout(r, 10000))]);
  console.log('OPEN');
  await Promise.race([got, new Promise((r) => setTimeout(r, 20000))]);
  s.destroy();
  return { goaway: code, status };
}

// A SimpleConsumer's Telemetry settings (group, subscription): the
// broker should list the client as a consumer of the group while the
// session lasts.  Says "OPEN" once answered, then holds until killed.
async function consumer() {
  const s = await h2connect();
  s.on('error', () => {});
  const headers = Object.assign(GRPC_HEADERS('Telemetry'), { 'x-mq-client-id': process.env.CLIENT_ID });
  const st = s.request(headers, { endStream: false });
  st.on('error', () => {});
  const sub = new def.Subscription();
  sub.setGroup(new def.Resource().setName(process.env.GROUP));
  sub.addSubscriptions(new def.SubscriptionEntry().setTopic(new def.Resource().setName(topic))
    .setExpression(new def.FilterExpression().setType(def.FilterType.TAG).setExpression('TagA || "TagB"')));
  const settings = new def.Settings();
  settings.setClientType(def.ClientType.SIMPLE_CONSUMER);
  settings.setSubscription(sub);
  const cmd = Buffer.from(new svc.TelemetryCommand().setSettings(settings).serializeBinary());
  const pre = Buffer.alloc(5);
  pre.writeUInt32BE(cmd.length, 1);
  const answered = new Promise((resolve) => st.once('data', resolve));
  st.write(Buffer.concat([pre, cmd]));
  await Promise.race([answered, new Promise((r) => setTimeout(r, 10000))]);
  console.log('OPEN');
  await new Promise((r) => setTimeout(r, Number(process.env.HOLD_MS || 30000)));
  s.destroy();
  return { held: true };
}

// The Settings the server answers a PushConsumer's Telemetry with, for
// GROUP (sent with fifo=FIFO): fifo, maxAttempts and the backoff, in ms.
async function settings() {
  const s = await h2connect();
  s.on('error', () => {});
  const headers = Object.assign(GRPC_HEADERS('Telemetry'), { 'x-mq-client-id': 'settings@1@0@grpc' });
  const st = s.request(headers, { endStream: false });
  st.on('error', () => {});
  const sub = new def.Subscription();
  sub.setGroup(new def.Resource().setName(process.env.GROUP));
  sub.setFifo(process.env.FIFO === 'true');
  sub.addSubscriptions(new def.SubscriptionEntry().setTopic(new def.Resource().setName(topic))
    .setExpression(new def.FilterExpression().setType(def.FilterType.TAG).setExpression('*')));
  const mine = new def.Settings();
  mine.setClientType(def.ClientType.PUSH_CONSUMER);
  mine.setSubscription(sub);
  const cmd = Buffer.from(new svc.TelemetryCommand().setSettings(mine).serializeBinary());
  const pre = Buffer.alloc(5);
  pre.writeUInt32BE(cmd.length, 1);
  let got = Buffer.alloc(0);
  const answered = new Promise((resolve) => st.on('data', (d) => {
    got = Buffer.concat([got, d]);
    if (got.length >= 5 && got.length >= 5 + got.readUInt32BE(1)) resolve();
  }));
  st.write(Buffer.concat([pre, cmd]));
  await Promise.race([answered, new Promise((r) => setTimeout(r, 10000))]);
  s.destroy();
  if (got.length < 5) return { error: 'no Settings answered' };
  const tc = svc.TelemetryCommand.deserializeBinary(got.subarray(5, 5 + got.readUInt32BE(1)));
  const st2 = tc.getSettings();
  const ms = (d) => d.getSeconds() * 1000 + Math.round(d.getNanos() / 1e6);
  const bp = st2.getBackoffPolicy();
  const out = { fifo: st2.getSubscription().getFifo(), maxAttempts: bp.getMaxAttempts() };
  if (bp.hasExponentialBackoff()) {
    const e = bp.getExponentialBackoff();
    out.exponential = { initial: ms(e.getInitial()), max: ms(e.getMax()), multiplier: e.getMultiplier() };
  }
  if (bp.hasCustomizedBackoff()) out.customized = bp.getCustomizedBackoff().getNextList().map(ms);
  return out;
}

// ACL: 5.x's authorization header made by hand (AK, SK): signed now
// (upper- and lower-case hex), signed an hour ago (a replay), signed with
// a date that does not parse, and a header that is not MQv2-HMAC-SHA1.
// Each QueryRoute's gRPC code and details.
async function auth() {
  const crypto = require('node:crypto');
  const client = new MessagingServiceClient(endpoint, grpc.credentials.createInsecure());
  const stamp = (ms) => new Date(ms).toISOString().replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
  const call = (date, authorization) => new Promise((resolve) => {
    const md = new grpc.Metadata();
    md.set('x-mq-date-time', date);
    md.set('authorization', authorization);
    const rq = new svc.QueryRouteRequest();
    rq.setTopic(new def.Resource().setName(topic));
    client.queryRoute(rq, md, { deadline: Date.now() + 5000 }, (e, r) => {
      resolve(e ? { code: e.code, details: e.details } : { code: 0, status: r.getStatus().getCode() });
    });
  });
  const signed = (date, lower) => {
    let sig = crypto.createHmac('sha1', process.env.SK).update(date).digest('hex').toUpperCase();
    if (lower) sig = sig.toLowerCase();
    return `MQv2-HMAC-SHA1 Credential=${process.env.AK}, SignedHeaders=x-mq-date-time, Signature=${sig}`;
  };
  const now = stamp(Date.now()), old = stamp(Date.now() - 3600 * 1000);
  return {
    fresh: await call(now, signed(now)),
    lower: await call(now, signed(now, true)),
    replay: await call(old, signed(old)),
    baddate: await call('yesterday', signed('yesterday')),
    scheme: await call(now, 'Basic dXNlcjpwYXNz'),
  };
}

// 5.x's PullConsumer offset RPCs on queue 0 of TOPIC for GROUP: the
// queue's ends before and after three sends, a commit and its read
// back, a group that committed nothing, a search by time, bad requests.
async function offsets() {
  const client = new MessagingServiceClient(endpoint, grpc.credentials.createInsecure());
  const mq = () => new def.MessageQueue().setTopic(new def.Resource().setName(topic)).setId(0);
  const group = (g) => new def.Resource().setName(g);
  const res = (r) => ({ code: r.code, status: r.code === 0 ? r.r.getStatus().getCode() : null,
                        offset: r.code === 0 && r.r.getOffset ? r.r.getOffset() : null,
                        message: r.code === 0 ? r.r.getStatus().getMessage() : r.details });
  const query = async (policy, ts) => {
    const rq = new svc.QueryOffsetRequest().setMessageQueue(mq()).setQueryOffsetPolicy(policy);
    if (ts !== undefined) rq.setTimestamp(new (require('google-protobuf/google/protobuf/timestamp_pb').Timestamp)().setSeconds(Math.floor(ts / 1000)));
    return res(await unary(client, 'queryOffset', rq));
  };
  const out = {};
  out.beginBefore = await query(def.QueryOffsetPolicy.BEGINNING);
  out.endBefore = await query(def.QueryOffsetPolicy.END);
  // three messages for queue 0 (a single-message request each: the
  // broker chooses the queue of a batch by its first message)
  let sent = 0;
  for (let i = 0; i < 12 && sent < 3; i++) {
    const r = await unary(client, 'sendMessage', sendRequest([`offset-${i}`]));
    if (r.code === 0 && r.r.getEntriesList()[0].getStatus().getCode() === 20000) {
      const e = r.r.getEntriesList()[0];
      if (e.getOffset() >= out.endBefore.offset) sent++;
    }
  }
  out.endAfter = await query(def.QueryOffsetPolicy.END);
  out.byTime = await query(def.QueryOffsetPolicy.TIMESTAMP, Date.now() - 3600 * 1000);
  const upd = new svc.UpdateOffsetRequest().setGroup(group(process.env.GROUP)).setMessageQueue(mq()).setOffset(2);
  out.update = res(await unary(client, 'updateOffset', upd));
  out.get = res(await unary(client, 'getOffset', new svc.GetOffsetRequest().setGroup(group(process.env.GROUP)).setMessageQueue(mq())));
  out.getNone = res(await unary(client, 'getOffset', new svc.GetOffsetRequest().setGroup(group('NeverCommitted')).setMessageQueue(mq())));
  out.noGroup = res(await unary(client, 'getOffset', new svc.GetOffsetRequest().setMessageQueue(mq())));
  out.garbage = await rawCall(PREFIX + 'QueryOffset', Buffer.from([0xff, 0xff, 0xff]));
  return out;
}

const CASES = { calls, oversize, flood, idle, garbage, noread, goaway, consumer, settings, auth, offsets };

CASES[process.env.CASE]().then((r) => {
  console.log(JSON.stringify(r));
  process.exit(0);
}, (e) => {
  console.error('FAILED', e && e.stack || e);
  console.log(JSON.stringify({ error: String(e && e.message || e) }));
  process.exit(1);
});
