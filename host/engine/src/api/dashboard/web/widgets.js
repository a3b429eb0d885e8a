// What the fleet view and a node's page share: the live fleet as a hook, and how a
// node's clock and progress are drawn.
import { html, useState, useEffect } from '/dashboard/assets/preact-htm.js';
import { fleet } from '/dashboard/assets/api.js';

// Re-renders on every fleet change, and every second (ages move without changes).
export function useFleet() {
  const [, setVersion] = useState(0);
  useEffect(() => {
    const listen = (v) => setVersion(v);
    fleet.listeners.add(listen);
    const tick = setInterval(() => setVersion((v) => v + 0.001), 1000);
    return () => { fleet.listeners.delete(listen); clearInterval(tick); };
  }, []);
  return fleet;
}

export function seconds(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${Math.round(s / 3600)} h`;
}

// A waiting node's clock: how long since provision_updated_at moved, of its timeout.
export function Clock({ node, now }) {
  if (!node.timeout) return html`<span class="muted">${node.heartbeat_at ? `heartbeat ${seconds(now - node.heartbeat_at)} ago` : ''}</span>`;
  const age = now - node.updated_at;
  const used = age / (node.timeout * 1000);
  const level = used > 0.8 ? 'late' : used > 0.5 ? 'slow' : 'fresh';
  return html`<span class="clock ${level}" title="provision_updated_at ${new Date(node.updated_at).toISOString()}">
    ${seconds(age)} of ${seconds(node.timeout * 1000)}</span>`;
}

export function Progress({ node }) {
  const total = node.state === 'active' ? (node.total || node.written || 1) : node.total;
  const written = node.state === 'active' ? total : node.written;
  if (!total && !written) return html`<span class="muted">–</span>`;
  const pct = total ? Math.min(100, Math.floor((100 * written) / total)) : 0;
  return html`<span class="progress" title="${written} of ${total || '?'} bytes written">
    <span class="bar" style="width: ${pct}%"></span><span class="pct">${pct}%</span></span>`;
}

