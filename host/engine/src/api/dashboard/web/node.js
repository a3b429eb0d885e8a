// A node's page: its fields, ports, timeline and inventory, and the actions an operator
// takes on it, each confirmed first and each refusal shown in the API's words.
import { html, useState, useEffect } from '/dashboard/assets/preact-htm.js';
import { api, fleet } from '/dashboard/assets/api.js';
import { useFleet, Clock, Progress, seconds } from '/dashboard/assets/widgets.js';
import { Console } from '/dashboard/assets/console.js';

// Each action: what the button says, when it is offered, and the API calls it makes.
const ACTIONS = [
  { name: 'manage', when: (n) => ['enroll', 'available', 'adopt failed', 'inspect failed', 'clean failed'].includes(n.provision_state),
    run: (u) => provision(u, { target: 'manage' }) },
  { name: 'provide', when: (n) => n.provision_state === 'manageable', run: (u) => provision(u, { target: 'provide' }) },
  { name: 'deploy', when: (n) => n.provision_state === 'available', form: true, run: deploy },
  { name: 'rebuild', when: (n) => ['active', 'deploy failed'].includes(n.provision_state), form: true, run: deploy },
  { name: 'undeploy', when: (n) => ['active', 'deploy failed', 'error'].includes(n.provision_state),
    run: (u) => provision(u, { target: 'deleted' }) },
  { name: 'power on', when: (n) => n.power_state !== 'power on', run: (u) => power(u, 'power on') },
  { name: 'power off', when: (n) => n.power_state !== 'power off', run: (u) => power(u, 'power off') },
  { name: 'reboot', when: (n) => n.power_state === 'power on', run: (u) => power(u, 'rebooting') },
  { name: 'maintenance on', when: (n) => !n.maintenance, form: 'reason',
    run: (u, f) => api('PUT', `/v1/nodes/${u}/maintenance`, f.reason ? { reason: f.reason } : {}) },
  { name: 'maintenance off', when: (n) => n.maintenance, run: (u) => api('DELETE', `/v1/nodes/${u}/maintenance`) },
  { name: 'console on', when: (n) => !n.console_enabled && hasConsole(n), run: (u) => setConsole(u, true) },
  { name: 'console off', when: (n) => n.console_enabled, run: (u) => setConsole(u, false) },
];

const hasConsole = (n) => n.console_interface && n.console_interface !== 'no-console';
const setConsole = (uuid, enabled) => api('PUT', `/v1/nodes/${uuid}/states/console`, { enabled });

const provision = (uuid, body) => api('PUT', `/v1/nodes/${uuid}/states/provision`, body);
const power = (uuid, target) => api('PUT', `/v1/nodes/${uuid}/states/power`, { target });

async function deploy(uuid, form, node) {
  const patch = [{ op: 'add', path: '/instance_info/image_source', value: form.image_source }];
  if (form.image_checksum) patch.push({ op: 'add', path: '/instance_info/image_checksum', value: form.image_checksum });
  await api('PATCH', `/v1/nodes/${uuid}`, patch);
  const body = { target: node.provision_state === 'available' ? 'active' : 'rebuild' };
  if (form.configdrive.trim()) {
    const text = form.configdrive.trim();
    try { body.configdrive = JSON.parse(text); } catch (_) { body.configdrive = text; }
  }
  return provision(uuid, body);
}

function Confirm({ action, node, onDone }) {
  const info = node.instance_info || {};
  const [form, setForm] = useState({ image_source: info.image_source || '', image_checksum: info.image_checksum || '', configdrive: '', reason: '' });
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const field = (k) => (e) => setForm({ ...form, [k]: e.target.value });
  const go = async () => {
    setBusy(true); setError(null);
    try { await action.run(node.uuid, form, node); onDone(); } catch (e) { setError(e.message); setBusy(false); }
  };
  return html`<div class="confirm" role="dialog">
    <p>${action.name} <b>${node.name || node.uuid}</b>?</p>
    ${action.form === true ? html`
      <label>image <input name="image_source" value=${form.image_source} onInput=${field('image_source')} size="60" /></label>
      <label>checksum <input name="image_checksum" value=${form.image_checksum} onInput=${field('image_checksum')} size="60" /></label>
      <label>config drive (JSON or base64) <textarea name="configdrive" value=${form.configdrive} onInput=${field('configdrive')}></textarea></label>` : ''}
    ${action.form === 'reason' ? html`<label>reason <input name="reason" value=${form.reason} onInput=${field('reason')} /></label>` : ''}
    ${error ? html`<p class="refused">${error}</p>` : ''}
    <button class="yes" disabled=${busy} onClick=${go}>${action.name}</button>
    <button class="no" onClick=${() => onDone()}>cancel</button>
  </div>`;
}

function Timeline({ events }) {
  if (!events) return html`<p class="muted">loading…</p>`;
  if (!events.length) return html`<p class="muted">no events yet</p>`;
  const times = events.map((e) => Date.parse(e.created_at));
  return html`<ol class="timeline">${events.map((e, i) => html`<li class=${e.severity === 'ERROR' ? 'bad' : ''}>
    <time>${e.created_at.replace('T', ' ').replace(/\..*|\+.*/, '')}</time>
    <span class="took">${i + 1 < events.length ? seconds(times[i + 1] - times[i]) : ''}</span>
    <span><b>${e.event_type}</b> ${e.event}</span></li>`)}</ol>`;
}

function Fields({ node }) {
  const shown = ['uuid', 'name', 'driver', 'provision_state', 'target_provision_state', 'power_state', 'maintenance',
    'maintenance_reason', 'conductor_group', 'conductor', 'resource_class', 'provision_updated_at', 'last_error',
    'instance_info', 'driver_info', 'properties', 'driver_internal_info'];
  return html`<dl class="fields">${shown.filter((k) => node[k] !== undefined && node[k] !== null && node[k] !== '').map((k) => html`
    <dt>${k}</dt><dd>${typeof node[k] === 'object' ? html`<pre>${JSON.stringify(node[k], null, 1)}</pre>` : String(node[k])}</dd>`)}</dl>`;
}

export function NodePage({ uuid }) {
  const f = useFleet();
  const summary = f.nodes.get(uuid);
  const [node, setNode] = useState(null);
  const [error, setError] = useState(null);
  const [ports, setPorts] = useState([]);
  const [history, setHistory] = useState(null);
  const [inventory, setInventory] = useState(null);
  const [asked, setAsked] = useState(null);
  const [attached, setAttached] = useState(false);
  const load = () => {
    api('GET', `/v1/nodes/${uuid}`).then(setNode, (e) => setError(e.message));
    api('GET', `/v1/nodes/${uuid}/ports?detail=true`).then((p) => setPorts(p.ports), () => {});
    api('GET', `/v1/nodes/${uuid}/history?detail=true`).then((h) => setHistory(h.history), () => setHistory([]));
  };
  useEffect(() => {
    api('GET', `/v1/nodes/${uuid}/inventory`).then(setInventory, () => setInventory(null));
  }, [uuid]);
  // The fleet's summary of this node changes with it: read the node again then.
  const key = summary && JSON.stringify({ ...summary, updated_at: 0, heartbeat_at: 0 });
  useEffect(load, [uuid, key]);
  if (error) return html`<p class="refused">${error}</p>`;
  if (!node) return html`<p class="muted">loading…</p>`;
  const now = f.now();
  return html`<section class="node" data-uuid=${uuid} data-state=${node.provision_state}>
    <h1>${node.name || node.uuid} <span class="state">${node.provision_state}</span>
      ${node.target_provision_state ? html` <span class="muted">→ ${node.target_provision_state}</span>` : ''}</h1>
    ${summary ? html`<p class="live-line"><${Progress} node=${summary} /> <${Clock} node=${summary} now=${now} />
      ${summary.status ? html` <span class="muted">${summary.status}</span>` : ''}</p>` : ''}
    ${node.last_error ? html`<p class="refused last-error">${node.last_error}</p>` : ''}
    <div class="actions">${ACTIONS.filter((a) => a.when(node)).map((a) => html`
      <button data-action=${a.name} onClick=${() => setAsked(a)}>${a.name}</button>`)}</div>
    ${asked ? html`<${Confirm} action=${asked} node=${node} onDone=${() => { setAsked(null); load(); }} />` : ''}
    ${node.console_enabled ? html`<div class="console-box">
      ${attached ? html`<${Console} uuid=${uuid} />` : ''}
      <button data-action="attach" onClick=${() => setAttached(!attached)}>${attached ? 'close the console' : 'open the console'}</button>
    </div>` : ''}
    <div class="columns">
      <div><h2>fields</h2><${Fields} node=${node} /></div>
      <div>
        <h2>timeline</h2><${Timeline} events=${history} />
        <h2>ports</h2>${ports.length ? html`<ul>${ports.map((p) => html`<li>${p.address}${p.pxe_enabled ? ' (PXE)' : ''}</li>`)}</ul>` : html`<p class="muted">none</p>`}
        <h2>inventory</h2>${inventory ? html`<pre class="inventory">${JSON.stringify(inventory.inventory || inventory, null, 1)}</pre>` : html`<p class="muted">not inspected</p>`}
      </div>
    </div>
  </section>`;
}
