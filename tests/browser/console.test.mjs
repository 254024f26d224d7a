// The web console in Debian's headless Chromium (playwright-core, no
// browser download): sign in, upload the fixture model with its progress
// bar, deploy it on CPU, chat with it, build a MIG layout on the simulated
// H100 node, join a second privai-admin, and take a screenshot of every
// page.  Each page is also checked for a heading, labelled controls, and
// no console errors or CSP violations.
//
// usage: node tests/browser/console.test.mjs BUILD_DIR SCREENSHOT_DIR
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..', '..');
const BUILD = path.resolve(ROOT, process.argv[2] || 'build');
const SHOTS = path.resolve(ROOT, process.argv[3] || path.join(BUILD, 'screenshots'));
const FIXTURE = path.resolve(ROOT, '..', 'shared', 'fixtures', 'models', 'tiny-llama-spm-q4_0.gguf');
const PW = 'correct horse battery staple';
let passed = 0, failed = 0;
const children = [];

function check(cond, what, detail = '') {
  if (cond) passed++;
  else { failed++; console.log(`FAIL: ${what} ${detail}`); }
}

function startAdmin(tmp, name, extraArgs, extraEnv, tls = false) {
  const state = path.join(tmp, name);
  fs.mkdirSync(state, { recursive: true });
  fs.writeFileSync(`${state}.pw`, `${PW}\n`);
  const log = fs.openSync(`${state}.log`, 'a');
  const env = { ...process.env, PRIVAI_ADMIN_PASSWORD_FILE: `${state}.pw`, PRIVAI_NVML_LIB: path.join(BUILD, 'libnvml-double.so'),
    PRIVAI_NVML_DOUBLE_STATE: `${state}.nvml`, ...extraEnv };
  const p = spawn(path.join(BUILD, 'privai-admin'), [...(tls ? [] : ['--dev']), '--port', '0', '--state-dir', state, '--node-name', name,
    '--webui', path.join(ROOT, 'webui'), '--heartbeat-s', '1', ...extraArgs], { env, stdio: ['ignore', log, log] });
  children.push(p);
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const poll = setInterval(() => {
      const m = fs.readFileSync(`${state}.log`, 'utf8').match(/console on (https?:\/\/127\.0\.0\.1:\d+)\//);
      if (m) { clearInterval(poll); resolve({ url: m[1], proc: p, log: `${state}.log` }); }
      else if (p.exitCode !== null || Date.now() - t0 > 20000) { clearInterval(poll); reject(new Error(`${name} did not start`)); }
    }, 50);
  });
}

async function shot(page, name) {
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
}

// Structure a screen reader needs: one h1, every control labelled, a main landmark.
async function accessible(page, name) {
  const r = await page.evaluate(() => {
    const unlabelled = [...document.querySelectorAll('main input, main select, main textarea')].filter((el) =>
      !el.closest('label') && !el.getAttribute('aria-label') && !(el.id && document.querySelector(`label[for="${el.id}"]`)));
    const unnamed = [...document.querySelectorAll('button')].filter((b) => !(b.textContent.trim() || b.getAttribute('aria-label')));
    // text drawn in the colour of what is behind it (a white link on a white card) cannot be read
    const behind = (el) => {
      for (let e = el; e; e = e.parentElement) {
        const c = getComputedStyle(e).backgroundColor;
        if (c !== 'rgba(0, 0, 0, 0)' && c !== 'transparent') return c;
      }
      return 'rgb(255, 255, 255)';
    };
    const invisible = [...document.querySelectorAll('main button, main a, main td, main dd, main label')].filter((el) =>
      el.textContent.trim() && getComputedStyle(el).color === behind(el)).map((el) => el.textContent.trim().slice(0, 30));
    return { h1: document.querySelectorAll('main h1').length, unlabelled: unlabelled.map((e) => e.name), unnamed: unnamed.length,
      lang: document.documentElement.lang, invisible };
  });
  check(r.h1 === 1 && r.unlabelled.length === 0 && r.unnamed === 0 && r.lang === 'en', `${name}: heading, labels, names`,
    JSON.stringify(r));
  check(r.invisible.length === 0, `${name}: no text in its background's colour`, JSON.stringify(r.invisible));
}

async function visit(page, hash, heading) {
  await page.goto(`${page.baseUrl}/#/${hash}`);
  await page.getByRole('heading', { level: 1, name: heading }).waitFor();
  // a hash change is a same-document navigation: no load state to wait
  // for, so wait for the console to say the page's data is drawn
  await page.locator('#main:not([aria-busy])').waitFor();
}

// An HTTPS console: replace its self-signed certificate with one a test
// CA signed (files made here with openssl), from the Settings page.
async function replaceCertificate(browser, tmp, errors) {
  const pki = path.join(tmp, 'pki');
  fs.mkdirSync(pki);
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  const ossl = (...a) => execFileSync('openssl', a, { cwd: pki, stdio: 'ignore' });
  ossl('req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-subj', '/CN=privai test CA', '-days', '30');
  ossl('req', ...ec, '-keyout', 'leaf.key', '-out', 'leaf.csr', '-subj', '/CN=127.0.0.1');
  fs.writeFileSync(path.join(pki, 'ext'), 'subjectAltName=IP:127.0.0.1\n');
  ossl('x509', '-req', '-in', 'leaf.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'leaf.pem',
    '-days', '20', '-extfile', 'ext');
  fs.writeFileSync(path.join(pki, 'chain.pem'), fs.readFileSync(path.join(pki, 'leaf.pem'), 'utf8') +
    fs.readFileSync(path.join(pki, 'ca.pem'), 'utf8'));
  const secure = await startAdmin(tmp, 'secure', ['--engine-ports', '19120-19129'], {}, true);
  const ctx = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1280, height: 900 } });
  const page = await ctx.newPage();
  page.baseUrl = secure.url;
  page.setDefaultTimeout(30000);
  page.on('console', (m) => { if (m.type() === 'error' && !/status of 4\d\d/.test(m.text())) errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(secure.url);
  await page.getByLabel('User name').fill('admin');
  await page.getByLabel('Password').fill(PW);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { level: 1, name: 'Dashboard' }).waitFor();
  // a page still loading when the next one is chosen (its GPUs answer
  // 2 s late here) must neither draw into the next page nor end its busy state
  await page.route('**/api/v1/gpus', async (r) => { await new Promise((ok) => setTimeout(ok, 2000)); await r.continue(); });
  await page.evaluate(() => { location.hash = '#/overview'; });
  await visit(page, 'settings', 'Settings');
  await page.waitForTimeout(2500);
  check(await page.getByRole('heading', { level: 2, name: 'Engines' }).count() === 0,
    'a page left while loading does not draw into the next one');
  await page.unroute('**/api/v1/gpus');
  check(await page.getByText('(self-signed)').count() === 1, 'HTTPS console: the generated certificate is self-signed');
  await page.getByLabel(/^Certificate chain/).setInputFiles(path.join(pki, 'ca.pem'));
  await page.getByLabel(/^Private key/).setInputFiles(path.join(pki, 'leaf.key'));
  await page.getByRole('button', { name: 'Replace certificate' }).click();
  await page.getByRole('alert').filter({ hasText: /does not belong/ }).waitFor();
  check(true, 'a key that is not the certificate\'s is refused in words');
  await page.getByLabel(/^Certificate chain/).setInputFiles(path.join(pki, 'chain.pem'));
  await page.getByRole('button', { name: 'Replace certificate' }).click();
  await page.getByText(/Certificate replaced/).waitFor();
  await page.getByText('CN=privai test CA', { exact: true }).waitFor();
  check(await page.getByText('2 certificates').count() === 1, 'replaced from the console: issuer and chain shown');
  // a backup made here, then uploaded as if it came from elsewhere
  await page.getByRole('button', { name: 'Back up now' }).click();
  await page.locator('td a', { hasText: /^privai-\d/ }).waitFor();
  const made = fs.readdirSync(path.join(tmp, 'secure', 'backups')).find((f) => f.endsWith('.db'));
  fs.copyFileSync(path.join(tmp, 'secure', 'backups', made), path.join(pki, 'archived.db'));
  fs.copyFileSync(path.join(pki, 'ca.pem'), path.join(pki, 'not-a-backup.db'));
  const upForm = page.getByRole('form', { name: 'Upload a backup' });
  await upForm.getByLabel(/^A backup file/).setInputFiles(path.join(pki, 'not-a-backup.db'));
  await upForm.getByRole('button', { name: 'Upload backup' }).click();
  await page.getByRole('alert').filter({ hasText: /not a privai backup/ }).waitFor();
  await upForm.getByLabel(/^A backup file/).setInputFiles(path.join(pki, 'archived.db'));
  await upForm.getByRole('button', { name: 'Upload backup' }).click();
  await page.locator('td a', { hasText: /^privai-upload-/ }).waitFor();
  check(true, 'a backup uploaded from the console is checked and listed (a PEM file is refused)');
  await shot(page, '11-settings-tls');
  await accessible(page, 'settings (TLS, backups)');
  await ctx.close();
}

async function main() {
  fs.mkdirSync(SHOTS, { recursive: true });
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'privai-browser-'));
  const leader = await startAdmin(tmp, 'leader', ['--engine-ports', '19100-19109'], {});
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-dev-shm-usage'] });
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.baseUrl = leader.url;
  page.setDefaultTimeout(30000);
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error' && !/status of 4\d\d/.test(m.text())) errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(String(e)));
  try {
    // sign in: a wrong password is refused in words, then the right one
    await page.goto(leader.url);
    await page.getByLabel('User name').fill('admin');
    await page.getByLabel('Password').fill('wrong password here');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('alert').filter({ hasText: /password/i }).waitFor();
    check(true, 'a wrong password is refused in words');
    await shot(page, '01-login');
    await accessible(page, 'login');
    await page.getByLabel('Password').fill(PW);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { level: 1, name: 'Dashboard' }).waitFor();
    check(await page.locator('nav a[aria-current="page"]').textContent() === 'Dashboard', 'signed in: dashboard current');
    const cookie = (await page.context().cookies()).find((c) => c.name === 'privai_session');
    check(cookie && cookie.httpOnly && cookie.sameSite === 'Strict', 'session cookie HttpOnly, SameSite=Strict');

    // import the fixture model by upload, with the progress bar
    await visit(page, 'models', 'Models');
    const up = page.getByRole('form', { name: 'Upload a GGUF file' });
    await up.getByLabel('Name').fill('tiny-q4');
    await up.getByLabel('GGUF file').setInputFiles(FIXTURE);
    // the first part's connection drops: the console asks what was kept and goes on
    let puts = 0;
    const dropFirst = (route) => (route.request().method() === 'PUT' && puts++ === 0 ? route.abort('connectionreset') : route.continue());
    await page.route('**/api/v1/uploads/*', dropFirst);
    const before = errors.length;
    await up.getByRole('button', { name: 'Upload' }).click();
    await page.getByText('Uploaded and checked').waitFor({ timeout: 60000 });
    await page.unroute('**/api/v1/uploads/*', dropFirst);
    check(puts === 2, 'a part whose connection dropped is sent again from what the admin kept', puts);
    // the dropped request is the one error the browser logs for it
    if (errors.length === before + 1 && /ERR_CONNECTION_RESET|ERR_FAILED/.test(errors[before])) errors.pop();
    check(await page.getByRole('progressbar', { name: 'Upload progress' }).getAttribute('value') === '100', 'progress bar reached 100');
    const row = page.locator('tr', { hasText: 'tiny-q4' });
    await row.getByText('ready').waitFor();
    check(await row.getByText('llama').count() > 0, 'uploaded model listed with its architecture');
    await row.getByRole('button', { name: 'tiny-q4', exact: true }).click();
    await page.getByRole('heading', { name: 'tiny-q4', level: 2 }).waitFor();
    await page.getByRole('button', { name: 'Size it' }).click();
    await page.locator('dl.facts', { hasText: 'KV cache per token' }).waitFor();
    check(true, 'model details and sizing shown');
    const dl = page.locator('dl', { hasText: 'Architecture' });
    check(await dl.locator('dt').first().textContent() === 'Kind' && await dl.locator('dd').first().textContent() === 'model' &&
      await dl.locator('dt').nth(2).textContent() === 'Architecture' && await dl.locator('dd').nth(2).textContent() === 'llama' &&
      !(await dl.textContent()).includes('[object'), 'the GGUF metadata is drawn as terms and values', await dl.textContent());
    // an upload left half-way is listed, and can be discarded
    await page.evaluate(async () => {
      const { api } = await import('/js/api.js');
      await api('POST', '/api/v1/uploads', { name: 'half-sent', size: 1000 });
    });
    const urow = page.locator('tr', { hasText: 'half-sent' });
    await urow.waitFor({ timeout: 10000 });
    check((await urow.textContent()).includes('0 B of 1000 B'),
      'an unfinished upload is listed with what was received', await urow.textContent());
    await shot(page, '02b-unfinished-upload');
    page.once('dialog', (d) => d.accept());
    await urow.getByRole('button', { name: 'Discard upload half-sent' }).click();
    await urow.waitFor({ state: 'detached' });
    check(true, 'and discarded');
    await shot(page, '02-models');
    await accessible(page, 'models');

    // deploy it on CPU and chat through the admin's proxy
    await visit(page, 'deployments', 'Deployments');
    const f = page.getByRole('form', { name: 'New deployment' });
    // GPUs named on this node: every GPU of the simulated node is in MIG mode
    await f.getByLabel('Name').fill('tiny-gpu');
    await f.getByLabel('Model').selectOption({ label: 'tiny-q4' });
    await f.getByLabel(/^GPUs/).fill('0');
    await f.getByRole('button', { name: 'Deploy' }).click();
    await page.getByText(/GPU 0 \(NVIDIA H100 80GB HBM3\) is in MIG mode/).first().waitFor({ timeout: 10000 });
    check(true, 'a GPU placement the node cannot take is refused in the console with the reason');
    await f.getByLabel(/^GPUs/).fill('');
    await f.getByLabel('Name').fill('tiny-chat');
    await f.getByLabel('Model').selectOption({ label: 'tiny-q4' });
    await f.getByLabel('CPU threads (0: all)').fill('2');
    await f.getByLabel('Context').fill('512');
    await f.getByLabel('Chat template').selectOption('llama2');
    await f.getByRole('button', { name: 'Deploy' }).click();
    const key = await page.locator('.secret').first().textContent();
    check(key.startsWith('sk-'), 'the API key is shown once', key);
    const drow = page.locator('tr', { hasText: 'tiny-chat' });
    await drow.getByText('ready', { exact: true }).waitFor({ timeout: 90000 });
    await drow.getByRole('button', { name: 'tiny-chat', exact: true }).click();
    const chat = page.getByRole('form', { name: 'Chat with tiny-chat' });
    await chat.getByLabel('Message').fill('Hello there');
    const streamed = page.waitForResponse((r) => r.url().endsWith('/v1/chat/completions'));
    await chat.getByRole('button', { name: 'Send' }).click();
    const sresp = await streamed;
    check(sresp.status() === 200 && sresp.headers()['content-type'] === 'text/event-stream',
      'the console asks for the chat as a stream and gets one', sresp.headers()['content-type']);
    await page.locator('.chat .muted').waitFor({ timeout: 60000 });
    const usage = await page.locator('.chat .muted').first().textContent();
    check(/\d+ tokens, finish: (length|stop)/.test(usage), 'a chat completion came back through the proxy', usage);
    const answer = page.locator('.msg.assistant').first();
    check((await answer.textContent()).length > 0 && await answer.getAttribute('aria-busy') === null,
      'the streamed answer is shown whole once it ends');
    // a system prompt and a temperature go with the chat; Stop ends a long
    // answer and keeps what was written
    await chat.getByLabel('System prompt (optional)').fill('You are terse.');
    await chat.getByLabel('Temperature').fill('0');
    await chat.getByLabel('Max tokens').fill('400');
    await chat.getByLabel('Message').fill('Tell me a long story');
    // the tiny model writes 400 tokens faster than a click: this answer
    // comes from a loopback server that writes one word every 200 ms
    const slow = http.createServer((q, res) => {
      res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Access-Control-Allow-Origin': '*' });
      let n = 0;
      const tick = setInterval(() => {
        if (res.destroyed || n++ > 100) { clearInterval(tick); res.end(); return; }
        res.write(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: ` word${n}` }, finish_reason: null }] })}\n\n`);
      }, 200);
      q.on('close', () => clearInterval(tick));
    });
    await new Promise((ok) => slow.listen(0, '127.0.0.1', ok));
    let body = null;
    await page.route('**/v1/chat/completions', (r) => {
      body = r.request().postDataJSON();
      return r.continue({ url: `http://127.0.0.1:${slow.address().port}/slow` });
    });
    await chat.getByRole('button', { name: 'Send' }).click();
    await page.locator('.msg.assistant[aria-busy]', { hasText: /word2/ }).waitFor({ timeout: 20000 });
    await chat.getByRole('button', { name: 'Stop' }).click();
    await page.locator('.chat .muted', { hasText: 'finish: stopped' }).waitFor({ timeout: 20000 });
    await page.unroute('**/v1/chat/completions');
    slow.close();
    check(body.messages[0].role === 'system' && body.messages[0].content === 'You are terse.' && body.temperature === 0 &&
      (await page.locator('.msg.assistant').nth(1).textContent()).length > 0 && await chat.getByRole('button', { name: 'Stop' }).isDisabled(),
    'the chat sends its system prompt and temperature; Stop ends the answer and keeps it', JSON.stringify(body).slice(0, 200));
    // answers are read as Markdown, built from text only
    const md = await page.evaluate(async () => {
      const { markdown } = await import('/js/markdown.js');
      const d = markdown('Some **bold** and `code`:\n\n```c\nint x = 1 < 2;\n```\n- one\n- two <img src=x onerror=alert(1)>');
      return { strong: d.querySelectorAll('strong').length, code: d.querySelector('pre code')?.textContent, li: d.querySelectorAll('li').length,
        img: d.querySelectorAll('img').length, text: d.textContent };
    });
    check(md.strong === 1 && md.code === 'int x = 1 < 2;' && md.li === 2 && md.img === 0 && md.text.includes('<img src=x'),
      'Markdown: bold, code blocks and lists, and markup stays text', JSON.stringify(md));
    await page.getByRole('button', { name: 'Show the last 200 lines' }).click();
    await page.locator('pre[aria-label="Engine log"]', { hasText: /\S/ }).waitFor();
    check(true, 'engine log shown');
    await shot(page, '03-deployments');
    // scale it: fewer threads, fewer sequences; the engine restarts with them
    const depNow = async () => (await (await page.request.get(`${page.baseUrl}/api/v1/deployments`)).json()).data.find((x) => x.name === 'tiny-chat');
    const pid0 = (await depNow()).pid;
    const scale = page.getByRole('form', { name: 'Scale tiny-chat' });
    await scale.getByLabel('CPU threads (0: all)').fill('1');
    await scale.getByLabel('Parallel sequences').fill('4');
    await scale.getByRole('button', { name: 'Apply and restart' }).click();
    let scaled = null;
    for (let i = 0; i < 180 && !scaled; i++) {
      const x = await depNow();
      if (x.state === 'ready' && x.pid !== pid0) scaled = x;
      else await new Promise((ok) => setTimeout(ok, 500));
    }
    check(scaled && scaled.placement.threads === 1 && scaled.options.parallel === 4 && scaled.options.ctx === 512,
      'scaled from the console: 1 thread, 4 sequences, the context kept, a new engine ready', JSON.stringify(scaled));
    await drow.getByText('CPU, 1 threads').waitFor();
    await accessible(page, 'deployments');

    // a MIG layout on the simulated H100 node, built in the editor
    await visit(page, 'gpus', 'GPUs & partitions');
    check(await page.locator('tbody tr').count() === 8, '8 GPUs listed');
    await page.getByRole('button', { name: 'MIG layout of GPU 0 on leader' }).click();
    const add = page.getByRole('form', { name: 'Add a GPU instance' });
    await add.getByLabel('Profile').waitFor();
    await add.getByLabel('Profile').selectOption('3g.40gb');
    const starts = await add.getByLabel('Start').locator('option').allTextContents();
    check(JSON.stringify(starts) === '["slot 0","slot 4"]', 'the editor offers only valid starts for 3g.40gb', starts);
    await add.getByLabel('Start').selectOption('4');
    await add.getByRole('button', { name: 'Add to the draft' }).click();
    await page.getByText('1 instance(s) in the draft.').waitFor();
    await add.getByLabel('Profile').selectOption('3g.40gb');
    const left = await add.getByLabel('Start').locator('option').allTextContents();
    check(JSON.stringify(left) === '["slot 0"]', 'after 3g@4 only slot 0 is left for 3g', left);
    await add.getByRole('button', { name: 'Add to the draft' }).click();
    await page.getByText('2 instance(s) in the draft.').waitFor();
    const offered = await add.getByLabel('Profile').locator('option').count();
    check(offered === 0 && await add.getByRole('button', { name: 'Add to the draft' }).isDisabled(),
      'a full GPU offers nothing more', String(offered));
    await page.getByRole('button', { name: 'Apply the layout' }).click();
    await page.locator('table', { hasText: 'Stored layout' }).getByText('applied').first().waitFor();
    check(await page.locator('table', { hasText: 'Stored layout' }).getByText('applied').count() === 2, 'two instances applied');
    await shot(page, '04-gpus');
    await accessible(page, 'gpus');

    // join a second privai-admin with a token made on the Nodes page
    await visit(page, 'nodes', 'Nodes');
    await page.getByRole('button', { name: 'Create a join token' }).click();
    const token = (await page.locator('#join-token').textContent()).trim();
    check(token.startsWith('join_') && (await page.locator('#join-command').textContent()).includes('--join'), 'join token and command shown');
    // node-b's preflight report: privai-tune over the fixture node with a bad pairing
    execFileSync('python3', [path.join(ROOT, 'tests', 'fixtures', 'sysfs', 'make-trees.py'), path.join(tmp, 'trees')]);
    const preflight = path.join(tmp, 'node-b-preflight.json');
    try {
      execFileSync(path.join(BUILD, 'privai-tune'), ['check', '--root', path.join(tmp, 'trees', 'hgx-h100-bad'), '--output', preflight], { stdio: 'ignore' });
    } catch { /* exit 1: checks failed, as they should on this tree */ }
    // and its privai-fabric, serving the same tree's status (no systemd bus here: Fabric Manager unknown)
    const fabricSock = path.join(tmp, 'node-b-fabric.sock'), noBus = path.join(tmp, 'node-b-no-bus');
    fs.mkdirSync(noBus, { recursive: true });
    const fenv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('PRIVAI_FABRIC_') && !k.startsWith('DBUS_')));
    // a validation run on it first, its tools played by tests/fixtures/fabric-tools: the links short of their mark
    try {
      execFileSync(path.join(BUILD, 'privai-fabric'), ['validate', '--root', path.join(tmp, 'trees', 'hgx-h100-bad')], {
        stdio: 'ignore',
        env: { ...fenv, PRIVAI_FABRIC_CONFIG: '/dev/null', FAKE_IB: 'slow', FAKE_NCCL: 'pass',
          PATH: `${path.join(ROOT, 'tests', 'fixtures', 'fabric-tools')}:${process.env.PATH}` },
      });
    } catch { /* exit 1: tests failed, as they should here */ }
    children.push(spawn(path.join(BUILD, 'privai-fabric'), ['serve', '--root', path.join(tmp, 'trees', 'hgx-h100-bad')],
      { env: { ...fenv, PRIVAI_FABRIC_CONFIG: '/dev/null', PRIVAI_FABRIC_STATUS_SOCKET: fabricSock, PRIVAI_FABRIC_BUS: 'user', XDG_RUNTIME_DIR: noBus },
        stdio: 'ignore' }));
    await startAdmin(tmp, 'node-b', ['--join', leader.url, '--engine-ports', '19110-19119', '--preflight-file', preflight,
      '--fabric-socket', fabricSock], { PRIVAI_JOIN_TOKEN: token, PRIVAI_NVML_DOUBLE_NODE: '1' });
    const brow = page.getByRole('table', { name: 'Nodes', exact: true }).locator('tr', { hasText: 'node-b' });
    await brow.waitFor({ timeout: 20000 });
    await brow.getByText('ready').waitFor();
    check(await brow.locator('td').nth(4).textContent() === '8', 'node-b joined with 8 GPUs');
    await brow.getByText('14 failed, 5 warned, 36 passed, 0 skipped', { exact: false }).waitFor({ timeout: 10000 });
    await brow.getByText('NCCL settings', { exact: false }).waitFor({ timeout: 10000 });
    check(/Fabric: version-mismatchFabric Manager 550\.54\.14, 4 NVSwitch\(es\); NCCL settings (written|current)/.test(await brow.textContent()),
      "node-b's host column: preflight counts, fabric read, its NCCL settings written", await brow.textContent());
    const pairing = page.locator('table', { hasText: 'Host checks that failed or warned' }).locator('tr', { hasText: 'GPU-to-NIC pairing' });
    check(await pairing.count() === 1 && (await pairing.textContent()).includes('node-b') &&
      (await pairing.textContent()).includes('move the NIC 0000:3e:00.0'), 'the bad pairing is listed with its fix');
    await shot(page, '05-nodes');
    await accessible(page, 'nodes');
    // the Host page: node-b's NCCL settings, each with its reason
    await visit(page, 'host', 'Host');
    const nccl = page.getByRole('table', { name: 'NCCL settings of node-b' });
    await nccl.waitFor();
    const gdr = nccl.locator('tr', { hasText: 'NCCL_NET_GDR_LEVEL' });
    const p2p = nccl.locator('tr', { hasText: 'NCCL_P2P_LEVEL' });
    check((await gdr.textContent()).includes('left to NCCL') && (await gdr.textContent()).includes('modprobe nvidia_peermem') &&
      (await p2p.textContent()).includes('NVL') && (await p2p.textContent()).includes('4 NVSwitches'),
      "node-b's NCCL settings: GDR left to NCCL without peer memory, P2P over NVLink, each with why",
      (await gdr.textContent()) + ' | ' + (await p2p.textContent()));
    const val = page.getByRole('table', { name: 'Fabric validation of node-b' });
    const rdma = val.locator('tr', { hasText: 'mlx5_0 -> mlx5_1' });
    check(await val.locator('tbody tr').count() === 5 && (await rdma.textContent()).includes('301.77 Gb/s') &&
      (await rdma.textContent()).includes('380.00 Gb/s') && (await rdma.textContent()).includes('ibstat') &&
      (await val.locator('tr', { hasText: 'GPU memory' }).textContent()).includes('nvidia_peermem'),
      "node-b's fabric validation: each link against its mark, hints for the short ones", await val.textContent());
    check(await page.locator('table', { hasText: 'Host checks that failed or warned' }).locator('tr', { hasText: 'Fabric validation: mlx5_0 -> mlx5_1' }).count() === 1,
      'a failed validation is among the host checks that failed');
    await shot(page, '05a-host-nccl-settings');
    await accessible(page, 'host');

    // a deployment placed on node-b: it fetches the model from the leader,
    // runs the engine, reports ready, and the chat goes through it
    await visit(page, 'deployments', 'Deployments');
    const ff = page.getByRole('form', { name: 'New deployment' });
    await ff.getByLabel('Name').fill('tiny-far');
    await ff.getByLabel('Model').selectOption({ label: 'tiny-q4' });
    await ff.getByLabel('Node').selectOption('node-b');
    await ff.getByLabel('CPU threads (0: all)').fill('1');
    await ff.getByLabel('Context').fill('256');
    await ff.getByLabel('Chat template').selectOption('llama2');
    await ff.getByRole('button', { name: 'Deploy' }).click();
    const frow = page.locator('tr', { hasText: 'tiny-far' });
    await frow.getByText('ready', { exact: true }).waitFor({ timeout: 90000 });
    check(await frow.locator('td').nth(3).textContent() === 'node-b' &&
      (await frow.locator('code').textContent()).includes('/api/v1/cluster/deployments/'), 'tiny-far runs on node-b, its endpoint there');
    await frow.getByRole('button', { name: 'tiny-far', exact: true }).click();
    const fchat = page.getByRole('form', { name: 'Chat with tiny-far' });
    await fchat.getByLabel('Message').fill('Hello node b');
    await fchat.getByRole('button', { name: 'Send' }).click();
    await page.locator('.chat .muted').waitFor({ timeout: 60000 });
    check(/\d+ tokens, finish: (length|stop)/.test(await page.locator('.chat .muted').first().textContent()),
      'a chat completion came back from node-b through the leader');
    await shot(page, '05b-deployment-on-node-b');

    // the same model split over the leader and node-b (tensor parallel):
    // rank 0 here, rank 1 on node-b; the console lists both ranks
    await visit(page, 'deployments', 'Deployments');
    const sf = page.getByRole('form', { name: 'New deployment' });
    await sf.getByLabel('Name').fill('tiny-split');
    await sf.getByLabel('Model').selectOption({ label: 'tiny-q4' });
    await sf.getByLabel('CPU threads (0: all)').fill('1');
    await sf.getByLabel(/^Tensor-parallel ranks/).fill('leader, node-b');
    await sf.getByLabel('Context').fill('256');
    await sf.getByLabel('Chat template').selectOption('llama2');
    await sf.getByRole('button', { name: 'Deploy' }).click();
    const srow = page.locator('tr', { hasText: 'tiny-split' });
    await srow.getByText('ready', { exact: true }).waitFor({ timeout: 120000 });
    check(await srow.locator('td').nth(3).textContent() === 'leader + node-b' &&
      (await srow.locator('td').nth(4).textContent()).includes('split over 2 nodes (tensor parallel), 1 threads a rank'),
      'tiny-split runs on the leader and node-b', await srow.textContent());
    // node-b's report of its rank comes with its next heartbeat
    for (let i = 0; i < 60; i++) {
      const d = (await (await page.request.get(`${page.baseUrl}/api/v1/deployments`)).json()).data.find((x) => x.name === 'tiny-split');
      if (d && d.ranks && d.ranks[1].state === 'ready') break;
      await new Promise((r) => setTimeout(r, 500));
    }
    await srow.getByRole('button', { name: 'tiny-split', exact: true }).click();
    const ranks = page.getByRole('table', { name: 'Ranks of tiny-split' });
    await ranks.locator('tr', { hasText: 'node-b' }).getByText('ready', { exact: true }).waitFor({ timeout: 30000 });
    check(await ranks.locator('tbody tr').count() === 2 &&
      (await ranks.locator('tr', { hasText: 'node-b' }).textContent()).includes('follows rank 0'),
      'the detail lists rank 0 on the leader and rank 1 on node-b, following');
    const ranksUp = page.locator('p', { hasText: '2 of 2 ranks up' }).first();
    check(await ranksUp.waitFor({ timeout: 30000 }).then(() => true, () => false) &&
      await ranksUp.getAttribute('class') === 'muted', 'the detail counts the ranks up, as a note, not an error');
    const schat = page.getByRole('form', { name: 'Chat with tiny-split' });
    await schat.getByLabel('Message').fill('Hello two nodes');
    await schat.getByRole('button', { name: 'Send' }).click();
    await page.locator('.chat .muted').waitFor({ timeout: 60000 });
    check(/\d+ tokens, finish: (length|stop)/.test(await page.locator('.chat .muted').first().textContent()),
      'a chat completion came back from the split model');
    await shot(page, '05c-deployment-split');
    page.once('dialog', (d) => d.accept());
    await srow.getByRole('button', { name: 'Delete tiny-split' }).click();
    await srow.waitFor({ state: 'detached', timeout: 20000 });

    await visit(page, 'nodes', 'Nodes');
    await brow.getByText('ready').waitFor();
    page.once('dialog', (d) => d.accept());
    await brow.getByRole('button', { name: 'Drain node-b and move its deployments' }).click();
    await brow.getByText('draining', { exact: true }).waitFor();
    await page.getByText('Moved tiny-far to leader').waitFor();
    check(true, 'node-b drained from the console, tiny-far moved to the leader');
    await visit(page, 'deployments', 'Deployments');
    await frow.getByText('ready', { exact: true }).waitFor({ timeout: 90000 });
    check(await frow.locator('td').nth(3).textContent() === 'leader', 'tiny-far runs on the leader now',
      await frow.locator('td').nth(3).textContent());
    // node-b resumed: tiny-far moved back from its Scale form
    await page.evaluate(async () => {
      const { api } = await import('/js/api.js');
      const b = (await api('GET', '/api/v1/nodes')).data.find((n) => n.name === 'node-b');
      await api('POST', `/api/v1/nodes/${b.id}/resume`);
    });
    await visit(page, 'nodes', 'Nodes');
    await brow.getByText('ready', { exact: true }).waitFor();
    await visit(page, 'deployments', 'Deployments');
    await frow.getByRole('button', { name: 'tiny-far', exact: true }).click();
    const fscale = page.getByRole('form', { name: 'Scale tiny-far' });
    await fscale.getByLabel('Node').selectOption('node-b');
    await fscale.getByRole('button', { name: 'Apply and restart' }).click();
    await page.getByText('tiny-far moves to node-b').waitFor();
    await frow.locator('td').nth(3).getByText('node-b').waitFor({ timeout: 30000 });
    await frow.getByText('ready', { exact: true }).waitFor({ timeout: 90000 });
    check(true, 'tiny-far moved back to node-b from the console and is ready there');
    // node-b removed for good, its deployments moved
    await visit(page, 'nodes', 'Nodes');
    page.once('dialog', (d) => d.accept());
    await brow.getByRole('button', { name: 'Remove node-b and move its deployments' }).click();
    await page.getByText('Moved tiny-far to leader').waitFor();
    await brow.getByText('removed', { exact: true }).waitFor();
    await visit(page, 'deployments', 'Deployments');
    await frow.getByText('ready', { exact: true }).waitFor({ timeout: 90000 });
    check(await frow.locator('td').nth(3).textContent() === 'leader', 'node-b removed from the console: tiny-far moved to the leader');

    for (const [hash, title, n] of [['users', 'Users & tokens', '06-users'], ['audit', 'Audit log', '07-audit'],
      ['settings', 'Settings', '08-settings'], ['dashboard', 'Dashboard', '09-dashboard']]) {
      await visit(page, hash, title);
      if (hash === 'dashboard') await page.locator('.spark path').first().waitFor({ timeout: 15000 }).catch(() => {});
      await shot(page, n);
      await accessible(page, hash);
    }
    check(await page.locator('[data-deployment="tiny-chat"] svg.spark').count() === 2, 'dashboard charts for the engine');
    await visit(page, 'audit', 'Audit log');
    // a hash-only navigation is "network idle" at once: wait for the table the page fetches
    for (const action of ['deployment.create', 'gpu.mig'])
      await page.locator('td', { hasText: action }).first().waitFor({ timeout: 15000 }).catch(() => {});
    check(await page.locator('td', { hasText: 'deployment.create' }).count() > 0 && await page.locator('td', { hasText: 'gpu.mig' }).count() > 0,
      'the audit log shows the deployment and the MIG layout');
    await visit(page, 'users', 'Users & tokens');
    const uf = page.getByRole('form', { name: 'New user' });
    await uf.getByLabel('Name').fill('vic');
    await uf.getByLabel('Password (12+ characters)').fill(PW);
    await uf.getByRole('button', { name: 'Add user' }).click();
    await page.locator('tr', { hasText: 'vic' }).waitFor();
    // a viewer sees no buttons that would only be refused
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByLabel('User name').fill('vic');
    await page.getByLabel('Password').fill(PW);
    await page.getByRole('button', { name: 'Sign in' }).click();
    // an account an admin made has a one-time password
    await page.getByRole('heading', { level: 1, name: 'Change your password' }).waitFor();
    await accessible(page, 'change password');
    await page.getByLabel('Current password').fill(PW);
    await page.getByLabel('New password (12 characters or more)').fill(`${PW} two`);
    await page.getByRole('button', { name: 'Change password' }).click();
    // the session goes on; the server ended the others
    await page.getByText(/Password changed\. Other sessions ended: 0; API tokens revoked: 0\./).waitFor();
    await page.locator('#who', { hasText: 'vic (viewer)' }).waitFor();
    await page.getByRole('heading', { level: 1, name: 'Change your password' }).waitFor({ state: 'detached' });
    check(true, 'a one-time password is changed before anything else');
    await visit(page, 'deployments', 'Deployments');
    check(await page.getByRole('form', { name: 'New deployment' }).count() === 0 &&
      await page.getByRole('button', { name: /^Delete/ }).count() === 0, 'viewer: no deploy form, no delete buttons');
    check(await page.locator('#nav a[href="#/audit"]').isHidden(), 'viewer: no audit log link');
    await shot(page, '10-viewer');
    await replaceCertificate(browser, tmp, errors);
    check(errors.length === 0, 'no console errors or CSP violations', errors.join(' | '));
  } catch (e) {
    check(false, 'the browser suite ran to the end', e.stack);
    await shot(page, 'failure').catch(() => {});
  } finally {
    await browser.close();
    for (const c of children) c.kill('SIGTERM');
    if (failed) for (const f of fs.readdirSync(tmp).filter((x) => x.endsWith('.log')))
      console.log(`--- ${f}\n${fs.readFileSync(path.join(tmp, f), 'utf8').split('\n').slice(-30).join('\n')}`);
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  console.log(`${passed} passed, ${failed} failed, 0 skipped`);
  process.exit(failed ? 1 : 0);
}

main();
