// Workload VMs (bare-metal mode): the server carved into VMs of whole GPU +
// RDMA NIC pairs through libvirt.  The list with libvirt's live state, a
// form to define one, and per VM start, stop, power off, its console and
// delete.
import { api } from '../api.js';
import { h, badge, table, act, formValues, field } from '../ui.js';
import { can } from '../session.js';

function devices(vm) {
  if (!vm.devices.length) return h('span', { class: 'muted' }, 'none (a CPU VM)');
  return h('ul', { class: 'plain' }, vm.devices.map((d) => h('li', {}, `${d.role === 'gpu' ? 'GPU' : 'NIC'} ${d.name} `, h('code', {}, d.bdf))));
}

export default async function vms(main) {
  const list = h('div', {});
  const pane = h('div', { 'aria-live': 'polite' });

  async function showConsole(vm) {
    const r = await fetch(`/api/v1/vms/${vm.id}/console`, { credentials: 'same-origin' });
    const text = r.ok ? await r.text() : '';
    pane.replaceChildren(h('section', { class: 'card', 'aria-label': `Console of ${vm.name}` }, h('h2', {}, `Console of ${vm.name}`),
      r.ok ? h('pre', { class: 'console' }, text || '(empty)') : h('p', { class: 'muted' }, 'No console output yet.')));
  }

  async function refresh() {
    const r = await api('GET', '/api/v1/vms');
    const op = can('operator');
    list.replaceChildren(h('p', { class: 'muted' }, `libvirt: ${r.libvirt_uri}`), table('VMs', [
      { label: 'Name', value: (vm) => vm.name },
      { label: 'State', value: (vm) => [badge(vm.state), vm.libvirt_error ? h('div', { class: 'error-text' }, vm.libvirt_error) : ''] },
      { label: 'Devices', value: devices },
      { label: 'vCPUs', value: (vm) => [String(vm.vcpus), vm.cpuset ? h('div', { class: 'muted' }, `pinned to ${vm.cpuset}`) : ''] },
      { label: 'Memory', value: (vm) => `${vm.memory_gib} GiB${vm.hugepages ? ', 1 GiB pages' : ''}${vm.numa_node !== null ? `, NUMA ${vm.numa_node}` : ''}` },
      { label: 'MMIO window', value: (vm) => (vm.mmio_window_gib ? `${vm.mmio_window_gib} GiB` : '—') },
      { label: 'Actions', value: (vm) => h('div', { class: 'actions' },
        op && vm.state !== 'running' ? h('button', { type: 'button', 'aria-label': `Start ${vm.name}`,
          onclick: (e) => act(e.target, async () => { await api('POST', `/api/v1/vms/${vm.id}/start`); refresh(); }, `${vm.name} started`) }, 'Start') : '',
        op && vm.state === 'running' ? h('button', { type: 'button', class: 'secondary', 'aria-label': `Shut down ${vm.name}`,
          onclick: (e) => act(e.target, async () => { await api('POST', `/api/v1/vms/${vm.id}/stop`, {}); refresh(); }, `${vm.name} asked to shut down`) }, 'Shut down') : '',
        op && vm.state === 'running' ? h('button', { type: 'button', class: 'secondary', 'aria-label': `Power off ${vm.name}`,
          onclick: (e) => confirm(`Power ${vm.name} off? Its guest gets no chance to shut down.`) &&
            act(e.target, async () => { await api('POST', `/api/v1/vms/${vm.id}/stop`, { force: true }); refresh(); }, `${vm.name} powered off`) }, 'Power off') : '',
        h('button', { type: 'button', class: 'secondary', 'aria-label': `Console of ${vm.name}`, onclick: (e) => act(e.target, () => showConsole(vm)) }, 'Console'),
        op && vm.state !== 'running' ? h('button', { type: 'button', class: 'danger', 'aria-label': `Delete ${vm.name}`,
          onclick: (e) => confirm(`Delete VM ${vm.name}? libvirt forgets it and its devices are free again; its disk stays.`) &&
            act(e.target, async () => { await api('DELETE', `/api/v1/vms/${vm.id}`); pane.replaceChildren(); refresh(); }, `${vm.name} deleted`) }, 'Delete') : '') },
    ], r.data, 'No VMs.'));
  }

  main.append(list, pane);
  if (can('operator')) {
    const form = h('form', { class: 'inline card', 'aria-label': 'Define a VM' },
      field('Name', h('input', { name: 'name', required: true, pattern: '[A-Za-z0-9_][A-Za-z0-9._-]{0,62}' })),
      field('GPUs (PCI addresses, comma separated)', h('input', { name: 'gpus', placeholder: '0000:18:00.0, 0000:19:00.0' })),
      field('vCPUs', h('input', { name: 'vcpus', type: 'number', min: 1, value: 16, required: true })),
      field('Memory (GiB)', h('input', { name: 'memory_gib', type: 'number', min: 1, value: 128, required: true })),
      field('Disk image (qcow2 path)', h('input', { name: 'image', required: true, placeholder: '/var/lib/libvirt/images/privai.qcow2' })),
      field('1 GiB huge pages', h('input', { name: 'hugepages', type: 'checkbox', checked: true })),
      h('button', { type: 'submit' }, 'Define'));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      act(form.querySelector('button'), async () => {
        const v = formValues(form);
        v.hugepages = form.elements.hugepages.checked;
        v.gpus = (v.gpus || '').split(',').map((s) => s.trim()).filter(Boolean);
        await api('POST', '/api/v1/vms', v);
        form.reset();
        refresh();
      }, 'VM defined');
    });
    main.append(h('h2', {}, 'Define a VM'),
      h('p', { class: 'muted' }, 'Each GPU comes with the RDMA NIC under its PCIe switch; both must be bound to vfio-pci and own their IOMMU groups. The GPUs page lists their addresses.'),
      form);
  }
  await refresh();
}
