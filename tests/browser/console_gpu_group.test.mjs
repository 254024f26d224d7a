// A GPU group over two nodes from the console (issue 24), in headless
// Chromium: a leader and gpu-b, each with the NVML double's eight H100s
// (UUIDs of their own) and the fake engine that claims CUDA
// (tests/integration/fake_engine.py: no GPU here, so what is checked is
// the console and the admin, not a GPU's work).  The form deploys the demo
// model on 2 GPUs of each node; the list says so, and the detail's ranks
// table gives each node its ranks, its GPUs and its state.
//
// usage: node tests/browser/console_gpu_group.test.mjs BUILD_DIR SCREENSHOT_DIR
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..', '..');
const BUILD = path.resolve(ROOT, process.argv[2] || 'build');
const SHOTS = path.resolve(ROOT, process.argv[3] || path.join(BUILD, 'screenshots'));
const PW = 'correct horse battery staple';
const children = [];
let passed = 0, failed = 0;

function check(cond, what, detail = '') {
  if (cond) passed++;
  else { failed++; console.log(`FAIL: ${what} ${detail}`); }
}

function startAdmin(tmp, name, node, engine, extraArgs, extraEnv = {}) {
  const state = path.join(tmp, name);
  fs.mkdirSync(state, { recursive: true });
  fs.writeFileSync(`${state}.pw`, `${PW}\n`);
  const log = fs.openSync(`${state}.log`, 'a');
  const env = { ...process.env, PRIVAI_ADMIN_PASSWORD_FILE: `${state}.pw`, PRIVAI_ENGINE_RUNNER: 'child',
    PRIVAI_NVML_LIB: path.join(BUILD, 'libnvml-double.so'), PRIVAI_NVML_DOUBLE_NODE: String(node), PRIVAI_NVML_DOUBLE_MIG: '0',
    PRIVAI_NVML_DOUBLE_STATE: `${state}.nvml`, FAKE_ENGINE_DIR: path.join(tmp, 'fake'), ...extraEnv };
  const p = spawn(path.join(BUILD, 'privai-admin'), ['--dev', '--port', '0', '--state-dir', state, '--node-name', name,
    '--webui', path.join(ROOT, 'webui'), '--heartbeat-s', '1', '--engine', engine, ...extraArgs],
  { env, stdio: ['ignore', log, log] });
  children.push(p);
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const poll = setInterval(() => {
      const m = fs.readFileSync(`${state}.log`, 'utf8').match(/console on (http:\/\/127\.0\.0\.1:\d+)\//);
      if (m) { clearInterval(poll); resolve({ url: m[1], proc: p, log: `${state}.log` }); }
      else if (p.exitCode !== null || Date.now() - t0 > 20000) { clearInterval(poll); reject(new Error(`${name} did not start`)); }
    }, 50);
  });
}

async function until(fn, ms = 30000) {
  const t0 = Date.now();
  for (;;) {
    const v = await fn();
    if (v || Date.now() - t0 > ms) return v;
    await new Promise((r) => setTimeout(r, 300));
  }
}

async function main() {
  fs.mkdirSync(SHOTS, { recursive: true });
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'privai-gpu-group-ui-'));
  const engine = path.join(tmp, 'fake_engine.py');
  fs.copyFileSync(path.join(ROOT, 'tests', 'integration', 'fake_engine.py'), engine);
  fs.chmodSync(engine, 0o755);
  fs.mkdirSync(path.join(tmp, 'fake'));
  const demo = path.join(BUILD, 'demo', 'privai-demo.gguf');
  let browser = null, leader = null;
  try {
    leader = await startAdmin(tmp, 'gpu-leader', 1, engine, ['--engine-ports', '19260-19264', '--demo-model', demo]);
    browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-dev-shm-usage'] });
    const page = await browser.newPage({ viewport: { width: 1366, height: 900 } });
    page.setDefaultTimeout(20000);
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(leader.url);
    await page.getByLabel('User name').fill('admin');
    await page.getByLabel('Password', { exact: true }).fill(PW);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { level: 1, name: 'Dashboard' }).waitFor();
    const rq = page.request;
    // gpu-b joins with a token made on the Nodes page
    await page.goto(`${leader.url}/#/nodes`);
    await page.getByRole('heading', { level: 1, name: 'Nodes' }).waitFor();
    await page.getByRole('button', { name: 'Create a join token' }).click();
    const tok = (await page.locator('#join-token').textContent()).trim();
    await startAdmin(tmp, 'gpu-b', 2, engine, ['--engine-ports', '19265-19269', '--join', leader.url],
      { PRIVAI_JOIN_TOKEN: tok });
    const gpusOf = async (node) => (await (await rq.get(`${leader.url}/api/v1/gpus`)).json()).data
      .filter((g) => g.node === node).sort((a, b) => a.index - b.index).map((g) => g.uuid);
    check(await until(async () => (await gpusOf('gpu-b')).length === 8), 'gpu-b joined with its eight GPUs');
    const ul = await gpusOf('gpu-leader'), ub = await gpusOf('gpu-b');

    await page.goto(`${leader.url}/#/deployments`);
    await page.getByRole('heading', { level: 1, name: 'Deployments' }).waitFor();
    const form = page.getByRole('form', { name: 'New deployment' });
    await form.getByLabel('Name').fill('big');
    await form.getByLabel(/^Tensor-parallel ranks/).fill('gpu-leader, gpu-b');
    await form.getByLabel(/^Split on GPUs/).fill('2');
    await form.getByRole('button', { name: 'Deploy' }).click();
    await page.getByText('API key for big').waitFor().catch(async (e) => {
      throw new Error(`${e.message}; the page says: ${await page.locator('#main').innerText()}`);
    });
    const row = page.locator('tr', { hasText: 'big' });
    await row.waitFor();
    check((await row.textContent()).includes('GPU, 2 on each of 2 nodes (tensor parallel 4)') &&
      (await row.textContent()).includes('gpu-leader + gpu-b'), 'the list says 2 GPUs on each of two nodes',
    await row.textContent());
    // gpu-b's report of its part comes with its next heartbeat
    check(await until(async () => {
      const d = (await (await rq.get(`${leader.url}/api/v1/deployments`)).json()).data.find((x) => x.name === 'big');
      return d && d.state === 'ready' && d.ranks[1].state === 'ready';
    }), 'both nodes\' parts run');
    // the detail shows the row as the list last drew it
    await row.getByText('2 of 2 ranks up').waitFor({ timeout: 30000 });
    await row.getByRole('button', { name: 'big', exact: true }).click();
    const ranks = page.getByRole('table', { name: 'Ranks of big' });
    await ranks.locator('tr', { hasText: 'gpu-b' }).getByText('ready', { exact: true }).waitFor({ timeout: 30000 })
      .catch(async (e) => { throw new Error(`${e.message}; the page says: ${await page.locator('#main').innerText()}`); });
    const rows = await ranks.locator('tbody tr').allTextContents();
    const short = (u) => u.slice(-6);
    check(rows.length === 2 && rows[0].startsWith('0–1gpu-leader') && rows[0].includes(`${short(ul[0])}, ${short(ul[1])}`) &&
      rows[1].startsWith('2–3gpu-b') && rows[1].includes(`${short(ub[0])}, ${short(ub[1])}`),
    'each node\'s ranks and GPUs: 0–1 on the leader\'s first two, 2–3 on gpu-b\'s', rows.join(' | '));
    const title = await ranks.locator('tr', { hasText: 'gpu-b' }).locator('span[title]').getAttribute('title');
    check(title === ub.slice(0, 2).join('\n'), 'the GPUs\' whole UUIDs on hover', title);
    check(await page.locator('p.muted', { hasText: '2 of 2 ranks up' }).count() === 1, 'the detail counts the ranks up');
    await page.screenshot({ path: path.join(SHOTS, '05d-deployment-gpu-group.png'), fullPage: true });
    check(errors.length === 0, 'no script errors', errors.join(' | '));
  } catch (e) {
    check(false, 'the browser suite ran to the end', e.stack);
  } finally {
    if (browser) await browser.close();
    for (const p of children) p.kill('SIGTERM');
    await Promise.all(children.map((p) => new Promise((r) => { if (p.exitCode !== null) r(); else p.on('exit', r); })));
    if (failed) {
      for (const f of fs.readdirSync(tmp).filter((x) => x.endsWith('.log'))) {
        console.log(`--- ${f}\n${fs.readFileSync(path.join(tmp, f), 'utf8').split('\n').slice(-20).join('\n')}`);
      }
    }
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  console.log(`${passed} passed, ${failed} failed, 0 skipped`);
  process.exit(failed ? 1 : 0);
}

main();
