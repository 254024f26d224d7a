// The audit log: who did what, when, from where; refused changes too.
import { api } from '../api.js';
import { h, badge, table, when, field } from '../ui.js';

export default async function audit(main) {
  const list = h('div', {});
  const form = h('form', { class: 'inline', 'aria-label': 'Filter the audit log' },
    field('Actor', h('input', { name: 'actor' })),
    field('Action', h('input', { name: 'action', placeholder: 'e.g. model.create' })),
    field('Result', h('select', { name: 'result' }, h('option', { value: '' }, 'any'), h('option', {}, 'ok'), h('option', {}, 'refused'))),
    h('button', { type: 'submit' }, 'Show'));
  async function refresh() {
    const q = new URLSearchParams({ limit: 200 });
    for (const k of ['actor', 'action', 'result']) if (form[k].value) q.set(k, form[k].value);
    const r = await api('GET', `/api/v1/audit?${q}`);
    list.replaceChildren(table('Audit entries, newest first', [
      { label: 'When', value: (e) => when(e.at) }, { label: 'Who', value: (e) => e.actor },
      { label: 'From', value: (e) => e.remote_addr || '—' }, { label: 'What', value: (e) => e.action },
      { label: 'Target', value: (e) => e.target || '' }, { label: 'Result', value: (e) => badge(e.result) },
      { label: 'Detail', value: (e) => e.detail ? h('code', {}, JSON.stringify(e.detail)) : '' },
    ], r.data, 'No entries match.'));
  }
  form.addEventListener('submit', (e) => { e.preventDefault(); refresh(); });
  main.append(h('div', { class: 'card' }, form), list);
  await refresh();
}
