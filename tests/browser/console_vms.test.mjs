// The console's VMs page (issue 25), in headless Chromium against a live
// privai-admin on libvirt's test driver (test:///default) over the
// fixture HGX host readied for passthrough (tests/fixtures/sysfs,
// hgx-vfio): a VM defined from the form takes GPU0 and its NIC, starts,
// shows its state and console, powers off and is deleted after a
// confirmation; a GPU still on the nvidia driver is refused with the
// reason by the form.
//
// usage: node tests/browser/console_vms.test.mjs BUILD_DIR SCREENSHOT_DIR
import { execFileSync, spawn } from 'node:child_process';
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

function startAdmin(tmp, root) {
  const state = path.join(tmp, 'state');
  fs.mkdirSync(state, { recursive: true });
  fs.writeFileSync(`${state}.pw`, `${PW}\n`);
  const log = fs.openSync(`${state}.log`, 'a');
  const p = spawn(path.join(BUILD, 'privai-admin'), ['--dev', '--port', '0', '--state-dir', state, '--node-name', 'hgx',
    '--webui', path.join(ROOT, 'webui'), '--engine-ports', '19275-19279', '--sys-root', root,
    '--libvirt-uri', 'test:///default', '--vm-dir', path.join(tmp, 'consoles'), '--vm-image-dir', tmp],
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

async function main() {
  fs.mkdirSync(SHOTS, { recursive: true });
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'privai-vms-ui-'));
  execFileSync('python3', [path.join(ROOT, 'tests', 'fixtures', 'sysfs', 'make-trees.py'), path.join(tmp, 'trees'), 'hgx-vfio']);
  const image = path.join(tmp, 'privai.qcow2');
  fs.writeFileSync(image, Buffer.alloc(512));
  let browser = null, admin = null;
  try {
    admin = await startAdmin(tmp, path.join(tmp, 'trees', 'hgx-vfio'));
    browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-dev-shm-usage'] });
    const page = await browser.newPage({ viewport: { width: 1366, height: 900 } });
    page.setDefaultTimeout(20000);
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    page.on('dialog', (d) => d.accept());
    await page.goto(admin.url);
    await page.getByLabel('User name').fill('admin');
    await page.getByLabel('Password', { exact: true }).fill(PW);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { level: 1, name: 'Dashboard' }).waitFor();
    await page.locator('#nav a[href="#/vms"]').click();
    await page.getByRole('heading', { level: 1, name: 'VMs' }).waitFor();
    check(await page.getByText('No VMs.').count() === 1 && await page.getByText('libvirt: test:///default').count() === 1,
      'an empty list, and which libvirt it asks');

    const form = page.getByRole('form', { name: 'Define a VM' });
    const define = async (name, gpus) => {
      await form.getByLabel('Name').fill(name);
      await form.getByLabel(/^GPUs/).fill(gpus);
      await form.getByLabel('vCPUs').fill('8');
      await form.getByLabel('Memory (GiB)').fill('64');
      await form.getByLabel(/^Disk image/).fill(image);
      await form.getByRole('button', { name: 'Define' }).click();
    };
    // GPU6 is still on the nvidia driver: refused, saying so
    await define('bad-vm', '0000:be:00.0');
    await page.getByText('bound to nvidia, not vfio-pci', { exact: false }).first().waitFor();
    check(await page.getByRole('table', { name: 'VMs' }).count() === 0, 'the refused VM is not listed');

    await define('gpu-vm-0', '0000:18:00.0');
    const row = page.getByRole('table', { name: 'VMs' }).locator('tr', { hasText: 'gpu-vm-0' });
    await row.waitFor();
    const text = await row.textContent();
    check(text.includes('GPU H100 SXM5 80GB 0000:18:00.0') && text.includes('NIC mlx5_0 0000:1a:00.0') &&
      text.includes('pinned to 0,1,2,3,4,5,6,7') && text.includes('64 GiB, 1 GiB pages, NUMA 0') && text.includes('144 GiB') &&
      text.includes('stopped'), 'the VM listed, stopped, with its GPU and NIC, pinned CPUs, memory and window', text);

    await row.getByRole('button', { name: 'Start gpu-vm-0' }).click();
    await row.getByText('running', { exact: true }).waitFor();
    check(await row.getByRole('button', { name: 'Delete gpu-vm-0' }).count() === 0, 'a running VM offers no Delete');
    await row.getByRole('button', { name: 'Console of gpu-vm-0' }).click();
    const consoleSection = page.getByRole('region', { name: 'Console of gpu-vm-0' });
    await consoleSection.waitFor();
    check((await consoleSection.textContent()).includes('No console output yet.'),
      'the console: libvirt\'s test driver writes none, and the page says so');
    await page.screenshot({ path: path.join(SHOTS, '05e-vms.png'), fullPage: true });

    await row.getByRole('button', { name: 'Power off gpu-vm-0' }).click();
    await row.getByText('stopped', { exact: true }).waitFor();
    await row.getByRole('button', { name: 'Delete gpu-vm-0' }).click();
    await page.getByText('No VMs.').waitFor();
    const audit = await (await page.request.get(`${admin.url}/api/v1/audit?target=gpu-vm-0`)).json();
    const acts = new Set(audit.data.map((e) => e.action));
    check(['vm.define', 'vm.start', 'vm.poweroff', 'vm.undefine'].every((a) => acts.has(a)),
      'each step audited', [...acts].join(' '));
    check(errors.length === 0, 'no script errors', errors.join(' | '));
  } catch (e) {
    check(false, 'the browser suite ran to the end', e.stack);
  } finally {
    if (browser) await browser.close();
    if (admin) {
      admin.proc.kill('SIGTERM');
      await new Promise((r) => { if (admin.proc.exitCode !== null) r(); else admin.proc.on('exit', r); });
      if (failed) console.log(`--- admin log\n${fs.readFileSync(admin.log, 'utf8').split('\n').slice(-20).join('\n')}`);
    }
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  console.log(`${passed} passed, ${failed} failed, 0 skipped`);
  process.exit(failed ? 1 : 0);
}

main();
