// The metrics history the server keeps (GET /api/v1/metrics/history): one
// subject at a time (this node, a deployment, a GPU or a MIG instance)
// over 1 h to 48 h, each value a chart with its units, drawn by uPlot
// (vendored from npm at build time).  The newest value of each is also
// said in text, for screen readers and for a glance.
import uPlot from '../../vendor/uPlot.esm.js';
import { api } from '../api.js';
import { h } from '../ui.js';

const GiB = 1024 ** 3, MB = 1e6;
// per kind of subject: charts, each with its series (name, label, scale)
const CHARTS = {
  deployment: [
    { title: 'Throughput', unit: 'tokens/s', series: [['tokens_per_s', 'generated'], ['prompt_tokens_per_s', 'prompt']] },
    { title: 'Requests', unit: 'requests/min', series: [['requests_per_min', 'finished']] },
    { title: 'Time to first token', unit: 'ms', scale: 1000, series: [['ttft_p50_s', 'p50'], ['ttft_p95_s', 'p95']] },
    { title: 'Inter-token latency', unit: 'ms', scale: 1000, series: [['itl_p50_s', 'p50'], ['itl_p95_s', 'p95']] },
    { title: 'Queue', unit: 'requests', series: [['running', 'running'], ['waiting', 'waiting']] },
    { title: 'KV cache in use', unit: '%', series: [['kv_pct', 'in use']], max: 100 },
  ],
  node: [
    { title: 'CPU busy', unit: '%', series: [['cpu_pct', 'busy']], max: 100 },
    { title: 'Memory', unit: 'GiB', scale: 1 / GiB, series: [['mem_used_bytes', 'in use'], ['mem_total_bytes', 'total']] },
    { title: 'Network', unit: 'MB/s', scale: 1 / MB, series: [['net_rx_bytes_per_s', 'in'], ['net_tx_bytes_per_s', 'out']] },
    { title: 'Load average (1 min)', unit: 'runnable', series: [['load1', 'load']] },
  ],
  gpu: [
    { title: 'Utilization', unit: '%', series: [['util_pct', 'SMs busy'], ['mem_util_pct', 'memory bus']], max: 100 },
    { title: 'Memory', unit: 'GiB', scale: 1 / GiB, series: [['mem_used_bytes', 'in use'], ['mem_total_bytes', 'total']] },
    { title: 'Temperature', unit: '°C', series: [['temp_c', 'GPU']] },
    { title: 'Power', unit: 'W', series: [['power_w', 'draw']] },
    { title: 'ECC errors since the driver loaded', unit: 'errors', series: [['ecc_corrected', 'corrected'], ['ecc_uncorrected', 'uncorrected']] },
  ],
  mig: [
    { title: 'Memory', unit: 'GiB', scale: 1 / GiB, series: [['mem_used_bytes', 'in use'], ['mem_total_bytes', 'total']] },
  ],
};
const COLORS = ['#1f5fbf', '#c2410c', '#15803d', '#7c3aed'];
const RANGES = [['1h', '1 h'], ['6h', '6 h'], ['24h', '24 h'], ['48h', '48 h']];

function fmt(v, unit) {
  if (v === null || v === undefined) return '–';
  const a = Math.abs(v);
  return `${a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2)} ${unit}`;
}

// the subjects sampled lately, named the way the other pages name them
async function subjects() {
  const [s, nodes, deps, gpus] = await Promise.all([api('GET', '/api/v1/metrics/subjects'), api('GET', '/api/v1/nodes'),
    api('GET', '/api/v1/deployments'), api('GET', '/api/v1/gpus')]);
  const names = {};
  for (const n of nodes.data) names[`node:${n.id}`] = `Node ${n.name}`;
  for (const d of deps.data) names[`deployment:${d.id}`] = `Deployment ${d.name}`;
  for (const g of gpus.data) {
    names[`gpu:${g.uuid}`] = `${g.node} GPU ${g.index} (${g.name})`;
    for (const i of g.instances || []) if (i.uuid) names[`mig:${i.uuid}`] = `${g.node} GPU ${g.index} ${i.profile} at slot ${i.start}`;
  }
  const order = ['node', 'deployment', 'gpu', 'mig'];
  return s.data.map((x) => ({ id: x.subject, kind: x.subject.split(':')[0], label: names[x.subject] || x.subject }))
    .sort((a, b) => order.indexOf(a.kind) - order.indexOf(b.kind) || a.label.localeCompare(b.label));
}

// A figure with its caption (the newest values, each with its series'
// colour); the plot is drawn into it once it is on the page and has a width.
function chart(spec, hist) {
  const k = spec.scale || 1;
  const cols = spec.series.map(([name]) => (hist.series[name] || []).map((v) => (v === null ? null : v * k)));
  if (cols.every((c) => c.every((v) => v === null))) return null;
  const latest = spec.series.map(([, label], i) => {
    const c = cols[i].filter((v) => v !== null);
    return h('span', { class: 'chart-now' }, h('span', { class: 'swatch', style: `background:${COLORS[i]}` }),
      `${label} ${fmt(c.length ? c[c.length - 1] : null, spec.unit)}`);
  });
  const holder = h('div', { class: 'chart-plot' });
  const fig = h('figure', { class: 'card chart', 'data-chart': spec.title },
    h('figcaption', {}, h('strong', {}, spec.title), ` (${spec.unit}) now: `, latest), holder);
  fig.draw = () => {
    const opts = {
      width: Math.max(240, holder.clientWidth), height: 180,
      scales: { x: { time: true, range: () => [hist.from, hist.to] },
        y: { range: (u, lo, hi) => [Math.min(0, lo ?? 0), Math.max(spec.max ?? 1, hi ?? 1)] } },
      axes: [{}, { label: spec.unit, size: 60 }],
      // few samples in a long range make lines too short to see: dots too
      series: [{}, ...spec.series.map(([, label], i) => ({ label, stroke: COLORS[i], width: 2, spanGaps: false,
        points: { show: hist.t.length < 120, size: 6, fill: COLORS[i] } }))],
      legend: { show: false },
    };
    return new uPlot(opts, [hist.t, ...cols], holder);
  };
  return fig;
}

export default async function metrics(main) {
  const list = await subjects();
  if (!list.length) {
    main.append(h('p', {}, 'No samples yet: the server takes the first within a minute of starting.'));
    return null;
  }
  const want = new URLSearchParams(location.hash.split('?')[1] || '');
  let subject = list.some((x) => x.id === want.get('subject')) ? want.get('subject') : list[0].id;
  let range = RANGES.some(([r]) => r === want.get('range')) ? want.get('range') : '1h';
  const select = h('select', { id: 'metrics-subject', name: 'subject' },
    ['node', 'deployment', 'gpu', 'mig'].map((kind) => {
      const xs = list.filter((x) => x.kind === kind);
      return xs.length ? h('optgroup', { label: { node: 'Nodes', deployment: 'Deployments', gpu: 'GPUs', mig: 'MIG instances' }[kind] },
        xs.map((x) => h('option', { value: x.id, selected: x.id === subject }, x.label))) : '';
    }));
  const buttons = RANGES.map(([r, label]) => h('button', { type: 'button', class: 'secondary', 'data-range': r,
    'aria-pressed': String(r === range), onclick: () => { range = r; draw(); } }, label));
  const board = h('div', { class: 'charts', 'aria-live': 'polite' });
  const note = h('p', { class: 'muted' });
  main.append(h('div', { class: 'card toolbar' },
    h('label', { for: 'metrics-subject' }, 'Show '), select,
    h('span', { role: 'group', 'aria-label': 'Time range', class: 'ranges' }, buttons)), note, board);
  let plots = [];

  async function draw() {
    for (const b of buttons) b.setAttribute('aria-pressed', String(b.dataset.range === range));
    const hist = await api('GET', `/api/v1/metrics/history?subject=${encodeURIComponent(subject)}&range=${range}`);
    for (const p of plots) p.destroy();
    plots = [];
    const figs = (CHARTS[subject.split(':')[0]] || []).map((spec) => chart(spec, hist)).filter(Boolean);
    note.textContent = `${hist.t.length} samples, one every ${hist.interval_s} s; kept ${hist.keep_hours} h.`;
    board.replaceChildren(...(figs.length ? figs : [h('p', {}, 'No samples in this range.')]));
    plots = figs.map((f) => f.draw());
  }
  select.addEventListener('change', () => { subject = select.value; draw(); });
  await draw();
  const timer = setInterval(() => { draw().catch(() => {}); }, 15000);
  return () => { clearInterval(timer); for (const p of plots) p.destroy(); };
}
