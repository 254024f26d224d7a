// The console's shell: sign-in, the navigation, and one page at a time
// (#/name in the URL, so the back button and bookmarks work).
import { api, setCsrf } from './api.js';
import { h, say, act, field, clearErrors } from './ui.js';
import dashboard from './pages/dashboard.js';
import models from './pages/models.js';
import deployments from './pages/deployments.js';
import gpus from './pages/gpus.js';
import nodes from './pages/nodes.js';
import users from './pages/users.js';
import audit from './pages/audit.js';
import settings from './pages/settings.js';
import host from './pages/host.js';
import sizing from './pages/sizing.js';
import metrics from './pages/metrics.js';
import tasks from './pages/tasks.js';
import vms from './pages/vms.js';
import { session } from './session.js';

const pages = { dashboard, metrics, tasks, models, deployments, gpus, vms, nodes, host, sizing, users, audit, settings };
const titles = { dashboard: 'Dashboard', metrics: 'Metrics', tasks: 'Tasks', models: 'Models', deployments: 'Deployments', gpus: 'GPUs & partitions', vms: 'VMs',
  nodes: 'Nodes', host: 'Host', sizing: 'Sizing', users: 'Users & tokens', audit: 'Audit log', settings: 'Settings' };
const ctx = session;
let cleanup = null;

function main() { return document.getElementById('main'); }

function showLogin(message) {
  if (cleanup) { cleanup(); cleanup = null; }
  ctx.me = null;
  document.querySelector('.top').hidden = true;
  document.title = 'Sign in · privai console';
  const err = h('p', { class: 'error-text', role: 'alert', id: 'login-error' }, message || '');
  const form = h('form', { class: 'card', 'aria-describedby': 'login-error' },
    field('User name', h('input', { name: 'name', autocomplete: 'username', required: true })),
    field('Password', h('input', { name: 'password', type: 'password', autocomplete: 'current-password', required: true })),
    err,
    h('button', { type: 'submit' }, 'Sign in'));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const btn = form.querySelector('button');
    btn.disabled = true;
    try {
      const r = await api('POST', '/api/v1/auth/login', { name: form.name.value, password: form.password.value }, { quiet: true });
      setCsrf(r.csrf_token);
      await start();
    } catch (x) {
      err.textContent = x.message;
      form.password.focus();
    } finally { btn.disabled = false; }
  });
  main().replaceChildren(h('div', { class: 'login' }, h('h1', {}, 'privai console'), form));
  form.name.focus();
}

function changePassword() {
  if (cleanup) { cleanup(); cleanup = null; }
  // nothing else is open to this account until the password is its own
  document.querySelector('.top').hidden = true;
  document.title = 'Change your password · privai console';
  const err = h('p', { class: 'error-text', role: 'alert' });
  const form = h('form', { class: 'card' },
    h('p', {}, 'This account has a one-time password. Choose your own to go on.'),
    field('Current password', h('input', { name: 'current_password', type: 'password', autocomplete: 'current-password', required: true })),
    field('New password (12 characters or more)', h('input', { name: 'new_password', type: 'password', autocomplete: 'new-password', minlength: 12, required: true })),
    err, h('button', { type: 'submit' }, 'Change password'));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    try {
      const r = await api('POST', '/api/v1/auth/password', { current_password: form.current_password.value, new_password: form.new_password.value });
      // the server ended the account's other sessions and revoked its
      // API tokens; this session goes on
      ctx.me.must_change_password = false;
      say(`Password changed. Other sessions ended: ${r.sessions_ended}; API tokens revoked: ${r.tokens_revoked.length}.`);
      route();
    } catch (x) { err.textContent = x.message; }
  });
  main().replaceChildren(h('div', { class: 'login' }, h('h1', {}, 'Change your password'), form));
}

async function start() {
  try {
    ctx.me = await api('GET', '/api/v1/auth/me', undefined, { quiet: true });
  } catch { showLogin(); return; }
  if (ctx.me.csrf_token) setCsrf(ctx.me.csrf_token);
  document.getElementById('who').textContent = `${ctx.me.user.name} (${ctx.me.user.role})`;
  for (const a of document.querySelectorAll('#nav a[data-role="admin"]'))
    a.parentElement.hidden = ctx.me.user.role !== 'admin';
  if (ctx.me.must_change_password) { changePassword(); return; }
  route();
}

let routeSeq = 0;
async function route() {
  if (!ctx.me) return;
  if (ctx.me.must_change_password) { changePassword(); return; }
  const name = (location.hash.match(/^#\/([a-z]+)/) || [])[1] || 'dashboard';
  const page = pages[name] || dashboard;
  if (cleanup) { cleanup(); cleanup = null; }
  document.querySelector('.top').hidden = false;
  clearErrors();
  for (const a of document.querySelectorAll('#nav a'))
    if (a.getAttribute('href') === `#/${name}`) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  document.title = `${titles[name] || 'Dashboard'} · privai console`;
  const m = main();
  // each visit draws into a view of its own: a page still loading when the
  // next one is chosen draws into its detached view, not into the new page
  const seq = ++routeSeq;
  const view = h('div', {});
  m.replaceChildren(h('h1', {}, titles[name] || 'Dashboard'), view);
  // busy until the page's first data is drawn: screen readers wait for it,
  // and so do the browser tests (a hash change fires no load event)
  m.setAttribute('aria-busy', 'true');
  let done = null;
  try {
    done = (await page(view, ctx)) || null;
  } catch (e) {
    view.append(h('p', { class: 'error-text', role: 'alert' }, e.message));
  }
  if (seq !== routeSeq) { // superseded: only the newest visit may say it is drawn
    if (done) done();
    return;
  }
  cleanup = done;
  m.removeAttribute('aria-busy');
  m.focus();
}

window.addEventListener('hashchange', route);
// narrow screens: the sections open from the Menu button and close once one is chosen
const toggle = document.getElementById('nav-toggle');
toggle.addEventListener('click', () => {
  const open = document.querySelector('.top').classList.toggle('open');
  toggle.setAttribute('aria-expanded', String(open));
});
window.addEventListener('hashchange', () => {
  document.querySelector('.top').classList.remove('open');
  toggle.setAttribute('aria-expanded', 'false');
});
window.addEventListener('privai:signed-out', () => showLogin('Your session ended; sign in again.'));
window.addEventListener('privai:password-change-required', () => {
  if (ctx.me) { ctx.me.must_change_password = true; changePassword(); }
});
document.getElementById('logout').addEventListener('click', (e) =>
  act(e.target, async () => { await api('POST', '/api/v1/auth/logout'); showLogin('Signed out.'); }));
start();
