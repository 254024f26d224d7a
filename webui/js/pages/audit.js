// The audit log: who did what, when, from where; refused changes too.
import { api } from '../api.js';
import { h, badge, table, when, field } from '../ui.js';

const PAGE = 100;

export default async function audit(main) {
  const list = h('div', {});
  const form = h('form', { class: 'inline', 'aria-label': 'Filter the audit log' },
    field('Actor', h('input', { name: 'actor' })),
    field('Action', h('input', { name: 'action', placeholder: 'e.g. model.create' })),
    field('Result', h('select', { name: 'result' }, h('option', { value: '' }, 'any'), h('option', {}, 'ok'), h('option', {}, 'refused'))),
    h('button', { type: 'submit' }, 'Show'));
  // the log pages on the server: each page starts before the last id of
  // the one before it (the API's ?before=), so nothing is capped
  const starts = [];
  async function refresh(before) {
    const q = new URLSearchParams({ limit: PAGE });
    for (const k of ['actor', 'action', 'result']) if (form[k].value) q.set(k, form[k].value);
    if (before) q.set('before', before);
    const r = await api('GET', `/api/v1/audit?${q}`);
    const last = r.data.length ? r.data[r.data.length - 1].id : null;
    const pager = h('div', { class: 'pager', role: 'group', 'aria-label': 'Pages of the audit log' },
      h('button', { type: 'button', class: 'secondary', disabled: !starts.length, onclick: () => refresh(starts.pop() || undefined) }, 'Newer entries'),
      h('span', {}, ` ${r.data.length} entries${before ? ` before #${before}` : ''} `),
      h('button', { type: 'button', class: 'secondary', disabled: r.data.length < PAGE,
        onclick: () => { starts.push(before || 0); refresh(last); } }, 'Older entries'));
    list.replaceChildren(pager, table('Audit entries, newest first', [
      { label: 'When', value: (e) => when(e.at), sort: (e) => e.at }, { label: 'Who', value: (e) => e.actor },
      { label: 'From', value: (e) => e.remote_addr || '—' }, { label: 'What', value: (e) => e.action },
      { label: 'Target', value: (e) => e.target || '' }, { label: 'Result', value: (e) => badge(e.result) },
      { label: 'Detail', value: (e) => e.detail ? h('code', {}, JSON.stringify(e.detail)) : '' },
    ], r.data, 'No entries match.', { pageRows: PAGE }));
  }
  form.addEventListener('submit', (e) => { e.preventDefault(); starts.length = 0; refresh(); });
  main.append(h('div', { class: 'card' }, form), list);
  await refresh();
}
