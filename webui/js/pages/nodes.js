// Nodes: this one and those that joined; join tokens, drain and remove
// (stopping or moving the deployments), resume.
import { api } from '../api.js';
import { h, badge, bytes, table, act, say, when, field, secret } from '../ui.js';
import { can } from '../session.js';
import { hostSummary, hostProblems } from './host.js';

export default async function nodes(main) {
  const list = h('div', {});
  const problems = h('section', { class: 'card', 'aria-label': 'Host checks' });
  const info = h('div', {});
  const tokenOut = h('div', { 'aria-live': 'polite' });
  async function refresh() {
    const [r, c] = await Promise.all([api('GET', '/api/v1/nodes'), api('GET', '/api/v1/cluster')]);
    info.replaceChildren(h('p', {}, c.role === 'member'
      ? `This node is a member of ${c.membership.leader_url} (state ${c.membership.state}; last contact ${when(c.membership.last_ok)}${c.membership.last_error ? `; last error: ${c.membership.last_error}` : ''}).`
      : `This console leads the cluster; other nodes join it at ${c.advertise_url}. Heartbeat every ${c.heartbeat_s} s.`));
    list.replaceChildren(table('Nodes', [
      { label: 'Name', value: (n) => [n.name, n.is_self ? ' (this node)' : ''] },
      { label: 'State', value: (n) => [badge(n.state), n.state_reason ? h('div', { class: 'muted' }, n.state_reason) : ''] },
      { label: 'CPU', value: (n) => [n.cpu_model || '—', h('div', { class: 'muted' }, `${n.cpu_cores} cores, ${n.numa_nodes} NUMA; ${n.inventory?.cpu?.amx ? 'AMX' : n.inventory?.cpu?.avx512 ? 'AVX-512' : 'no AVX-512'}`)] },
      { label: 'Memory', value: (n) => bytes(n.memory_bytes) },
      { label: 'GPUs', value: (n) => String(n.gpu_count) },
      { label: 'NICs', value: (n) => (n.inventory?.nics || []).filter((x) => x.physical).map((x) => `${x.name} ${x.speed_mbps > 0 ? x.speed_mbps / 1000 + ' Gb/s' : x.state}`).join(', ') || '—' },
      { label: 'Host', value: hostSummary },
      { label: 'Last heartbeat', value: (n) => when(n.last_heartbeat) },
      { label: 'Actions', value: (n) => n.state === 'removed' || !can('operator') ? '' : h('div', { class: 'actions' },
        n.state === 'draining'
          ? h('button', { type: 'button', class: 'secondary', 'aria-label': `Resume ${n.name}`, onclick: (e) => act(e.target, async () => { await api('POST', `/api/v1/nodes/${n.id}/resume`); refresh(); }, 'Node resumed') }, 'Resume')
          : [h('button', { type: 'button', class: 'secondary', 'aria-label': `Drain ${n.name}`, onclick: (e) => confirm(`Drain ${n.name}? Its deployments stop.`) && act(e.target, async () => { await api('POST', `/api/v1/nodes/${n.id}/drain`); refresh(); }, 'Node draining') }, 'Drain'),
            // only the leader places deployments on other nodes
            c.role === 'member' ? '' : h('button', { type: 'button', class: 'secondary', 'aria-label': `Drain ${n.name} and move its deployments`,
              onclick: (e) => confirm(`Drain ${n.name} and move its deployments to other nodes? Those with nowhere to go stop.`) && act(e.target, async () => {
                const r = await api('POST', `/api/v1/nodes/${n.id}/drain`, { deployments: 'move' });
                refresh();
                return r;
              }).then((r) => r && say(r.moved.length ? `Moved ${r.moved.map((m) => `${m.name} to ${m.to}`).join(', ')}` : 'Nothing could move; the node is draining')) }, 'Drain and move')],
        !n.is_self && can('admin') ? h('button', { type: 'button', class: 'danger', 'aria-label': `Remove ${n.name}`, onclick: (e) => confirm(`Remove ${n.name} from the cluster? Its deployments stop.`) && act(e.target, async () => { await api('DELETE', `/api/v1/nodes/${n.id}`); refresh(); }, 'Node removed') }, 'Remove') : '',
        !n.is_self && can('admin') && c.role !== 'member' ? h('button', { type: 'button', class: 'danger', 'aria-label': `Remove ${n.name} and move its deployments`,
          onclick: (e) => confirm(`Remove ${n.name} from the cluster and move its running deployments to other nodes?`) && act(e.target, async () => {
            const r = await api('DELETE', `/api/v1/nodes/${n.id}?deployments=move`);
            refresh();
            return r;
          }).then((r) => r && say(r.moved.length ? `Moved ${r.moved.map((m) => `${m.name} to ${m.to}`).join(', ')}` : 'Node removed; nothing could move')) }, 'Remove and move') : '') },
    ], r.data));
    problems.replaceChildren(h('h2', {}, 'Host checks'), hostProblems(r.data.filter((n) => n.state !== 'removed')));
  }
  main.append(info);
  if (can('admin')) {
    const form = h('form', { class: 'inline', 'aria-label': 'New join token' },
      field('Valid for (minutes)', h('input', { name: 'ttl_minutes', type: 'number', min: 1, max: 10080, value: 60 })),
      h('button', { type: 'submit' }, 'Create a join token'));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      act(form.querySelector('button'), async () => {
        const t = await api('POST', '/api/v1/nodes/join-tokens', { ttl_minutes: Number(form.ttl_minutes.value) });
        tokenOut.replaceChildren(h('p', {}, `One-time join token, valid until ${when(t.expires_at)} (shown once). On the new node run:`),
          secret(t.command, { id: 'join-command', 'aria-label': 'the join command' }),
          h('p', {}, 'or give the token alone to its first boot (cloud-init join_token):'),
          secret(t.token, { id: 'join-token', 'aria-label': 'the join token' }));
      });
    });
    main.append(h('section', { class: 'card', 'aria-label': 'Join a node' }, h('h2', {}, 'Join a node'), form, tokenOut));
  }
  main.append(list, problems);
  await refresh();
  const timer = setInterval(refresh, 3000);
  return () => clearInterval(timer);
}
