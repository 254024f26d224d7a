// The console's metrics and tasks pages (issue 23) in headless Chromium against a
// live privai-admin that samples every second: this node from a procfs
// fixture, the eight GPUs and two MIG instances of the NVML double, and a
// real engine serving the tiny fixture model.  Each chart is drawn by
// uPlot with its axes and units, the newest values read as NVML and the
// fixture give them, the range buttons ask the server for that range.
// The tasks page shows an upload's progress while its bytes arrive and
// how it ended, and a deployment's start; a table's filter box keeps the
// rows with its words.
//
// usage: node tests/browser/console_ops.test.mjs BUILD_DIR SCREENSHOT_DIR
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..', '..');
const BUILD = path.resolve(ROOT, process.argv[2] || 'build');
const SHOTS = path.resolve(ROOT, process.argv[3] || path.join(BUILD, 'screenshots'));
const MODEL = path.join(ROOT, '..', 'shared', 'fixtures', 'models', 'tiny-llama-spm-f16.gguf');
const PW = 'correct horse battery staple';
let passed = 0, failed = 0;

function check(cond, what, detail = '') {
  if (cond) passed++;
  else { failed++; console.log(`FAIL: ${what} ${detail}`); }
}

function fixtureHost(dir) {
  fs.mkdirSync(path.join(dir, 'proc', 'net'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'proc', 'meminfo'), 'MemTotal: 65536000 kB\nMemFree: 1000000 kB\nMemAvailable: 16384000 kB\n');
  fs.writeFileSync(path.join(dir, 'proc', 'stat'), 'cpu  100 0 0 300 0 0 0 0 0 0\n');
  fs.writeFileSync(path.join(dir, 'proc', 'loadavg'), '0.75 0.50 0.25 1/100 4242\n');
  fs.writeFileSync(path.join(dir, 'proc', 'net', 'dev'), 'h1\nh2\n  eth0: 1000 1 0 0 0 0 0 0 2000 1 0 0 0 0 0 0\n');
}

function startAdmin(tmp) {
  const state = path.join(tmp, 'state');
  const models = path.join(tmp, 'models');
  fs.mkdirSync(state, { recursive: true });
  fs.mkdirSync(models, { recursive: true });
  fs.copyFileSync(MODEL, path.join(models, 'tiny.gguf'));
  fixtureHost(path.join(tmp, 'host'));
  fs.writeFileSync(path.join(tmp, 'nvml-state'), '0 19 0 1\n0 14 2 2\n');
  fs.writeFileSync(`${state}.pw`, `${PW}\n`);
  const log = fs.openSync(`${state}.log`, 'a');
  const p = spawn(path.join(BUILD, 'privai-admin'), ['--dev', '--port', '0', '--state-dir', state, '--node-name', 'metrics',
    '--webui', path.join(ROOT, 'webui'), '--engine-ports', '19290-19299', '--model-root', models,
    '--sys-root', path.join(tmp, 'host'), '--metrics-interval-s', '1'],
  { env: { ...process.env, PRIVAI_ADMIN_PASSWORD_FILE: `${state}.pw`, PRIVAI_ENGINE_RUNNER: 'child',
    PRIVAI_NVML_LIB: path.join(BUILD, 'libnvml-double.so'), PRIVAI_NVML_DOUBLE_STATE: path.join(tmp, 'nvml-state') },
  stdio: ['ignore', log, log] });
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const poll = setInterval(() => {
      const m = fs.readFileSync(`${state}.log`, 'utf8').match(/console on (http:\/\/127\.0\.0\.1:\d+)\//);
      if (m) { clearInterval(poll); resolve({ url: m[1], proc: p, log: `${state}.log`, models }); }
      else if (p.exitCode !== null || Date.now() - t0 > 20000) { clearInterval(poll); reject(new Error('the admin did not start')); }
    }, 50);
  });
}

async function visit(page, hash, title = 'Metrics') {
  await page.goto(`${page.baseUrl}/#/${hash}`);
  await page.getByRole('heading', { level: 1, name: title }).waitFor();
  await page.locator('#main:not([aria-busy])').waitFor();
}

const caption = (page, title) => page.locator(`figure[data-chart="${title}"] figcaption`);

// PUT half the body, then a little more once a second has passed (the
// server stores progress at most once a second, as bytes come), and leave
// the request open; resolves with the function that sends the rest.
function slowPut(admin, cookie, csrf, id, size) {
  const u = new URL(admin.url);
  return new Promise((resolve) => {
    const req = http.request({ host: u.hostname, port: u.port, method: 'PUT', path: `/api/v1/uploads/${id}?offset=0`,
      headers: { Cookie: cookie, 'X-CSRF-Token': csrf, 'Content-Type': 'application/octet-stream', 'Content-Length': size } });
    const answered = new Promise((ok) => req.on('response', (res) => { res.resume(); res.on('end', () => ok(res.statusCode)); }));
    req.write(Buffer.alloc(size / 2));
    setTimeout(() => {
      req.write(Buffer.alloc(4096));
      setTimeout(() => resolve(() => { req.end(Buffer.alloc(size / 2 - 4096)); return answered; }), 700);
    }, 1300);
  });
}

async function tasksPage(page, admin, csrf) {
  const cookie = (await page.context().cookies()).map((c) => `${c.name}=${c.value}`).join('; ');
  const size = 8 << 20;
  const up = await (await page.request.post(`${admin.url}/api/v1/uploads`, { data: { name: 'slow', size },
    headers: { 'X-CSRF-Token': csrf } })).json();
  const finish = await slowPut(admin, cookie, csrf, up.id, size);
  await page.locator('#nav a[href="#/tasks"]').click();
  await page.getByRole('heading', { level: 1, name: 'Tasks' }).waitFor();
  await page.locator('#main:not([aria-busy])').waitFor();
  const row = page.locator('tr', { hasText: 'slow' });
  await row.waitFor();
  const mid = Number(await row.locator('progress').getAttribute('value'));
  check(/running/.test(await row.textContent()) && mid >= 45 && mid <= 55 && /\d+ %/.test(await row.textContent()),
    'an upload under way shows its progress from the server (about 50 %)', `${mid} ${await row.textContent()}`);
  await page.screenshot({ path: path.join(SHOTS, 'tasks-upload-running-1366.png'), fullPage: true });
  const status = await finish();
  // the page polls each second while a task runs: the end shows by itself
  await page.locator('tr', { hasText: 'slow' }).filter({ hasText: 'failed' }).waitFor({ timeout: 10000 }).catch(() => {});
  const ended = await page.locator('tr', { hasText: 'slow' }).textContent();
  check(status === 422 && /failed/.test(ended) && /not a usable GGUF file/.test(ended),
    'the upload\'s end shows without a reload: failed, with the reason', `${status} ${ended}`);
  const start = page.locator('tr', { hasText: 'Deployment start' }).filter({ hasText: 'tiny' });
  check(/done/.test(await start.textContent()) && /100 %/.test(await start.textContent()) && /ready/.test(await start.textContent()),
    'the deployment\'s start is a task, done', await start.textContent());
  await start.getByRole('button', { name: /^Log of task/ }).click();
  const log = page.locator('section[aria-label^="Log of task"] pre');
  await log.waitFor();
  check(/loading the model/.test(await log.textContent()) && /done/.test(await log.textContent()), 'a task\'s log',
    await log.textContent());
  await page.reload();
  await page.getByRole('heading', { level: 1, name: 'Tasks' }).waitFor();
  await page.locator('tr', { hasText: 'slow' }).waitFor();
  check(await page.locator('tr', { hasText: 'slow' }).filter({ hasText: 'failed' }).count() === 1, 'kept after a reload');
  await page.screenshot({ path: path.join(SHOTS, 'tasks-1366.png'), fullPage: true });

  // the filter box, on a table of more than 5 rows (the audit log)
  await visit(page, 'audit', 'Audit log');
  const rows = page.locator('table tbody tr');
  const before = await rows.count();
  const box = page.getByLabel('Filter Audit entries, newest first');
  await box.fill('upload_begin');
  const after = await rows.allTextContents();
  check(before > 5 && after.length >= 1 && after.length < before && after.every((t) => t.includes('upload_begin')),
    'a table\'s filter keeps the rows with its words', `${before} -> ${after.length}`);
  await box.fill('no-such-words-anywhere');
  check(await rows.count() === 0 && await page.getByText('No row has those words.').isVisible(), 'and says when none has them');
  await box.fill('');
  check(await rows.count() === before, 'emptied, every row is back');
}

async function main() {
  fs.mkdirSync(SHOTS, { recursive: true });
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'privai-metrics-ui-'));
  const admin = await startAdmin(tmp);
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-dev-shm-usage'] });
  const page = await browser.newPage({ viewport: { width: 1366, height: 900 } });
  page.baseUrl = admin.url;
  page.setDefaultTimeout(20000);
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error' && !/status of 4\d\d/.test(m.text())) errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(String(e)));
  try {
    await page.goto(admin.url);
    await page.getByLabel('User name').fill('admin');
    await page.getByLabel('Password', { exact: true }).fill(PW);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { level: 1, name: 'Dashboard' }).waitFor();
    const rq = page.request;
    // a few samples first, so each chart has a line to draw
    for (let i = 0; i < 100; i++) {
      const s = await (await rq.get(`${admin.url}/api/v1/metrics/history?subject=node:1`)).json();
      if (s.t && s.t.length >= 3) break;
      await page.waitForTimeout(200);
    }

    // the node: memory and load as the fixture says, with uPlot's axes
    await page.locator('#nav a[href="#/metrics"]').click();
    await page.getByRole('heading', { level: 1, name: 'Metrics' }).waitFor();
    await page.locator('#main:not([aria-busy])').waitFor();
    const groups = await page.locator('#metrics-subject optgroup').evaluateAll((g) => g.map((x) => x.label));
    check(JSON.stringify(groups) === JSON.stringify(['Nodes', 'GPUs', 'MIG instances']), 'subjects grouped by kind', groups);
    const mem = caption(page, 'Memory');
    await mem.waitFor();
    check(/in use 46\.9 GiB\s*total 62\.5 GiB/.test(await mem.textContent()), 'the node\'s memory in GiB, as meminfo says',
      await mem.textContent());
    check(/load 0\.75 runnable/.test(await caption(page, 'Load average (1 min)').textContent()), 'the load average');
    const fig = page.locator('figure[data-chart="Memory"]');
    // uPlot draws axes, ticks and lines on its canvas: the series' colours
    // (a few pixels: seconds of samples at the right end of an hour)
    // must be there, with the two axes laid out beside the plot
    const inked = await fig.locator('canvas').evaluate((c) => {
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      let used = 0, total = 0, dark = 0;
      for (let i = 0; i < d.length; i += 4) {
        if (d[i] === 31 && d[i + 1] === 95 && d[i + 2] === 191) used++;
        if (d[i] === 194 && d[i + 1] === 65 && d[i + 2] === 12) total++;
        if (d[i + 3] > 200 && d[i] < 80 && d[i + 1] < 80 && d[i + 2] < 80) dark++;
      }
      return { used, total, dark };
    });
    check(await fig.locator('canvas').count() === 1 && await fig.locator('.u-axis').count() === 2 &&
      inked.used >= 3 && inked.total >= 3 && inked.dark > 50, 'a uPlot chart: both series drawn, with axes and their text',
    JSON.stringify(inked));
    const legend = await fig.locator('figcaption .chart-now').evaluateAll((s) => s.map((x) =>
      [x.textContent.split(' ')[0], getComputedStyle(x.querySelector('.swatch')).backgroundColor]));
    check(JSON.stringify(legend) === JSON.stringify([['in', 'rgb(31, 95, 191)'], ['total', 'rgb(194, 65, 12)']]),
      'the caption names each series with its colour', JSON.stringify(legend));
    await page.screenshot({ path: path.join(SHOTS, 'metrics-node-1366.png'), fullPage: true });

    // a range button asks the server for that range
    const asked = page.waitForRequest((r) => /\/api\/v1\/metrics\/history\?.*range=24h/.test(r.url()));
    await page.getByRole('button', { name: '24 h' }).click();
    await asked;
    check(await page.getByRole('button', { name: '24 h' }).getAttribute('aria-pressed') === 'true' &&
      await page.getByRole('button', { name: '1 h' }).getAttribute('aria-pressed') === 'false', 'the chosen range is pressed');

    // GPU 3 of the double: its recorded telemetry
    const gpu3 = await page.locator('#metrics-subject option', { hasText: 'GPU 3' }).getAttribute('value');
    await page.locator('#metrics-subject').selectOption(gpu3);
    await page.locator('figure[data-chart="Temperature"]').waitFor();
    check(/GPU 34\.0 °C/.test(await caption(page, 'Temperature').textContent()), 'GPU 3 at 34 °C',
      await caption(page, 'Temperature').textContent());
    check(/draw 73\.0 W/.test(await caption(page, 'Power').textContent()), 'GPU 3 draws 73 W');
    check(/SMs busy 50\.0 %/.test(await caption(page, 'Utilization').textContent()), 'GPU 3 50 % busy');
    check(/corrected 3\.00 errors\s*uncorrected 0\.00 errors/.test(await caption(page, 'ECC errors since the driver loaded').textContent()),
      'GPU 3\'s ECC counts', await caption(page, 'ECC errors since the driver loaded').textContent());
    await page.screenshot({ path: path.join(SHOTS, 'metrics-gpu-1366.png'), fullPage: true });
    const mig = await page.locator('#metrics-subject optgroup[label="MIG instances"] option').first().getAttribute('value');
    await page.locator('#metrics-subject').selectOption(mig);
    await page.waitForFunction(() => document.querySelectorAll('#main .charts figure').length === 1);
    const migCharts = await page.locator('#main .charts figure').evaluateAll((f) => f.map((x) => x.dataset.chart));
    check(JSON.stringify(migCharts) === JSON.stringify(['Memory']) && /total 9\.63 GiB/.test(await caption(page, 'Memory').textContent()),
      'a MIG instance: its memory only (1g.10gb: 9856 MiB)', `${migCharts} ${await caption(page, 'Memory').textContent()}`);

    // a deployment: served requests show up as throughput
    const csrf = await page.evaluate(async () => (await (await fetch('/api/v1/auth/me')).json()).csrf_token);
    const H = { 'X-CSRF-Token': csrf };
    await rq.post(`${admin.url}/api/v1/models`, { data: { name: 'tiny', path: path.join(admin.models, 'tiny.gguf') }, headers: H });
    const dep = await (await rq.post(`${admin.url}/api/v1/deployments`, { data: { name: 'tiny', model: 'tiny',
      placement: { kind: 'cpu', threads: 1 }, options: { ctx: 256 } }, headers: H })).json();
    let ready = false;
    for (let i = 0; i < 300 && !ready; i++) {
      const d = await (await rq.get(`${admin.url}/api/v1/deployments/${dep.id}`)).json();
      ready = d.state === 'ready';
      if (!ready) await page.waitForTimeout(300);
    }
    await page.waitForTimeout(2500); // a baseline scrape
    for (let i = 0; i < 2; i++)
      await rq.post(`${admin.url}/api/v1/deployments/${dep.id}/v1/completions`, { headers: H,
        data: { model: 'tiny', prompt: 'Once upon a time', max_tokens: 16, temperature: 0, ignore_eos: true } });
    await page.waitForTimeout(2500);
    await visit(page, `metrics?subject=deployment:${dep.id}&range=1h`);
    const shown = await page.locator('#main .charts figure').evaluateAll((f) => f.map((x) => x.dataset.chart));
    check(['Throughput', 'Requests', 'Time to first token', 'Inter-token latency', 'Queue', 'KV cache in use']
      .every((t) => shown.includes(t)), 'a deployment\'s charts', shown);
    check(await page.locator('#metrics-subject').inputValue() === `deployment:${dep.id}`, 'the subject is taken from the address');
    const plotted = await page.locator('figure[data-chart="Throughput"] canvas').count();
    check(plotted === 1 && /generated \d/.test(await caption(page, 'Throughput').textContent()), 'throughput charted',
      await caption(page, 'Throughput').textContent());
    await page.screenshot({ path: path.join(SHOTS, 'metrics-deployment-1366.png'), fullPage: true });
    await page.setViewportSize({ width: 800, height: 900 });
    await visit(page, `metrics?subject=deployment:${dep.id}`);
    const w = await page.evaluate(() => document.documentElement.scrollWidth);
    check(w <= 800, 'the metrics page fits 800 px', w);
    await page.screenshot({ path: path.join(SHOTS, 'metrics-deployment-800.png'), fullPage: true });
    await page.setViewportSize({ width: 1366, height: 900 });
    await tasksPage(page, admin, csrf);
    check(errors.length === 0, 'no script errors', errors.join(' | '));
  } catch (e) {
    check(false, 'the suite ran to the end', e.stack);
    await page.screenshot({ path: path.join(SHOTS, 'metrics-failure.png') }).catch(() => {});
  } finally {
    await browser.close();
    admin.proc.kill('SIGTERM');
    await new Promise((r) => { if (admin.proc.exitCode !== null) r(); else admin.proc.on('exit', r); });
    if (failed) console.log(fs.readFileSync(admin.log, 'utf8').split('\n').slice(-40).join('\n'));
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  console.log(`${passed} passed, ${failed} failed, 0 skipped`);
  process.exit(failed ? 1 : 0);
}

main();
