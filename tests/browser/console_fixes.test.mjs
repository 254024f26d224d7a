// The console's defects found by trying it as a new user would (issue 23),
// each checked in headless Chromium against a live privai-admin: the
// token form makes a token that works; the sign-in and change-password
// pages show no navigation; an error marks its field, is said once and is
// gone on the next page; the audit log fits 1366 px; the host and sizing
// routes show their own pages; deleting a backup, revoking a token and
// changing a role ask first; the join command can be pasted into a shell.
//
// usage: node tests/browser/console_fixes.test.mjs BUILD_DIR SCREENSHOT_DIR
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..', '..');
const BUILD = path.resolve(ROOT, process.argv[2] || 'build');
const SHOTS = path.resolve(ROOT, process.argv[3] || path.join(BUILD, 'screenshots'));
const PW = 'correct horse battery staple';
let passed = 0, failed = 0;

function check(cond, what, detail = '') {
  if (cond) passed++;
  else { failed++; console.log(`FAIL: ${what} ${detail}`); }
}

function startAdmin(tmp) {
  const state = path.join(tmp, 'state');
  fs.mkdirSync(state, { recursive: true });
  fs.writeFileSync(`${state}.pw`, `${PW}\n`);
  const log = fs.openSync(`${state}.log`, 'a');
  const p = spawn(path.join(BUILD, 'privai-admin'), ['--dev', '--port', '0', '--state-dir', state, '--node-name', 'fixes',
    '--webui', path.join(ROOT, 'webui'), '--engine-ports', '19270-19279'],
  { env: { ...process.env, PRIVAI_ADMIN_PASSWORD_FILE: `${state}.pw` }, stdio: ['ignore', log, log] });
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const poll = setInterval(() => {
      const m = fs.readFileSync(`${state}.log`, 'utf8').match(/console on (http:\/\/127\.0\.0\.1:\d+)\//);
      if (m) { clearInterval(poll); resolve({ url: m[1], proc: p, log: `${state}.log` }); }
      else if (p.exitCode !== null || Date.now() - t0 > 20000) { clearInterval(poll); reject(new Error('the admin did not start')); }
    }, 50);
  });
}

async function visit(page, hash, heading) {
  await page.goto(`${page.baseUrl}/#/${hash}`);
  await page.getByRole('heading', { level: 1, name: heading }).waitFor();
  await page.locator('#main:not([aria-busy])').waitFor();
}

async function signIn(page, name, password) {
  await page.getByLabel('User name').fill(name);
  await page.getByLabel('Password', { exact: true }).fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

// What a signed-out page must not show: the sections and "Sign out".
async function chromeHidden(page) {
  return await page.locator('nav[aria-label="Sections"]').isHidden() &&
    await page.getByRole('button', { name: 'Sign out' }).isHidden();
}

async function main() {
  fs.mkdirSync(SHOTS, { recursive: true });
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'privai-fixes-'));
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
    await page.getByRole('button', { name: 'Sign in' }).waitFor();
    check(await chromeHidden(page), 'the sign-in page shows no navigation and no "Sign out"');
    await signIn(page, 'admin', PW);
    await page.getByRole('heading', { level: 1, name: 'Dashboard' }).waitFor();

    // the token form: its scope goes as a list, and the token it shows works
    await visit(page, 'users', 'Users & tokens');
    const tf = page.getByRole('form', { name: 'New API token' });
    await tf.getByLabel('Name').fill('ci');
    await tf.getByRole('button', { name: 'Create token' }).click();
    const secret = page.locator('.secret', { hasText: /^pat_/ });
    await secret.waitFor({ timeout: 10000 }).catch(() => {});
    const token = (await secret.count()) ? (await secret.textContent()).trim() : '';
    const me = token ? await page.request.get(`${admin.url}/api/v1/auth/me`, { headers: { Authorization: `Bearer ${token}` } }) : null;
    check(me !== null && me.status() === 200 && (await me.json()).user.name === 'admin',
      'a token made with the form is shown and works as a bearer token', token);
    check(await page.getByRole('button', { name: /^Copy/ }).count() > 0, 'the new token has a copy button');

    // revoking a token and changing a role ask first; dismissed, nothing changes
    await page.locator('tr', { hasText: 'ci' }).getByRole('button', { name: 'Revoke token ci' }).waitFor();
    let asked = '';
    page.once('dialog', (d) => { asked = d.message(); d.dismiss(); });
    await page.getByRole('button', { name: 'Revoke token ci' }).click();
    await page.waitForTimeout(300);
    const still = await page.request.get(`${admin.url}/api/v1/auth/me`, { headers: { Authorization: `Bearer ${token}` } });
    check(/Revoke/.test(asked) && still.status() === 200, 'revoking a token asks first; dismissed, it still works', asked);
    const uf = page.getByRole('form', { name: 'New user' });
    await uf.getByLabel('Name').fill('olga');
    await uf.getByLabel('Password (12+ characters)').fill(PW);
    await uf.getByRole('button', { name: 'Add user' }).click();
    const role = page.getByLabel('Role of olga');
    await role.waitFor();
    asked = '';
    page.once('dialog', (d) => { asked = d.message(); d.dismiss(); });
    await role.selectOption('admin');
    await page.waitForTimeout(300);
    const users = await (await page.request.get(`${admin.url}/api/v1/users`)).json();
    check(/olga/.test(asked) && users.data.find((u) => u.name === 'olga').role === 'viewer' && await role.inputValue() === 'viewer',
      'changing a role asks first; dismissed, the role and the list stay', asked);

    // an error marks its field, is said once, and goes with the page
    await visit(page, 'models', 'Models');
    const byPath = page.getByRole('form', { name: 'Register a model from a path' });
    await byPath.getByLabel('Name').fill('x');
    await byPath.getByLabel('Path on the appliance').fill('relative/x.gguf');
    await byPath.getByRole('button', { name: 'Register' }).click();
    await page.locator('#status .error').first().waitFor();
    await byPath.getByRole('button', { name: 'Register' }).click();
    await page.waitForTimeout(500);
    const pathInput = byPath.getByLabel('Path on the appliance');
    check(await pathInput.getAttribute('aria-invalid') === 'true' &&
      (await page.locator(`#${await pathInput.getAttribute('aria-describedby')}`).textContent()).includes('absolute'),
    'the error marks the path field and says why beside it');
    check(await page.locator('#status .error').count() === 1, 'the same error twice is said once',
      await page.locator('#status .error').count());
    await page.screenshot({ path: path.join(SHOTS, 'fix-field-error.png') });
    await visit(page, 'nodes', 'Nodes');
    check(await page.locator('#status .error').count() === 0, 'an error does not follow to the next page');

    // the join command is one line a shell takes
    await page.getByRole('button', { name: 'Create a join token' }).click();
    const cmd = (await page.locator('#join-command').textContent()).trim();
    check(/^PRIVAI_JOIN_TOKEN=join_[A-Za-z0-9_-]+ privai-admin --join http:\/\/\S+$/.test(cmd),
      'the join command can be pasted into a shell', cmd);

    // host and sizing have pages of their own
    for (const [hash, title] of [['host', 'Host'], ['sizing', 'Sizing']]) {
      await page.goto(`${page.baseUrl}/#/${hash}`);
      await page.locator('#main:not([aria-busy])').waitFor();
      check(await page.locator('main h1').textContent() === title, `#/${hash} shows the ${title} page`,
        await page.locator('main h1').textContent());
      if (hash === 'sizing') {
        await page.getByRole('button', { name: 'Size this shape' }).click();
        await page.locator('dl.facts', { hasText: 'KV cache per token' }).waitFor();
        check(await page.locator('dl.facts dd').nth(9).textContent() === '4', 'sizing a 70B shape answers 4 GPUs, as a table',
          await page.locator('dl.facts').first().textContent());
        const gpuLine = await page.locator('p.gpu-placement').textContent();
        check(gpuLine === 'On this cluster\'s GPUs: this node has fewer than 4 whole GPUs, and rank 0 runs here',
          'on a node without GPUs, the GPU answer says why it has no placement here', gpuLine);
        const cpu = page.getByRole('region', { name: 'On this cluster\'s CPUs' });
        check(/Ranksdoes not fit/.test(await cpu.locator('dl').textContent()) &&
          /does not fit in the memory of 1 node: 130\.4 GiB of weights/.test(await cpu.textContent()),
          'on this one node\'s CPUs, 70B at 16 bits does not fit, and it says why', await cpu.textContent());
        // the GPU types come from the server, with their links; a PCIe-only card is warned about when split
        const shape = page.getByRole('form', { name: 'Size a model by its shape' });
        const options = await shape.locator('select[name=gpu] option').allTextContents();
        check(options.includes('L40S-48GB (PCIe only)') && options.includes('H100-80GB (NVLink)') &&
          options.includes('H100-NVL-94GB (NVLink in pairs, PCIe between)'), 'sizing offers the GPU types with their links', options.join(', '));
        await shape.locator('select[name=gpu]').selectOption('L40S-48GB');
        await shape.getByRole('button', { name: 'Size this shape' }).click();
        const note = page.locator('p.sizing-warning');
        await note.waitFor();
        check(/L40S-48GB: tensor parallel over PCIe \(64 GB\/s a GPU/.test(await note.textContent()) &&
          /L40S-48GB \(PCIe only\)/.test(await page.locator('dl.facts dd').first().textContent()),
          'sizing on L40S says what PCIe costs', await note.textContent());
        await page.screenshot({ path: path.join(SHOTS, 'sizing-pcie-warning.png'), fullPage: true });
        // windowed layers: with 40 of the 80 layers holding a 512-token window, the cache is
        // (40 x 4096 + 40 x 512) / (80 x 4096) of the full 20 GiB
        const fullKv = await page.locator('dl.facts dd').nth(5).textContent();
        await shape.getByLabel('Windowed layers').fill('40');
        await shape.getByLabel('Window (tokens)').fill('512');
        await shape.getByRole('button', { name: 'Size this shape' }).click();
        await page.locator('dl.facts dd', { hasText: '11.3 GiB' }).first().waitFor();
        check(fullKv === '20.0 GiB' && await page.locator('dl.facts dd').nth(5).textContent() === '11.3 GiB',
          'sizing with 40 windowed layers of 512 tokens: 11.3 GiB of KV cache, not 20', fullKv);
      }
      await page.screenshot({ path: path.join(SHOTS, `fix-${hash}.png`), fullPage: true });
    }

    // the audit log fits the screen
    await visit(page, 'audit', 'Audit log');
    await page.locator('td', { hasText: 'user.create' }).first().waitFor();
    const width = await page.evaluate(() => document.documentElement.scrollWidth);
    check(width <= 1366, 'the audit log fits 1366 px', width);
    await page.screenshot({ path: path.join(SHOTS, 'fix-audit-1366.png') });

    // the audit log pages rather than stopping at a cap: 130 more entries
    const made = await page.evaluate(async () => {
      const { api } = await import('/js/api.js');
      let n = 0;
      try {
        for (; n < 130; n++) await api('POST', '/api/v1/tokens', { name: `t${n}`, scopes: ['read'] });
      } catch (e) { return `${n}: ${e.message}`; }
      return n;
    });
    check(made === 130, '130 tokens made through the API', made);
    await visit(page, 'dashboard', 'Dashboard');
    await visit(page, 'audit', 'Audit log');
    await page.locator('td', { hasText: 'token.create' }).first().waitFor();
    const firstPage = await page.locator('tbody tr').count();
    await page.getByRole('button', { name: 'Older entries' }).click();
    await page.getByText(/entries before #/).waitFor();
    const older = await page.locator('tbody tr').count();
    const oldest = await page.locator('td', { hasText: 'user.create' }).count();
    await page.getByRole('button', { name: 'Newer entries' }).click();
    await page.getByText(/^ 100 entries $/).waitFor();
    check(firstPage === 100 && older > 30 && oldest > 0, 'the audit log pages: 100, then the older entries down to the first',
      `${firstPage} ${older} ${oldest}`);

    // a table sorts by the column whose header is pressed, then the other way
    await visit(page, 'users', 'Users & tokens');
    const names = async () => (await page.locator('table', { hasText: 'API tokens' }).locator('tbody tr td:first-child').allTextContents());
    await page.getByRole('button', { name: 'Name', exact: true }).last().click();
    const up = await names();
    await page.getByRole('button', { name: /^Name/ }).last().click();
    const down = await names();
    const cmp = (a, b) => a.localeCompare(b, undefined, { numeric: true });
    check(up.join() === [...up].sort(cmp).join() && down.join() === [...down].sort((a, b) => cmp(b, a)).join() &&
      up[0] === 'ci' && down[0] === 't129' &&
      await page.locator('th[aria-sort="descending"]').count() === 1, 'a table sorts by a column, both ways', `${up.slice(0, 5)} / ${down.slice(0, 5)}`);
    check(await page.getByRole('group', { name: 'Pages of API tokens' }).count() === 1 && up.length === 50,
      '131 tokens show 50 at a time, with a pager', up.length);

    // deleting a backup asks first
    await visit(page, 'settings', 'Settings');
    await page.getByRole('button', { name: 'Back up now' }).click();
    const b = page.locator('td a', { hasText: /^privai-\d/ }).first();
    await b.waitFor();
    const name = (await b.textContent()).trim();
    asked = '';
    page.once('dialog', (d) => { asked = d.message(); d.dismiss(); });
    await page.getByRole('button', { name: `Delete ${name}` }).click();
    await page.waitForTimeout(300);
    const backups = await (await page.request.get(`${admin.url}/api/v1/system/backups`)).json();
    check(/Delete/.test(asked) && backups.data.some((x) => x.name === name), 'deleting a backup asks first; dismissed, it stays', asked);

    // every page at 1366 and at 800 px: no page is wider than the screen;
    // at 800 the sections are behind a Menu button
    for (const width of [1366, 800]) {
      await page.setViewportSize({ width, height: 900 });
      for (const [hash, title] of [['dashboard', 'Dashboard'], ['metrics', 'Metrics'], ['tasks', 'Tasks'], ['models', 'Models'], ['deployments', 'Deployments'],
        ['gpus', 'GPUs & partitions'], ['vms', 'VMs'], ['nodes', 'Nodes'], ['host', 'Host'], ['sizing', 'Sizing'],
        ['users', 'Users & tokens'], ['audit', 'Audit log'], ['settings', 'Settings']]) {
        await visit(page, hash, title);
        const w = await page.evaluate(() => document.documentElement.scrollWidth);
        check(w <= width, `${hash} fits ${width} px`, w);
        await page.screenshot({ path: path.join(SHOTS, `page-${hash}-${width}.png`), fullPage: true });
      }
    }
    const menu = page.getByRole('button', { name: 'Menu' });
    const link = page.locator('#nav a[href="#/models"]');
    const closed = await link.isHidden();
    await menu.click();
    const opened = await link.isVisible() && await menu.getAttribute('aria-expanded') === 'true';
    await link.click();
    await page.getByRole('heading', { level: 1, name: 'Models' }).waitFor();
    check(closed && opened && await link.isHidden(), 'at 800 px the sections open from Menu and close once one is chosen');
    await page.setViewportSize({ width: 1366, height: 900 });
    check(await menu.isHidden() && await link.isVisible(), 'at 1366 px they are a sidebar, no Menu button');

    // a one-time password: the change-password page shows no navigation
    await page.getByRole('button', { name: 'Sign out' }).click();
    await signIn(page, 'olga', PW);
    await page.getByRole('heading', { level: 1, name: 'Change your password' }).waitFor();
    check(await chromeHidden(page), 'the change-password page shows no navigation and no "Sign out"');
    check(errors.length === 0, 'no console errors or CSP violations', errors.join(' | '));
  } catch (e) {
    check(false, 'the suite ran to the end', e.stack);
    await page.screenshot({ path: path.join(SHOTS, 'fix-failure.png') }).catch(() => {});
  } finally {
    await browser.close();
    admin.proc.kill('SIGTERM');
    if (failed) console.log(fs.readFileSync(admin.log, 'utf8').split('\n').slice(-20).join('\n'));
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  console.log(`${passed} passed, ${failed} failed, 0 skipped`);
  process.exit(failed ? 1 : 0);
}

main();
