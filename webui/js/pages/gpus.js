// GPUs and MIG partitions.  The editor shows the GPU's 8 memory slots; a
// profile can be added only at a start the server says is still free for
// the draft (POST .../mig/plan), so only valid layouts can be built, and
// applying sends the draft to PUT .../mig, which checks it again.
import { api } from '../api.js';
import { h, badge, bytes, table, act, say, field } from '../ui.js';
import { can } from '../session.js';

function editor(gpu, view, refresh) {
  let draft = view.layout.map((x) => ({ profile: x.profile, start: x.start }));
  const grid = h('div', { class: 'mig', role: 'group', 'aria-label': 'Memory slots 0 to 7' });
  const adder = h('form', { class: 'inline', 'aria-label': 'Add a GPU instance' });
  const note = h('p', { 'aria-live': 'polite' });
  const size = Object.fromEntries(view.profiles.map((p) => [p.name, p]));

  async function redraw() {
    const plan = await api('POST', `/api/v1/gpus/${gpu.id}/mig/plan`, { instances: draft });
    grid.replaceChildren();
    const placed = plan.valid ? plan.layout : [];
    let slot = 0;
    for (const inst of [...placed].sort((a, b) => a.start - b.start)) {
      for (; slot < inst.start; slot++) grid.append(h('div', { class: 'slot' }, `slot ${slot}`));
      grid.append(h('div', { class: 'inst', style: `grid-column: span ${inst.size}` },
        h('strong', {}, inst.profile), `slots ${inst.start}–${inst.start + inst.size - 1}`,
        can('admin') ? h('button', { type: 'button', class: 'secondary', 'aria-label': `Remove ${inst.profile} at slot ${inst.start}`,
          onclick: () => { draft = draft.filter((d) => !(d.profile === inst.profile && (d.start ?? inst.start) === inst.start)); redraw(); } }, 'Remove') : ''));
      slot = inst.start + inst.size;
    }
    for (; slot < 8; slot++) grid.append(h('div', { class: 'slot' }, `slot ${slot}`));
    draft = placed.map((x) => ({ profile: x.profile, start: x.start }));
    note.textContent = plan.valid ? `${draft.length} instance(s) in the draft.` : `Not valid: ${plan.reason}`;
    const options = plan.profiles.filter((p) => p.free_starts.length);
    const sel = h('select', { name: 'profile', id: 'mig-profile' }, options.map((p) =>
      h('option', { value: p.name }, `${p.name} (${p.compute} compute, ${p.memory_gb} GB)`)));
    const start = h('select', { name: 'start', id: 'mig-start' });
    const fill = () => start.replaceChildren(...(size[sel.value] ? plan.profiles.find((p) => p.name === sel.value).free_starts : [])
      .map((s) => h('option', { value: s }, `slot ${s}`)));
    sel.addEventListener('change', fill);
    fill();
    adder.replaceChildren(
      field('Profile', sel), field('Start', start),
      h('button', { type: 'submit', disabled: !options.length }, 'Add to the draft'));
  }
  adder.addEventListener('submit', (e) => {
    e.preventDefault();
    draft.push({ profile: adder.profile.value, start: Number(adder.start.value) });
    redraw();
  });
  const apply = h('button', { type: 'button', onclick: (e) => act(e.target, async () => {
    await api('PUT', `/api/v1/gpus/${gpu.id}/mig`, { instances: draft });
    refresh();
  }, 'Layout applied') }, 'Apply the layout');
  const clear = h('button', { type: 'button', class: 'secondary', onclick: () => { draft = []; redraw(); } }, 'Clear the draft');
  redraw();
  return h('div', {}, grid, note, can('admin') ? [adder, h('div', { class: 'actions' }, apply, clear)] : '');
}

async function detail(g, pane, refreshList) {
  if (!g.mig_table) {
    pane.replaceChildren(h('div', { class: 'card' }, h('h2', {}, `${g.node} GPU ${g.index}`), h('p', {}, 'This GPU has no MIG.')));
    return;
  }
  const view = await api('GET', `/api/v1/gpus/${g.id}/mig`);
  const reload = () => { detail(g, pane, refreshList); refreshList(); };
  pane.replaceChildren(h('section', { class: 'card', 'aria-label': `MIG layout of GPU ${g.index} on ${g.node}` },
    h('h2', {}, `${g.node} · GPU ${g.index} · ${g.name}`),
    h('p', {}, `MIG ${view.mig_enabled ? 'on' : 'off'} · table ${view.table} · ${g.uuid}`),
    view.mig_enabled ? '' : h('p', { class: 'error-text' }, 'MIG mode is off on this GPU. Turning it on needs a GPU reset, which privai never does on its own.'),
    h('h3', {}, 'Stored layout'),
    table('Stored layout', [{ label: 'Profile', value: (x) => x.profile }, { label: 'Start', value: (x) => String(x.start) },
      { label: 'State', value: (x) => [badge(x.state), x.error ? ` ${x.error}` : ''] }], view.layout, 'No layout stored.'),
    h('h3', {}, 'Edit'), view.mig_enabled ? editor(g, view, reload) : ''));
}

export default async function gpus(main) {
  const list = h('div', {});
  const pane = h('div', {});
  async function refresh() {
    const r = await api('GET', '/api/v1/gpus');
    list.replaceChildren(table('GPUs', [
      { label: 'Node', value: (g) => g.node }, { label: 'GPU', value: (g) => `${g.index}: ${g.name}` },
      { label: 'Memory', value: (g) => bytes(g.memory_bytes) }, { label: 'Bus', value: (g) => g.pci_bus_id || '—' },
      { label: 'MIG', value: (g) => g.mig_table ? `${g.mig_enabled ? 'on' : 'off'}, ${(g.instances || []).map((i) => i.profile).join(' ') || 'no instances'}` : 'none' },
      { label: 'Actions', value: (g) => g.mig_table ? h('button', { type: 'button', class: 'secondary', 'aria-label': `MIG layout of GPU ${g.index} on ${g.node}`,
        onclick: () => detail(g, pane, refresh) }, 'MIG layout') : '' },
    ], r.data, 'No GPUs: NVML is not on this node, or no node has GPUs.'));
  }
  main.append(list, pane);
  await refresh();
}
