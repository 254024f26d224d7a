// Tasks: the long operations of everyone (uploads, hashing, deployment
// starts and moves, MIG layouts, backups, restores, node joins), newest
// first, kept by the server so a reload loses none.  Polled every second
// while one runs, every 5 s otherwise; "Log" shows what a task wrote.
import { api } from '../api.js';
import { h, badge, table, when } from '../ui.js';

const KINDS = { upload: 'Upload', 'model.hash': 'Checksum', 'deployment.start': 'Deployment start',
  'deployment.move': 'Deployment move', 'gpu.mig': 'MIG layout', 'backup.create': 'Backup',
  'backup.restore': 'Restore', 'node.join': 'Node join' };

function took(t) {
  const s = (t.ended_at || Math.floor(Date.now() / 1000)) - t.started_at;
  return s < 60 ? `${s} s` : s < 3600 ? `${Math.floor(s / 60)} min ${s % 60} s` : `${(s / 3600).toFixed(1)} h`;
}

function progress(t) {
  if (t.progress === null || t.progress === undefined) return t.state === 'running' ? 'working…' : '';
  const pct = Math.round(t.progress * 100);
  return h('span', { class: 'task-progress' },
    h('progress', { max: 100, value: pct, 'aria-label': `Progress of ${KINDS[t.kind] || t.kind} ${t.target}` }), ` ${pct} %`);
}

export default async function tasks(main) {
  const list = h('div', { 'aria-live': 'polite', class: 'tasks' });
  const log = h('div', {});
  let timer = null, open = null;

  async function show(t) {
    open = t.id;
    const one = await api('GET', `/api/v1/tasks/${t.id}`);
    log.replaceChildren(h('section', { class: 'card', 'aria-label': `Log of task ${t.id}` },
      h('h2', {}, `${KINDS[one.kind] || one.kind}: ${one.target}`),
      h('p', {}, badge(one.state), ` by ${one.actor}, started ${when(one.started_at)}`,
        one.ended_at ? `, ended ${when(one.ended_at)}` : '', one.result ? ` · ${one.result}` : ''),
      h('pre', { class: 'log' }, one.log || '(nothing written)')));
  }

  async function refresh() {
    const r = await api('GET', '/api/v1/tasks?limit=500');
    const running = r.data.filter((t) => t.state === 'running').length;
    list.replaceChildren(h('p', { class: 'muted' }, `${running} running, ${r.data.length - running} ended (the newest 500).`),
      table('Tasks', [
        { label: 'Task', value: (t) => KINDS[t.kind] || t.kind },
        { label: 'Target', value: (t) => t.target },
        { label: 'By', value: (t) => t.actor },
        { label: 'State', value: (t) => badge(t.state) },
        { label: 'Progress', value: (t) => progress(t), sort: (t) => t.progress ?? -1 },
        { label: 'Started', value: (t) => when(t.started_at), sort: (t) => t.started_at },
        { label: 'Took', value: (t) => took(t), sort: (t) => (t.ended_at || Infinity) - t.started_at },
        { label: 'Result', value: (t) => t.result || '' },
        { label: 'Actions', value: (t) => h('button', { type: 'button', class: 'secondary', 'aria-label': `Log of task ${t.id}`,
          onclick: () => show(t) }, 'Log') },
      ], r.data, 'No task yet: uploads, checksums, deployment starts, MIG layouts, backups and node joins show here.'));
    if (open !== null) {
      const t = r.data.find((x) => x.id === open);
      if (t && t.state === 'running') show(t);
    }
    clearTimeout(timer);
    timer = setTimeout(() => refresh().catch(() => {}), running ? 1000 : 5000);
  }
  main.append(list, log);
  await refresh();
  return () => clearTimeout(timer);
}
