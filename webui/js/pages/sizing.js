// Sizing: does a model fit, and on how many GPUs and nodes?  A registered
// model, or one described by its shape, on a GPU type, at a context and a
// concurrency; the answer as a table with its reasoning.
import { api } from '../api.js';
import { h, bytes, act, formValues, field } from '../ui.js';

const LINKS = { nvlink: 'NVLink', 'nvlink-pairs': 'NVLink in pairs, PCIe between', pcie: 'PCIe only' };

// The GPU types the server sizes for (GET /api/v1/sizing/gpus), fetched
// once, as the options of a select: name and how a server's GPUs connect.
let gpuTypes = null;
export async function gpuSelect() {
  gpuTypes = gpuTypes || api('GET', '/api/v1/sizing/gpus').then((r) => r.data).catch((e) => { gpuTypes = null; throw e; });
  return h('select', { name: 'gpu' }, (await gpuTypes).map((t) => h('option', { value: t.name },
    `${t.name} (${LINKS[t.interconnect] || t.interconnect})`)));
}

// The server's sizing answer (gpu/sizing.c) as terms and values.
export function sizingTable(s) {
  const rows = [
    ['GPU', `${s.gpu} (${LINKS[s.interconnect] || s.interconnect})`], ['Context (tokens)', s.context], ['Concurrent sequences', s.concurrency],
    ['Weights', bytes(s.weights_bytes)], ['KV cache per token', bytes(s.kv_bytes_per_token)],
    ['KV cache in all', bytes(s.kv_bytes_total)], ['Runtime buffers per GPU', bytes(s.runtime_bytes_per_gpu)],
    ['Headroom kept free per GPU', bytes(s.headroom_bytes_per_gpu)], ['Total', bytes(s.total_bytes)],
    ['GPUs', s.gpus ? String(s.gpus) : 'does not fit'], ['Nodes', String(s.nodes)],
    ['Used per GPU', bytes(s.per_gpu_used_bytes)], ['GPUs a node', s.gpus ? String(s.gpus_per_node) : '—'],
  ];
  return h('div', { class: 'sizing' },
    h('dl', { class: 'facts' }, rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v === undefined || v === null ? '—' : String(v))])),
    s.why ? h('p', {}, s.why) : '',
    s.warning ? h('p', { class: 'sizing-warning', role: 'note' }, h('strong', {}, 'Note: '), s.warning) : '',
    s.placement_why ? h('p', { class: 'gpu-placement' }, 'On this cluster\'s GPUs: ', s.placement_why,
      s.placement ? [' — placement ', h('code', {}, JSON.stringify(s.placement))] : '') : '',
    s.cpu ? cpuSplit(s.cpu) : '');
}

// The same model on this cluster's CPU nodes: how many ranks, and the
// placement that deploys it (split over nodes when one is too small).
function cpuSplit(c) {
  const where = c.placement && c.placement.ranks ? `split over ${c.placement.ranks.join(' + ')}`
    : c.ranks ? 'on this node' : 'does not fit';
  return h('section', { 'aria-label': 'On this cluster\'s CPUs' }, h('h3', {}, 'On this cluster\'s CPUs'),
    h('dl', { class: 'facts' },
      h('dt', {}, 'Ranks'), h('dd', {}, c.ranks ? `${c.ranks} (${where})` : where),
      h('dt', {}, 'Memory a rank holds'), h('dd', {}, c.ranks ? bytes(c.per_rank_bytes) : '—')),
    h('p', {}, c.why),
    c.placement ? h('p', {}, 'Placement to deploy it with: ', h('code', {}, JSON.stringify(c.placement))) : '');
}

const numeric = (name, label, attrs = {}) => field(label, h('input', { name, type: 'number', min: 1, ...attrs }));

export default async function sizing(main) {
  const models = (await api('GET', '/api/v1/models')).data.filter((m) => m.state === 'ready' && m.kind !== 'lora');
  const out = h('div', { 'aria-live': 'polite' });
  const gpus = await gpuSelect();
  const common = () => [field('GPU', gpus.cloneNode(true)),
    numeric('context', 'Context (tokens)', { value: 4096 }), numeric('concurrency', 'Concurrent sequences', { value: 16 })];
  const byModel = h('form', { class: 'inline', 'aria-label': 'Size a registered model' },
    field('Model', h('select', { name: 'model' }, models.map((m) => h('option', { value: m.id }, m.name)))), ...common(),
    h('button', { type: 'submit', disabled: !models.length }, 'Size it'));
  byModel.addEventListener('submit', (e) => {
    e.preventDefault();
    act(byModel.querySelector('button'), async () => {
      const { model, ...q } = formValues(byModel);
      out.replaceChildren(sizingTable(await api('GET', `/api/v1/models/${model}/sizing?${new URLSearchParams(q)}`)));
    });
  });
  const byShape = h('form', { class: 'inline', 'aria-label': 'Size a model by its shape' },
    numeric('parameters', 'Parameters', { value: 70000000000 }), numeric('bits_per_weight', 'Bits per weight', { value: 16, max: 32 }),
    numeric('layers', 'Layers', { value: 80 }), numeric('heads', 'Attention heads', { value: 64 }),
    numeric('kv_heads', 'KV heads', { value: 8 }), numeric('head_dim', 'Head size', { value: 128 }),
    // sliding-window (gpt-oss) or chunked (Llama 4) layers cache only their window
    numeric('window_layers', 'Windowed layers', { min: 0 }), numeric('window', 'Window (tokens)'), ...common(),
    h('button', { type: 'submit' }, 'Size this shape'));
  byShape.addEventListener('submit', (e) => {
    e.preventDefault();
    act(byShape.querySelector('button'), async () => out.replaceChildren(sizingTable(await api('POST', '/api/v1/sizing', formValues(byShape)))));
  });
  main.append(h('section', { class: 'card', 'aria-label': 'A registered model' }, h('h2', {}, 'A registered model'),
    models.length ? byModel : h('p', { class: 'muted' }, 'No model is registered yet.')),
  h('section', { class: 'card', 'aria-label': 'A model by its shape' }, h('h2', {}, 'A model by its shape'), byShape),
  h('section', { 'aria-label': 'The answer' }, out));
}
