// RocketMQ 5's Node.js SimpleConsumer against rmq's gRPC port: its startup
// (QueryRoute, Telemetry with its subscription settings, Heartbeat) works;
// receive() needs POP on the broker (not served yet) and must fail with a
// clean UNIMPLEMENTED error, not hang.  One JSON line at the end.
//   ENDPOINT=host:port TOPIC=... GROUP=...
'use strict';
const { SimpleConsumer } = require('rocketmq-client-nodejs');

const quiet = { info() {}, warn() {}, debug() {}, error() {} };

async function main() {
  const c = new SimpleConsumer({
    endpoints: process.env.ENDPOINT, consumerGroup: process.env.GROUP, logger: quiet,
    subscriptions: new Map([[process.env.TOPIC, '*']]), awaitDuration: 3000, requestTimeout: 5000,
  });
  const t0 = Date.now();
  await c.startup();
  const startupMs = Date.now() - t0;
  let receive = null;
  try {
    await c.receive(1, 30000);
  } catch (e) {
    receive = String(e && e.message || e).slice(0, 300);
  }
  await c.shutdown();
  console.log(JSON.stringify({ startupMs, receive }));
}

main().then(() => process.exit(0), (e) => {
  console.error('FAILED', e && e.stack || e);
  console.log(JSON.stringify({ error: String(e && e.message || e) }));
  process.exit(1);
});
