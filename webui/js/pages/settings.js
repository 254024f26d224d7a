// Settings, backups and restore.
import { api } from '../api.js';
import { h, table, act, bytes, when, field } from '../ui.js';
import { can } from '../app.js';

const help = {
  cluster_name: 'Shown in the console and the metrics.',
  model_url_hosts: 'Hosts models may be downloaded from, space separated (nothing else is fetched).',
  default_cpu_threads: 'CPU threads for a deployment that names none (0: all).',
};

export default async function settings(main, ctx) {
  const s = await api('GET', '/api/v1/settings');
  const rows = Object.entries(s);
  const box = h('div', { class: 'card' });
  for (const [key, value] of rows) {
    const id = `setting-${key}`;
    const input = h('input', { id, name: key, value, size: 50, disabled: !can('admin'), 'aria-describedby': `${id}-help` });
    const form = h('form', { class: 'inline' }, field(key, input),
      can('admin') ? h('button', { type: 'submit' }, 'Save') : '', h('span', { id: `${id}-help`, class: 'muted' }, help[key] || ''));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      act(form.querySelector('button'), () => api('PUT', `/api/v1/settings/${key}`, { value: input.value }), `${key} saved`);
    });
    box.append(form);
  }
  main.append(h('h2', {}, 'Settings'), box);
  main.append(h('h2', {}, 'TLS certificate'), h('p', { class: 'card' },
    'The console uses the certificate and key named by --tls-cert and --tls-key (PRIVAI_TLS_CERT, PRIVAI_TLS_KEY), or a self-signed pair generated at first start under the state directory. ',
    'Replacing it from the console is not built yet: put the files in place and restart privai-admin.'));
  if (ctx.me.user.role !== 'admin') return;
  const list = h('div', {});
  async function refresh() {
    const r = await api('GET', '/api/v1/system/backups');
    list.replaceChildren(table('Backups', [
      { label: 'Name', value: (b) => h('a', { href: `/api/v1/system/backups/${encodeURIComponent(b.name)}`, download: b.name }, b.name) },
      { label: 'Size', value: (b) => bytes(b.size_bytes) }, { label: 'Made', value: (b) => when(b.created_at) },
      { label: 'Actions', value: (b) => h('div', { class: 'actions' },
        h('button', { type: 'button', class: 'secondary', 'aria-label': `Restore ${b.name}`, onclick: (e) => confirm(`Replace the whole database with ${b.name}?`) &&
          act(e.target, () => api('POST', '/api/v1/system/restore', { name: b.name }), 'Restored; sign in again if asked') }, 'Restore'),
        h('button', { type: 'button', class: 'danger', 'aria-label': `Delete ${b.name}`, onclick: (e) => act(e.target, async () => {
          await api('DELETE', `/api/v1/system/backups/${encodeURIComponent(b.name)}`); refresh(); }, 'Backup deleted') }, 'Delete')) },
    ], r.data, 'No backups yet.'));
  }
  main.append(h('h2', {}, 'Backups'), h('p', {}, h('button', { type: 'button', onclick: (e) => act(e.target, async () => {
    await api('POST', '/api/v1/system/backups'); refresh(); }, 'Backup made') }, 'Back up now')), list);
  await refresh();
}
