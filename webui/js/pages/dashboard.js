// Nodes, GPUs, deployments and alerts at a glance, with tokens/s and
// latency charts from each ready engine's metrics, polled every 2 s.
import { api } from '../api.js';
import { h, badge, sparkline } from '../ui.js';

function metric(text, name) {
  let sum = 0, seen = false;
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = line.match(/^([^\s{]+)(\{[^}]*\})?\s+([0-9.eE+-]+)$/);
    if (m && m[1] === name) { sum += Number(m[3]); seen = true; }
  }
  return seen ? sum : null;
}

export default async function dashboard(main) {
  const [nodes, gpus, deps] = await Promise.all([api('GET', '/api/v1/nodes'), api('GET', '/api/v1/gpus'),
    api('GET', '/api/v1/deployments')]);
  const n = nodes.data.filter((x) => x.state !== 'removed');
  const alerts = [];
  for (const x of n) if (x.state === 'unreachable' || x.state === 'draining')
    alerts.push(`Node ${x.name} is ${x.state}${x.state_reason ? `: ${x.state_reason}` : ''}`);
  for (const d of deps.data) if (d.state === 'failed') alerts.push(`Deployment ${d.name} failed: ${d.reason || ''}`);
  const instances = gpus.data.reduce((s, g) => s + (g.instances || []).length, 0);
  main.append(h('section', { class: 'grid', 'aria-label': 'Summary' },
    h('div', { class: 'card' }, h('div', { class: 'muted' }, 'Nodes ready'),
      h('div', { class: 'stat' }, `${n.filter((x) => x.state === 'ready').length} / ${n.length}`)),
    h('div', { class: 'card' }, h('div', { class: 'muted' }, 'GPUs'), h('div', { class: 'stat' }, String(gpus.data.length)),
      h('div', { class: 'muted' }, `${instances} MIG instances`)),
    h('div', { class: 'card' }, h('div', { class: 'muted' }, 'Deployments ready'),
      h('div', { class: 'stat' }, `${deps.data.filter((d) => d.state === 'ready').length} / ${deps.data.length}`)),
    h('div', { class: 'card' }, h('div', { class: 'muted' }, 'Alerts'), h('div', { class: 'stat' }, String(alerts.length)))));
  main.append(h('h2', {}, 'Alerts'),
    alerts.length ? h('ul', { class: 'card' }, alerts.map((a) => h('li', {}, a))) : h('p', { class: 'muted' }, 'No alerts.'));

  main.append(h('h2', {}, 'Engines'));
  const charts = h('div', { class: 'grid' });
  main.append(charts);
  const ready = deps.data.filter((d) => d.state === 'ready');
  if (!ready.length) charts.append(h('p', { class: 'muted' }, 'No deployment is ready.'));
  const series = new Map();
  for (const d of ready) {
    const tps = h('div', {}), lat = h('div', {});
    const label = h('p', { class: 'muted' });
    charts.append(h('div', { class: 'card', 'data-deployment': d.name }, h('h3', {}, d.name, ' ', badge(d.state)),
      h('div', {}, 'Tokens/s'), tps, h('div', {}, 'Mean latency, s'), lat, label));
    series.set(d.id, { tps, lat, label, last: null, tpsv: [], latv: [] });
  }
  async function poll() {
    for (const [id, s] of series) {
      let text;
      try { text = await api('GET', `/api/v1/deployments/${id}/metrics`, undefined, { text: true }); } catch { continue; }
      const now = { t: performance.now() / 1000, gen: metric(text, 'vllm:generation_tokens_total'),
        lsum: metric(text, 'vllm:e2e_request_latency_seconds_sum'), lcount: metric(text, 'vllm:e2e_request_latency_seconds_count') };
      if (s.last) {
        const dt = now.t - s.last.t;
        s.tpsv.push(Math.max(0, (now.gen - s.last.gen) / dt));
        const dc = now.lcount - s.last.lcount;
        s.latv.push(dc > 0 ? (now.lsum - s.last.lsum) / dc : (s.latv.at(-1) || 0));
        s.tpsv = s.tpsv.slice(-60);
        s.latv = s.latv.slice(-60);
        s.tps.replaceChildren(sparkline('tokens per second, last two minutes', s.tpsv));
        s.lat.replaceChildren(sparkline('mean request latency, last two minutes', s.latv));
        s.label.textContent = `now ${s.tpsv.at(-1).toFixed(1)} tokens/s; ${now.gen} tokens generated, ${now.lcount} requests`;
      }
      s.last = now;
    }
  }
  await poll();
  const timer = setInterval(poll, 2000);
  return () => clearInterval(timer);
}
