// Deployments: create (model, node, CPU threads or GPUs, serving options), scale, stop
// and start, logs, the endpoint and its keys, and a chat to try it.  A
// deployment on another node is run by that node's privai-admin; this
// console holds the row and reaches its engine through that node.
import { api, apiStream } from '../api.js';
import { markdown } from '../markdown.js';
import { h, badge, table, act, say, formValues, when, field, secret as secretBox } from '../ui.js';
import { can } from '../session.js';

// The form's placement: GPUs by index or UUID when some are named, else
// CPU; split over the nodes named in ranks when there are any, on that
// many GPUs of each when GPUs a node is given.
function placementOf(v) {
  const list = (s) => String(s || '').split(',').map((x) => x.trim()).filter((x) => x);
  const gpus = list(v.gpus).map((x) => (/^[0-9]+$/.test(x) ? Number(x) : x));
  const ranks = list(v.ranks);
  if (ranks.length && v.gpus_per_node) return { kind: 'gpu', count: v.gpus_per_node, ranks };
  if (gpus.length) return { kind: 'gpu', gpus };
  return ranks.length ? { kind: 'cpu', threads: v.threads || 0, ranks } : { kind: 'cpu', threads: v.threads || 0 };
}

// How a placement reads in the list.
function placementText(p) {
  if (p.kind === 'cpu') {
    return p.ranks ? `CPU, split over ${p.ranks.length} nodes (tensor parallel), ${p.threads} threads a rank`
      : `CPU, ${p.threads || 'all'} threads`;
  }
  if (p.ranks) return `GPU, ${p.count} on each of ${p.ranks.length} nodes (tensor parallel ${p.tensor_parallel})`;
  const mig = p.gpus.length === 1 && p.gpus[0].startsWith('MIG-');
  return `${mig ? 'MIG instance' : `${p.gpus.length} GPU${p.gpus.length > 1 ? 's' : ''}`} (tensor parallel ${p.tensor_parallel})`;
}

// Where a deployment runs: its node, or the nodes of its ranks.
function nodesOf(d) {
  return d.ranks ? d.ranks.map((r) => r.node).join(' + ') : d.node;
}

// A split deployment's ranks, each with its node, its GPUs on a GPU
// group (node K's engine runs ranks K x count and on, one a GPU), and
// its state.
function ranksTable(d) {
  const perNode = d.placement.rank_gpus;
  const cols = [
    { label: 'Rank', value: (r) => perNode ? `${r.rank * d.placement.count}–${(r.rank + 1) * d.placement.count - 1}` : String(r.rank) },
    { label: 'Node', value: (r) => r.node },
  ];
  if (perNode) {
    cols.push({ label: 'GPUs', value: (r) => h('span', { title: (perNode[r.rank] || []).join('\n') },
      (perNode[r.rank] || []).map((u) => u.slice(-6)).join(', ')) });
  }
  cols.push({ label: 'State', value: (r) => [badge(r.state), r.reason ? h('div', { class: 'muted' }, r.reason) : ''] });
  return table(`Ranks of ${d.name}`, cols, d.ranks, '');
}

function createForm(modelsList, nodesList, refresh) {
  const usable = nodesList.filter((n) => n.state === 'ready');
  const form = h('form', { class: 'inline', 'aria-label': 'New deployment' },
    field('Name', h('input', { name: 'name', required: true, maxlength: 64 })),
    field('Model', h('select', { name: 'model', required: true },
      modelsList.filter((m) => m.state === 'ready').map((m) => h('option', { value: m.id }, m.name)))),
    field('Node', h('select', { name: 'node' },
      usable.map((n) => h('option', { value: n.name }, n.is_self ? `${n.name} (this node)` : `${n.name} (${n.cpu_cores || '?'} CPUs)`)))),
    field('CPU threads (0: all)', h('input', { name: 'threads', type: 'number', min: 0, value: 0 })),
    field('Tensor-parallel ranks (one a cluster member, this one first, comma-separated; empty: no split)',
      h('input', { name: 'ranks', placeholder: 'e.g. leader, node-b' })),
    field('GPUs (indexes or GPU-/MIG- UUIDs, comma-separated; empty: CPU)',
      h('input', { name: 'gpus', placeholder: 'e.g. 0,1 or MIG-…' })),
    field('Split on GPUs, how many a member (with ranks; empty: on CPUs)',
      h('input', { name: 'gpus_per_node', type: 'number', min: 1, max: 16 })),
    field('Context', h('input', { name: 'ctx', type: 'number', min: 16, placeholder: 'model default' })),
    field('Parallel sequences', h('input', { name: 'parallel', type: 'number', min: 1, placeholder: 'default' })),
    field('Chat template', h('select', { name: 'chat_template' })),
    h('button', { type: 'submit' }, 'Deploy'));
  // the templates are the chosen node's engine's own list (privai-engine
  // features, reported with the node), never a copy kept here
  const templates = () => {
    const node = usable.find((n) => n.name === form.node.value) || usable.find((n) => n.is_self);
    const names = (node && node.inventory && node.inventory.engine && node.inventory.engine.chat_templates) || [];
    form.chat_template.replaceChildren(h('option', { value: '' }, 'from the model'),
      ...names.map((t) => h('option', {}, t)));
  };
  form.node.addEventListener('change', templates);
  templates();
  const secret = h('div', { 'aria-live': 'polite' });
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const v = formValues(form);
    const options = {};
    for (const k of ['ctx', 'parallel', 'chat_template']) if (v[k] !== undefined) options[k] = v[k];
    const placement = placementOf(v);
    if (v.node && !placement.ranks) placement.node = v.node;
    act(form.querySelector('button'), async () => {
      const d = await api('POST', '/api/v1/deployments', { name: v.name, model: Number(v.model), placement, options });
      secret.replaceChildren(h('p', {}, `API key for ${d.name} (shown once):`), secretBox(d.api_key, { 'aria-label': 'the API key' }));
      form.reset();
      refresh();
    }, 'Deployment created');
  });
  return h('section', { class: 'card', 'aria-label': 'Deploy a model' }, h('h2', {}, 'Deploy a model'), form, secret);
}

function chatBox(d) {
  const log = h('div', { class: 'chat', 'aria-live': 'polite' });
  const history = [];
  let running = null; // the AbortController of the answer being written
  const stop = h('button', { type: 'button', class: 'secondary', disabled: true, onclick: () => running && running.abort() }, 'Stop');
  const form = h('form', { class: 'chat-form', 'aria-label': `Chat with ${d.name}` },
    field('System prompt (optional)', h('textarea', { name: 'system', rows: 2 })),
    h('div', { class: 'inline-row' },
      field('Message', h('input', { name: 'content', required: true, size: 50 })),
      field('Temperature', h('input', { name: 'temperature', type: 'number', min: 0, max: 2, step: 0.1, value: 0.7 })),
      field('Max tokens', h('input', { name: 'max_tokens', type: 'number', min: 1, max: 4096, value: 32 })),
      h('button', { type: 'submit' }, 'Send'), stop));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const content = form.content.value;
    history.push({ role: 'user', content });
    log.append(h('div', { class: 'msg user' }, content));
    form.content.value = '';
    // streamed: the answer grows as the engine writes it; the live
    // region reads the finished line (the growing text is aria-busy)
    const answer = h('div', { class: 'msg assistant', 'aria-busy': 'true' });
    log.append(answer);
    running = new AbortController();
    stop.disabled = false;
    act(form.querySelector('button[type="submit"]'), async () => {
      let usage = null, finish = null, text = '';
      const system = form.system.value.trim();
      try {
        await apiStream(`/api/v1/deployments/${d.id}/v1/chat/completions`,
          { model: d.name, messages: system ? [{ role: 'system', content: system }, ...history] : history,
            max_tokens: Number(form.max_tokens.value), temperature: Number(form.temperature.value), stream: true,
            stream_options: { include_usage: true } },
          (ev) => {
            const c = ev.choices && ev.choices[0];
            if (c && c.delta && c.delta.content) answer.textContent = (text += c.delta.content);
            if (c && c.finish_reason) finish = c.finish_reason;
            if (ev.usage) usage = ev.usage;
          }, running.signal);
      } catch (e) {
        if (e.name !== 'AbortError') {
          if (!text) answer.remove();
          history.pop();
          throw e;
        }
        finish = 'stopped'; // what came before the stop stays
      } finally {
        answer.removeAttribute('aria-busy');
        running = null;
        stop.disabled = true;
      }
      answer.replaceChildren(markdown(text));
      history.push({ role: 'assistant', content: text });
      log.append(h('div', { class: 'muted' }, `${usage ? usage.completion_tokens : '?'} tokens, finish: ${finish}`));
    });
  });
  return h('div', {}, h('h3', {}, 'Chat'), log, form);
}

async function keysBox(d) {
  const box = h('div', {});
  async function refresh() {
    const r = await api('GET', `/api/v1/deployments/${d.id}/keys`);
    box.replaceChildren(table('API keys', [
      { label: 'Name', value: (k) => k.name }, { label: 'Created', value: (k) => when(k.created_at) },
      { label: 'Revoked', value: (k) => when(k.revoked_at) },
      { label: 'Actions', value: (k) => k.revoked_at ? '' : h('button', { class: 'danger', type: 'button', 'aria-label': `Revoke key ${k.name}`,
        onclick: (e) => confirm(`Revoke key ${k.name}? Applications using it are refused from now on.`) &&
          act(e.target, async () => { await api('DELETE', `/api/v1/deployments/${d.id}/keys/${k.id}`); refresh(); }, 'Key revoked') }, 'Revoke') },
    ], r.data), form, secret);
  }
  const secret = h('div', { 'aria-live': 'polite' });
  const form = h('form', { class: 'inline', 'aria-label': 'New API key' },
    field('Key name', h('input', { name: 'name', required: true, maxlength: 64 })), h('button', { type: 'submit' }, 'Add key'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    act(form.querySelector('button'), async () => {
      const k = await api('POST', `/api/v1/deployments/${d.id}/keys`, { name: form.name.value });
      await refresh();
      secret.replaceChildren(h('p', {}, 'New key (shown once):'), secretBox(k.api_key, { 'aria-label': 'the new key' }));
    });
  });
  await refresh();
  return h('div', {}, h('h3', {}, 'Keys'), box);
}

// Scale: the node, the CPU threads and the serving options of a
// deployment; the engine restarts with them (the row goes loading, then
// ready), on the new node when it moves.
function scaleBox(d, nodesList, onDone) {
  const o = d.options || {};
  const usable = nodesList.filter((n) => n.state === 'ready' || n.name === d.node);
  const form = h('form', { class: 'inline', 'aria-label': `Scale ${d.name}` },
    field('Node', h('select', { name: 'node' }, usable.map((n) => h('option', { value: n.name, selected: n.name === d.node },
      n.is_self ? `${n.name} (this node)` : n.name)))),
    field('CPU threads (0: all)', h('input', { name: 'threads', type: 'number', min: 0, value: d.placement.threads || 0 })),
    field('GPUs (indexes or UUIDs; empty: CPU)', h('input', { name: 'gpus', value: (d.placement.gpus || []).join(',') })),
    field('Parallel sequences', h('input', { name: 'parallel', type: 'number', min: 1, max: 256, value: o.parallel ?? '', placeholder: 'default' })),
    field('Context', h('input', { name: 'ctx', type: 'number', min: 16, value: o.ctx ?? '', placeholder: 'model default' })),
    h('button', { type: 'submit' }, 'Apply and restart'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const v = formValues(form);
    const options = { ...o };
    for (const k of ['parallel', 'ctx']) { if (v[k] === undefined) delete options[k]; else options[k] = v[k]; }
    const placement = placementOf(v);
    placement.node = v.node || d.node;
    if (d.placement.ranks && placement.kind === 'cpu') { // a split deployment stays split
      placement.ranks = d.placement.ranks;
      delete placement.node;
    }
    act(form.querySelector('button'), async () => {
      await api('PATCH', `/api/v1/deployments/${d.id}`, { placement, options });
      onDone();
    }, v.node && v.node !== d.node ? `${d.name} moves to ${v.node}` : `${d.name} restarts with the new settings`);
  });
  return h('div', {}, h('h3', {}, 'Scale'), form);
}

async function detail(d, pane, nodes, onChange) {
  const parts = [h('h2', {}, d.name, ' ', badge(d.state)),
    h('p', {}, 'OpenAI endpoint: ', h('code', {}, d.endpoint), ` · model ${d.model} · node ${nodesOf(d)} · restarts ${d.restarts}`,
      d.unit ? h('span', {}, ' · systemd unit ', h('code', {}, d.unit)) : ''),
    d.reason ? h('p', { class: ['failed', 'degraded'].includes(d.state) ? 'error-text' : 'muted' }, d.reason) : '',
    d.ranks ? ranksTable(d) : '',
    d.leader_id ? h('p', { class: 'muted' }, 'The cluster\'s leader placed this deployment here; change it on the leader\'s console.') : ''];
  if (can('operator') && !d.leader_id) {
    if (d.placement.kind === 'cpu') parts.push(scaleBox(d, nodes, onChange));
    parts.push(await keysBox(d));
    const logs = h('pre', { tabindex: 0, 'aria-label': 'Engine log' });
    parts.push(h('h3', {}, 'Log'), h('button', { type: 'button', class: 'secondary', onclick: (e) => act(e.target, async () => {
      logs.textContent = await api('GET', `/api/v1/deployments/${d.id}/logs?lines=200`, undefined, { text: true });
    }) }, 'Show the last 200 lines'), logs);
    if (d.state === 'ready') parts.push(chatBox(d));
  }
  pane.replaceChildren(h('div', { class: 'card' }, parts));
}

export default async function deployments(main) {
  const list = h('div', {});
  const pane = h('section', {});
  const models = (await api('GET', '/api/v1/models')).data;
  const nodes = (await api('GET', '/api/v1/nodes')).data;
  async function refresh() {
    const r = await api('GET', '/api/v1/deployments');
    list.replaceChildren(table('Deployments', [
      { label: 'Name', value: (d) => h('button', { class: 'link', type: 'button', onclick: () => detail(d, pane, nodes, refresh) }, d.name) },
      { label: 'Model', value: (d) => d.model },
      { label: 'State', value: (d) => [badge(d.state), d.reason ? h('div', { class: 'muted' }, d.reason) : ''] },
      { label: 'Node', value: (d) => nodesOf(d) },
      { label: 'Placement', value: (d) => placementText(d.placement) },
      { label: 'Endpoint', value: (d) => h('code', {}, d.endpoint) },
      { label: 'Actions', value: (d) => can('operator') && !d.leader_id ? h('div', { class: 'actions' },
        h('button', { type: 'button', class: 'secondary', 'aria-label': `${d.desired === 'running' ? 'Stop' : 'Start'} ${d.name}`,
          onclick: (e) => act(e.target, async () => { await api('PATCH', `/api/v1/deployments/${d.id}`, { desired: d.desired === 'running' ? 'stopped' : 'running' }); refresh(); }) },
          d.desired === 'running' ? 'Stop' : 'Start'),
        h('button', { type: 'button', class: 'danger', 'aria-label': `Delete ${d.name}`,
          onclick: (e) => confirm(`Delete deployment ${d.name}?`) && act(e.target, async () => { await api('DELETE', `/api/v1/deployments/${d.id}`); pane.replaceChildren(); refresh(); }, 'Deployment deleted') }, 'Delete')) : '' },
    ], r.data, 'No deployments yet.'));
  }
  if (can('operator')) main.append(createForm(models, nodes, refresh));
  main.append(h('h2', {}, 'Deployments'), list, pane);
  await refresh();
  const timer = setInterval(refresh, 3000);
  return () => clearInterval(timer);
}
