// Loads rmq's web console in Debian's headless chromium (playwright-core)
// and prints what a person would read off it, as one JSON line:
//   {errors: [...], brokers: [[cells]], topics: {name: [cells]},
//    groups: {name: [cells]}, queues: [[cells]], sent: text, found: text,
//    screenshot: path}
// after it has sent a test message with the page's form and looked it up
// by key with the other.
// Usage: node console_page.js URL SCREENSHOT.png TOPIC GROUP
'use strict';
const { chromium } = require('playwright-core');

async function main() {
  const [url, shot, topic, group, lag] = process.argv.slice(2);
  // Generous bounds: on a loaded machine (load 8-10 on 2 cores) chromium
  // takes tens of seconds to start and to run a page's scripts.
  const WAIT = 120000;
  const browser = await chromium.launch({
    timeout: WAIT,
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const errors = [];
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.setDefaultTimeout(WAIT);
    page.setDefaultNavigationTimeout(WAIT);
    page.on('console', (m) => { if (m.type() === 'error') errors.push('console: ' + m.text()); });
    page.on('pageerror', (e) => errors.push('page: ' + e.message));
    page.on('requestfailed', (r) => errors.push('request failed: ' + r.url()));
    page.on('response', (r) => { if (r.status() >= 400) errors.push(r.status() + ' ' + r.url()); });
    await page.goto(url, { waitUntil: 'load' });
    await page.waitForSelector('tr.topic[data-topic="' + topic + '"]');
    await page.waitForSelector('tr.group[data-group="' + group + '"]');
    // The group's row once a sample shows its lag (and its sparkline).
    if (lag !== undefined) {
      await page.waitForFunction(([g, l]) => {
        const tr = document.querySelector('tr.group[data-group="' + g + '"]');
        const tds = tr ? tr.querySelectorAll('td') : [];
        return tds.length > 2 && tds[2].textContent === l
          && document.querySelector('#group-table svg.spark polyline') !== null;
      }, [group, lag]);
    }
    await page.click('tr.group[data-group="' + group + '"]');
    await page.waitForSelector('#queue-table tbody tr');
    const rows = (sel) => page.$$eval(sel, (trs) => trs.map((tr) =>
      Array.from(tr.querySelectorAll('td')).map((td) => td.textContent)));
    const byName = (list) => Object.fromEntries(list.map((r) => [r[0], r]));
    const out = {
      title: await page.title(),
      brokers: await rows('#brokers tbody tr'),
      topics: byName(await rows('#topic-table tbody tr')),
      groups: byName(await rows('#group-table tbody tr')),
      queues: await rows('#queue-table tbody tr'),
      sparklines: await page.$$eval('#group-table svg.spark polyline', (p) => p.length),
    };
    // The forms: send a test message, then find it by its key.
    await page.fill('#sd-topic', topic);
    await page.fill('#sd-keys', 'from-the-page');
    await page.fill('#sd-body', 'sent from chromium');
    await page.click('#send-form button');
    await page.waitForFunction(() => /SEND_OK|error|failed/i.test(document.getElementById('send-out').textContent));
    out.sent = await page.textContent('#send-out');
    await page.fill('#lk-key', 'from-the-page');
    await page.fill('#lk-topic', topic);
    await page.click('#lookup-form button');
    await page.waitForFunction(() => document.getElementById('lookup-out').textContent.length > 0);
    out.found = await page.textContent('#lookup-out');
    await page.screenshot({ path: shot, fullPage: true });
    out.screenshot = shot;
    out.errors = errors;
    process.stdout.write(JSON.stringify(out) + '\n');
  } finally {
    await browser.close();
  }
}

main().catch((e) => {
  process.stdout.write(JSON.stringify({ fatal: String(e && e.stack || e) }) + '\n');
  process.exit(1);
});
