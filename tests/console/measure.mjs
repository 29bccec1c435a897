// The console's figures, printed (not a test): run by `cargo test --test integration
// console::console_figures -- --ignored --nocapture`, which starts the server with 1,000 leases
// held under `figures/` and, once this prints READY, grants and releases `figures/busy` as fast as
// it can, then writes how many events it caused on stdin.
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';
import { CHROMIUM_ARGS } from './chromium.mjs';

const CONSOLE = process.env.CONSOLE;
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const ms = (value) => `${value.toFixed(0)} ms`;

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM, args: CHROMIUM_ARGS });

// Load time: a new tab opens the list of `figures/` (1,000 leases), first page of 100 drawn; then
// the nine pages after it; then all 1,000 on two pages of 500.
const firstPage = [];
const nextPage = [];
const pageOf500 = [];
for (let round = 0; round < 5; round++) {
  const context = await browser.newContext();
  const page = await context.newPage();
  let started = performance.now();
  await page.goto(`${CONSOLE}/#prefix=figures/lease-`);
  await page.waitForFunction(() => document.body.dataset.listed === '100');
  firstPage.push(performance.now() - started);
  for (let index = 2; index <= 10; index++) {
    started = performance.now();
    await page.click('#next-page');
    await page.waitForFunction((n) => document.querySelector('#page-number').textContent === `page ${n}`, index);
    nextPage.push(performance.now() - started);
  }
  started = performance.now();
  await page.selectOption('#page-size', '500');
  await page.waitForFunction(() => document.body.dataset.listed === '500'
    && document.querySelector('#page-number').textContent === 'page 1');
  pageOf500.push(performance.now() - started);
  await context.close();
}
console.log(`list of 1,000 leases: a new tab shows the first 100 in ${ms(median(firstPage))} (median of 5; ` +
  `${firstPage.map(ms).join(', ')})`);
console.log(`  each next page of 100: median ${ms(median(nextPage))} (max ${ms(Math.max(...nextPage))}, ${nextPage.length} pages)`);
console.log(`  a page of 500: median ${ms(median(pageOf500))}`);

// Events: the lease view follows `figures/busy` while the driver churns it.
const context = await browser.newContext();
const page = await context.newPage();
await page.goto(`${CONSOLE}/#lease=figures/busy`);
await page.locator('#live', { hasText: 'live' }).waitFor();
const before = Number(await page.evaluate(() => document.body.dataset.events));
const samples = [];
const sampler = setInterval(async () => {
  samples.push([performance.now(), Number(await page.evaluate(() => document.body.dataset.events))]);
}, 500);
console.log('READY');
const lines = createInterface({ input: process.stdin });
const sent = Number(await new Promise((resolve) => lines.once('line', resolve)));
const stopped = performance.now();
// The page has caught up when it has seen every event sent (the snapshot came before).
let seen = 0;
while (performance.now() - stopped < 30_000) {
  seen = Number(await page.evaluate(() => document.body.dataset.events)) - before;
  if (seen >= sent) break;
  await new Promise((resolve) => setTimeout(resolve, 50));
}
clearInterval(sampler);
const behind = performance.now() - stopped;
const rates = [];
for (let index = 1; index < samples.length; index++) {
  const [t0, n0] = samples[index - 1];
  const [t1, n1] = samples[index];
  rates.push(((n1 - n0) * 1000) / (t1 - t0));
}
console.log(`events: the tab saw ${seen} of the ${sent} sent; it had them all ${ms(behind)} after the driver stopped` +
  ` (${seen >= sent ? 'caught up' : 'NOT caught up within 30 s'})`);
console.log(`  events/s the tab took in, per 0.5 s while the driver ran: median ${median(rates).toFixed(0)}, ` +
  `max ${Math.max(...rates).toFixed(0)}`);
const rendered = await page.locator('#events li').count();
console.log(`  events listed on the page: ${rendered} (it keeps the newest 200)`);
await browser.close();
process.exit(0);
