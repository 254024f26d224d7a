// Models: the list, import (path on the appliance, a resumable upload with
// a progress bar, or URL), details with the GGUF's metadata, sizing, delete.
// A LoRA adapter is imported the same ways, naming the model it adapts.
import { api, upload } from '../api.js';
import { h, badge, bytes, table, act, say, formValues, field } from '../ui.js';
import { can } from '../session.js';
import { sizingTable, gpuSelect } from './sizing.js';

async function sha256(file) {
  // crypto.subtle is on https or localhost only, and hashes a whole buffer:
  // past 2 GiB the server's own hash of what arrived is the check
  if (!crypto.subtle || file.size > 2 ** 31) return null;
  return [...new Uint8Array(await crypto.subtle.digest('SHA-256', await file.arrayBuffer()))]
    .map((b) => b.toString(16).padStart(2, '0')).join('');
}

// Resumable uploads (/api/v1/uploads): the file goes in parts; a part
// that fails because the link dropped or the admin restarted is sent
// again from what the admin kept, up to 5 times in a row, waiting longer
// each time.  Resolves with the model once the last part is in.
const PART = 64 * 2 ** 20;

async function sendParts(u, file, onProgress) {
  let received = u.received, tries = 0;
  for (;;) {
    const end = Math.min(received + PART, file.size);
    try {
      const r = await upload(`/api/v1/uploads/${u.id}?offset=${received}`, file.slice(received, end),
        (done) => onProgress(received + done, file.size), 'PUT');
      if (!('received' in r)) return r;
      received = r.received;
      tries = 0;
    } catch (e) {
      const transient = e.status === 0 || e.status >= 500 && e.status !== 507 || e.code === 'offset_mismatch' || e.code === 'busy';
      if (!transient || ++tries > 5) throw e;
      say(`The upload was interrupted; going on (try ${tries} of 5)`);
      await new Promise((ok) => setTimeout(ok, 500 * 2 ** tries));
      received = (await api('GET', `/api/v1/uploads/${u.id}`)).received;
    }
  }
}

// The optional base of a LoRA adapter, in each import form.
const baseField = () => field('Base model (LoRA adapters only)', h('input', { name: 'base_model', maxlength: 128, size: 14 }));

function importForms(refresh) {
  const byPath = h('form', { class: 'inline', 'aria-label': 'Register a model from a path' },
    field('Name', h('input', { name: 'name', required: true, maxlength: 128 })),
    field('Path on the appliance', h('input', { name: 'path', required: true, size: 40 })),
    baseField(),
    h('button', { type: 'submit' }, 'Register'));
  byPath.addEventListener('submit', (e) => {
    e.preventDefault();
    act(byPath.querySelector('button'), async () => { await api('POST', '/api/v1/models', formValues(byPath)); byPath.reset(); refresh(); }, 'Model registered');
  });
  const bar = h('progress', { max: 100, value: 0, hidden: true, 'aria-label': 'Upload progress' });
  const pct = h('span', { 'aria-live': 'polite' });
  const up = h('form', { class: 'inline', 'aria-label': 'Upload a GGUF file' },
    field('Name', h('input', { name: 'name', required: true, maxlength: 128 })),
    field('GGUF file', h('input', { name: 'file', type: 'file', accept: '.gguf', required: true })),
    baseField(),
    h('button', { type: 'submit' }, 'Upload'));
  up.addEventListener('submit', (e) => {
    e.preventDefault();
    const file = up.file.files[0];
    act(up.querySelector('button'), async () => {
      bar.hidden = false;
      pct.textContent = 'Checksumming…';
      const sum = await sha256(file);
      const base = up.base_model.value;
      const u = await api('POST', '/api/v1/uploads', { name: up.name.value, size: file.size, ...(sum ? { sha256: sum } : {}),
        ...(base ? { base_model: base } : {}) });
      await sendParts(u, file, progress);
      pct.textContent = 'Uploaded and checked';
      up.reset();
      refresh();
    }, 'Model uploaded');
  });
  function progress(done, total) {
    bar.hidden = false;
    bar.value = Math.round((100 * done) / total);
    pct.textContent = `${bar.value}% of ${bytes(total)}`;
  }
  // an upload a closed tab or a lost link left: pick the same file to go on
  const pick = h('input', { type: 'file', accept: '.gguf', hidden: true, 'aria-label': 'The file to go on with' });
  let resuming = null;
  pick.addEventListener('change', () => {
    const u = resuming, file = pick.files[0];
    pick.value = '';
    if (!u || !file) return;
    if (file.size !== u.size_bytes) {
      say(`${file.name} is ${bytes(file.size)}; upload ${u.name} is ${bytes(u.size_bytes)}. Pick the same file.`, true);
      return;
    }
    act(null, async () => {
      await sendParts(u, file, progress);
      pct.textContent = 'Uploaded and checked';
      refresh();
    }, 'Model uploaded');
  });
  const unfinished = h('div', {});
  async function refreshUploads() {
    const r = await api('GET', '/api/v1/uploads');
    unfinished.replaceChildren(r.data.length === 0 ? '' : table('Unfinished uploads', [
      { label: 'Name', value: (u) => u.name },
      { label: 'Received', value: (u) => `${bytes(u.received)} of ${bytes(u.size_bytes)}` },
      { label: 'Removed if idle until', value: (u) => new Date(u.expires_at * 1000).toLocaleString() },
      { label: 'Actions', value: (u) => [
        h('button', { type: 'button', 'aria-label': `Resume upload ${u.name}`, onclick: () => { resuming = u; pick.click(); } }, 'Resume'),
        ' ',
        h('button', { class: 'danger', type: 'button', 'aria-label': `Discard upload ${u.name}`,
          onclick: (e) => confirm(`Discard the upload of ${u.name}?`) && act(e.target, async () => {
            await api('DELETE', `/api/v1/uploads/${u.id}`); refreshUploads();
          }, 'Upload discarded') }, 'Discard')] },
    ], r.data));
  }
  const byUrl = h('form', { class: 'inline', 'aria-label': 'Download a model from a URL' },
    field('Name', h('input', { name: 'name', required: true, maxlength: 128 })),
    field('URL (a host allowed in Settings)', h('input', { name: 'url', type: 'url', required: true, size: 40 })),
    field('SHA-256 (optional)', h('input', { name: 'sha256', size: 20 })),
    baseField(),
    h('button', { type: 'submit' }, 'Download'));
  byUrl.addEventListener('submit', (e) => {
    e.preventDefault();
    act(byUrl.querySelector('button'), async () => { await api('POST', '/api/v1/models', formValues(byUrl)); byUrl.reset(); refresh(); }, 'Download started');
  });
  const section = h('section', { class: 'card', 'aria-label': 'Import a model' }, h('h2', {}, 'Import'),
    h('h3', {}, 'From a path'), byPath, h('h3', {}, 'Upload'), up, bar, pct, pick, unfinished, h('h3', {}, 'From a URL'), byUrl);
  return { section, refreshUploads };
}

async function details(m) {
  const out = h('div', {});
  const rows = [['Kind', m.kind === 'lora' ? `LoRA adapter of ${m.base_model}` : 'model'], ['LoRA rank', m.lora_rank], ['LoRA alpha', m.lora_alpha],
    ['Adapters', m.kind === 'lora' ? null : m.adapters],
    ['Architecture', m.architecture], ['Parameters', m.parameters?.toLocaleString()], ['Quantization', m.quantization],
    ['Context', m.context_length], ['Layers', m.n_layer], ['Heads', m.n_head], ['KV heads', m.n_head_kv], ['Head dim', m.head_dim],
    ['Tokenizer', m.tokenizer], ['Size', bytes(m.size_bytes)], ['SHA-256', m.sha256], ['Source', m.source], ['Path', m.path]];
  out.append(h('dl', { class: 'facts' }, rows.filter((r) => r[1] !== undefined && r[1] !== null).map(([k, v]) => [h('dt', {}, k), h('dd', {}, String(v))])));
  if (m.kind === 'lora') {
    // it runs inside its base's deployments, which serve it by name
    out.append(h('p', {}, `Served by every deployment of ${m.base_model} under the model name "${m.name}".`));
    return out;
  }
  const sizing = h('div', {});
  const form = h('form', { class: 'inline', 'aria-label': 'Sizing' },
    field('GPU', await gpuSelect()),
    field('Context', h('input', { name: 'context', type: 'number', min: 1, value: Math.min(m.context_length || 4096, 8192) })),
    field('Concurrency', h('input', { name: 'concurrency', type: 'number', min: 1, value: 16 })),
    h('button', { type: 'submit' }, 'Size it'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    act(form.querySelector('button'), async () => {
      const s = await api('GET', `/api/v1/models/${m.id}/sizing?${new URLSearchParams(formValues(form))}`);
      sizing.replaceChildren(sizingTable(s));
    });
  });
  out.append(h('h3', {}, 'Sizing'), form, sizing);
  return out;
}

export default async function models(main) {
  const list = h('div', {});
  const detail = h('section', { 'aria-live': 'polite' });
  async function refresh() {
    const r = await api('GET', '/api/v1/models');
    list.replaceChildren(table('Registered models', [
      { label: 'Name', value: (m) => h('button', { class: 'link', type: 'button', onclick: (e) => act(e.currentTarget, async () => detail.replaceChildren(h('div', { class: 'card' }, h('h2', {}, m.name), await details(m)))) }, m.name) },
      { label: 'State', value: (m) => [badge(m.state), m.state === 'importing' ? ` ${bytes(m.bytes_done)}` : '', m.error ? ` ${m.error}` : ''] },
      { label: 'Kind', value: (m) => m.kind === 'lora' ? `LoRA of ${m.base_model}` : 'model' },
      { label: 'Architecture', value: (m) => m.architecture || '—' },
      { label: 'Quantization', value: (m) => m.quantization || '—' },
      { label: 'Size', value: (m) => bytes(m.size_bytes), sort: (m) => m.size_bytes },
      { label: 'Actions', value: (m) => can('operator') ? h('button', { class: 'danger', type: 'button', 'aria-label': `Delete ${m.name}`,
        onclick: (e) => confirm(`Delete model ${m.name}?`) && act(e.target, async () => { await api('DELETE', `/api/v1/models/${m.id}`); refresh(); }, 'Model deleted') }, 'Delete') : '' },
    ], r.data, 'No models yet.'));
    if (imports) await imports.refreshUploads();
    return r.data.some((m) => m.state === 'importing');
  }
  const imports = can('operator') ? importForms(refresh) : null;
  if (imports) main.append(imports.section);
  main.append(h('h2', {}, 'Models'), list, detail);
  await refresh();
  const timer = setInterval(refresh, 3000);
  return () => clearInterval(timer);
}
