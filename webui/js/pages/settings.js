// Settings, backups and restore.
import { api, upload } from '../api.js';
import { h, table, act, bytes, when, field } from '../ui.js';
import { can } from '../session.js';

const help = {
  cluster_name: 'Shown in the console and the metrics.',
  model_url_hosts: 'Hosts models may be downloaded from, space separated (nothing else is fetched).',
  default_cpu_threads: 'CPU threads for a deployment that names none (0: all).',
  backup_every_hours: 'Hours between scheduled backups of the database (privai-auto-*, listed below; 0: none).',
  backup_keep: 'Scheduled backups kept; older ones are removed. Backups made by hand or uploaded stay.',
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
  main.append(h('h2', {}, 'Appliance'), await applianceCard());
  main.append(h('h2', {}, 'TLS certificate'), await tlsCard());
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
        h('button', { type: 'button', class: 'danger', 'aria-label': `Delete ${b.name}`, onclick: (e) => confirm(`Delete backup ${b.name}? It cannot be restored afterwards.`) &&
          act(e.target, async () => {
            await api('DELETE', `/api/v1/system/backups/${encodeURIComponent(b.name)}`); refresh(); }, 'Backup deleted') }, 'Delete')) },
    ], r.data, 'No backups yet.'));
  }
  const file = h('input', { type: 'file', accept: '.db', required: true });
  const progress = h('progress', { max: 100, value: 0, 'aria-label': 'Backup upload progress' });
  const up = h('form', { 'aria-label': 'Upload a backup', class: 'inline' },
    field('A backup file from another appliance or an archive (.db)', file),
    h('button', { type: 'submit', class: 'secondary' }, 'Upload backup'), progress);
  up.addEventListener('submit', (e) => {
    e.preventDefault();
    act(up.querySelector('button'), async () => {
      await upload('/api/v1/system/backups/upload', file.files[0], (done, total) => { progress.value = (100 * done) / total; });
      up.reset();
      refresh();
    }, 'Backup uploaded and checked; restore it from the list');
  });
  main.append(h('h2', {}, 'Backups'), h('p', {}, h('button', { type: 'button', onclick: (e) => act(e.target, async () => {
    await api('POST', '/api/v1/system/backups'); refresh(); }, 'Backup made') }, 'Back up now')), up, list);
  await refresh();
}

// The console's certificate, and (admins, when privai-admin manages the
// pair) replacing it with the site's own PEM files.
async function tlsCard() {
  const t = await api('GET', '/api/v1/system/tls');
  const card = h('div', { class: 'card' });
  if (!t.tls) {
    card.append(h('p', {}, 'This console serves plain HTTP on loopback (development mode): there is no certificate.'));
    return card;
  }
  const until = new Date(t.not_after * 1000);
  card.append(h('dl', { class: 'facts' },
    h('dt', {}, 'Subject'), h('dd', {}, t.subject),
    h('dt', {}, 'Issuer'), h('dd', {}, t.self_signed ? `${t.issuer} (self-signed)` : t.issuer),
    h('dt', {}, 'Valid until'), h('dd', {}, until.toISOString().slice(0, 10)),
    h('dt', {}, 'Chain'), h('dd', {}, `${t.chain_length} certificate${t.chain_length === 1 ? '' : 's'}`),
    h('dt', {}, 'Key pin'), h('dd', {}, h('code', {}, t.pin))));
  if (!can('admin')) return card;
  if (!t.managed) {
    card.append(h('p', { class: 'muted' }, 'The certificate comes from --tls-cert and --tls-key: replace those files and restart privai-admin.'));
    return card;
  }
  const cert = h('input', { type: 'file', accept: '.pem,.crt,.cer', required: true });
  const key = h('input', { type: 'file', accept: '.pem,.key', required: true });
  const force = h('input', { type: 'checkbox' });
  const form = h('form', {},
    field('Certificate chain (PEM: the server certificate first, then its issuers)', cert),
    field('Private key (PEM, without a passphrase)', key),
    field('Replace the key even though joined nodes pinned the current one (they must join again)', force, { class: 'field check' }),
    h('button', { type: 'submit' }, 'Replace certificate'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    act(form.querySelector('button'), async () => {
      const body = { certificate: await cert.files[0].text(), key: await key.files[0].text() };
      if (force.checked) body.force = true;
      const r = await api('PUT', '/api/v1/system/tls', body);
      card.replaceWith(await tlsCard());
      return r;
    }, 'Certificate replaced: new connections use it; reload the page to check it in your browser');
  });
  card.append(h('h3', {}, 'Replace'), form);
  return card;
}

// What day-0 configuration (cloud-init, the OVF properties) did at the
// last boot: each step's state and message, and the sources' warnings.
async function applianceCard() {
  const a = await api('GET', '/api/v1/system/appliance');
  const card = h('div', { class: 'card' });
  if (!a.firstboot) {
    card.append(h('p', { class: 'muted' }, a.note || 'No day-0 record.'));
    return card;
  }
  const fb = a.firstboot;
  card.append(h('p', {}, `Day-0 configuration ran ${when(fb.at)}.`));
  card.append(table('Day-0 steps', [
    { label: 'Step', value: (s) => s.step },
    { label: 'State', value: (s) => h('span', { class: ['refused', 'fallback', 'failed'].includes(s.state) ? 'error-text' : '' }, s.state) },
    { label: 'What', value: (s) => s.message },
  ], fb.steps, 'No steps.'));
  const keys = Object.entries(fb.keys || {});
  if (keys.length)
    card.append(table('Day-0 keys', [
      { label: 'Key', value: ([k]) => k }, { label: 'Value', value: ([, v]) => v.value },
      { label: 'From', value: ([, v]) => v.source }, { label: 'Problem', value: ([, v]) => v.problem || '' },
    ], keys, ''));
  for (const w of fb.warnings || []) card.append(h('p', { class: 'muted' }, `Warning: ${w}`));
  return card;
}
