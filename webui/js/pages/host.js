// A node's host health, as its heartbeats carry it: the last preflight
// report (privai-tune check) and privai-fabric's status.  The report keeps
// only the checks that warn or fail, with their fixes.
import { api } from '../api.js';
import { h, badge, when, table } from '../ui.js';

function preflightSummary(p) {
  if (!p) return badge('missing');
  if (p.state !== 'ok') return [badge(p.state), h('div', { class: 'muted' }, p.error)];
  const s = p.summary;
  const worst = s.fail ? 'fail' : s.warn ? 'warn' : 'pass';
  return [badge(worst), h('div', { class: 'muted' },
    `${s.fail} failed, ${s.warn} warned, ${s.pass} passed, ${s.skip} skipped; checked ${when(p.checked_at)}`)];
}

function fabricSummary(f) {
  if (!f) return badge('missing');
  if (f.state !== 'ok') return [badge(f.state), h('div', { class: 'muted' }, f.error)];
  const fm = f.fabric_manager, t = f.nccl_topology;
  const topo = !t.needed && !t.present ? '' : !t.present ? 'NCCL topology file missing'
    : t.valid === false ? `NCCL topology file: ${t.problems.length} problem(s)` : 'NCCL topology file valid';
  const env = f.nccl_env ? `NCCL settings ${f.nccl_env.state}` : '';
  return [badge(fm.verdict), h('div', { class: 'muted' },
    [fm.needed ? `Fabric Manager ${fm.version || ''}, ${fm.nvswitches} NVSwitch(es)` : 'no NVSwitches', topo, env].filter(Boolean).join('; '))];
}

// The last `privai-fabric validate` of the node: each figure against its
// pass mark, and for what fell short, the fixes worth trying.
function fabricValidation(n) {
  const f = n.inventory?.host?.fabric;
  if (!f || f.state !== 'ok' || f.validation === undefined) return '';
  const v = f.validation;
  if (v === null) {
    return h('div', {}, h('h3', {}, 'Fabric validation'),
      h('p', { class: 'muted' }, 'Not run yet on this node: privai-fabric validate measures RDMA and NCCL all-reduce bandwidth against pass marks.'));
  }
  const figure = (x, unit) => (typeof x === 'number' ? `${x.toFixed(2)} ${unit}` : '—');
  return h('div', {}, h('h3', {}, 'Fabric validation'),
    h('p', { class: 'muted' }, `${v.passed} passed, ${v.failed} failed, ${v.not_run} not run; measured ${when(v.checked_at)}`),
    table(`Fabric validation of ${n.name}`, [
      { label: 'Test', value: (t) => [t.name, h('div', { class: 'muted' }, t.kind)] },
      { label: 'Result', value: (t) => badge(t.state) },
      { label: 'Measured', value: (t) => figure(t.measured, t.unit) },
      { label: 'Pass mark', value: (t) => (typeof t.mark === 'number' ? [figure(t.mark, t.unit), h('div', { class: 'muted' }, t.mark_why)] : t.mark_why || '—') },
      { label: 'Why / what to try', value: (t) => [t.why || '', t.hints.length ? h('ul', {}, t.hints.map((x) => h('li', {}, x))) : ''] },
    ], v.tests, 'No tests.'));
}

// The NCCL settings privai-fabric keeps for the node's engine ranks
// (nccl.env), each with the reason for its value or for leaving it to NCCL.
function ncclSettings(n) {
  const env = n.inventory?.host?.fabric?.nccl_env;
  if (!env) return '';
  return h('div', {}, h('h3', {}, 'NCCL settings of the engine ranks'),
    h('p', { class: 'muted' }, `${env.path}: ${env.state === 'hand-edited' ? 'edited by hand, left as it is' : env.state}`,
      env.error ? ` (${env.error})` : ''),
    table(`NCCL settings of ${n.name}`, [
      { label: 'Setting', value: (s) => h('code', {}, s.name) },
      { label: 'Value', value: (s) => (s.value === null ? h('span', { class: 'muted' }, 'left to NCCL') : h('code', {}, s.value)) },
      { label: 'Why', value: (s) => s.why },
    ], env.settings, 'No settings.'));
}

// The Host column of the Nodes table.
export function hostSummary(n) {
  const host = n.inventory?.host;
  return h('div', {}, h('div', {}, 'Preflight: ', preflightSummary(host?.preflight)),
    h('div', {}, 'Fabric: ', fabricSummary(host?.fabric)));
}

// Every node's failing and warning checks, with their fixes.
export function hostProblems(nodes) {
  const rows = [];
  for (const n of nodes) {
    const host = n.inventory?.host;
    for (const c of (host?.preflight?.state === 'ok' ? host.preflight.checks : []))
      rows.push({ node: n.name, status: c.status, what: c.title || c.id, id: c.id, found: c.found, expected: c.expected, fix: c.fix });
    const f = host?.fabric;
    if (f?.state === 'ok' && f.fabric_manager.problem && f.fabric_manager.verdict !== 'ready' && f.fabric_manager.verdict !== 'not-needed')
      rows.push({ node: n.name, status: 'fail', what: 'Fabric Manager', id: 'fabric.manager', found: f.fabric_manager.verdict, expected: 'ready', fix: f.fabric_manager.problem });
    if (f?.state === 'ok' && f.nccl_env?.state === 'error')
      rows.push({ node: n.name, status: 'fail', what: 'NCCL settings file', id: 'fabric.nccl_env', found: f.nccl_env.error || 'not written', expected: `${f.nccl_env.path} written`, fix: 'let privai-fabric write /etc/privai (its unit\'s ReadWritePaths=)' });
    for (const t of (f?.state === 'ok' && f.validation ? f.validation.tests : []).filter((x) => x.state === 'fail' || x.state === 'error'))
      rows.push({ node: n.name, status: 'fail', what: `Fabric validation: ${t.name}`, id: `fabric.validate.${t.kind}`, found: t.state === 'fail' ? `${t.measured} ${t.unit}` : t.why, expected: t.state === 'fail' ? `at least ${t.mark} ${t.unit} (${t.mark_why})` : 'a measurement', fix: t.hints.join('; ') || 'see the tool\'s words' });
    for (const p of (f?.state === 'ok' && f.nccl_topology.valid === false ? f.nccl_topology.problems : []))
      rows.push({ node: n.name, status: 'fail', what: 'NCCL topology file', id: 'fabric.nccl_topology', found: p, expected: `a file that matches the node (${f.nccl_topology.path})`, fix: 'privai-fabric topology --write it again' });
  }
  rows.sort((a, b) => (a.status === b.status ? 0 : a.status === 'fail' ? -1 : 1));
  return table('Host checks that failed or warned', [
    { label: 'Node', value: (r) => r.node },
    { label: 'Status', value: (r) => badge(r.status) },
    { label: 'Check', value: (r) => [r.what, h('div', { class: 'muted' }, r.id)] },
    { label: 'Found', value: (r) => r.found },
    { label: 'Expected', value: (r) => r.expected },
    { label: 'Fix', value: (r) => r.fix },
  ], rows, 'No host check failed or warned.');
}

// The Host page: each node's preflight and fabric state, its failing and
// warning checks first, with their fixes.
export default async function host(main) {
  const r = await api('GET', '/api/v1/nodes');
  const nodes = r.data.filter((n) => n.state !== 'removed');
  for (const n of nodes)
    main.append(h('section', { class: 'card', 'aria-label': `Host ${n.name}` },
      h('h2', {}, `${n.name}${n.is_self ? ' (this node)' : ''}`), hostSummary(n), hostProblems([n]), fabricValidation(n), ncclSettings(n)));
  if (!nodes.length) main.append(h('p', { class: 'muted' }, 'No nodes.'));
}
