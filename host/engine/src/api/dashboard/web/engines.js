// The engines (Ironic's conductors) and the driver components they run: versions, the
// calls each driver answered and how long they took (from /metrics), and an upload.
import { html, useState, useEffect } from '/dashboard/assets/preact-htm.js';
import { api } from '/dashboard/assets/api.js';

// deployd_driver_call_seconds_{count,sum}{driver="…",export="…"} from the metrics text.
export function driverCalls(text) {
  const calls = {};
  const line = /^deployd_driver_call_seconds_(count|sum)\{([^}]*)\} (\S+)$/;
  for (const l of text.split('\n')) {
    const m = line.exec(l);
    if (!m) continue;
    const labels = Object.fromEntries([...m[2].matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1], x[2]]));
    const call = ((calls[labels.driver] ||= {})[labels.export] ||= { count: 0, sum: 0 });
    call[m[1]] = Number(m[3]);
  }
  return calls;
}

export function EnginesPage() {
  const [conductors, setConductors] = useState(null);
  const [drivers, setDrivers] = useState(null);
  const [calls, setCalls] = useState({});
  const [error, setError] = useState(null);
  const [note, setNote] = useState(null);
  const load = () => {
    api('GET', '/v1/conductors?detail=true').then((c) => setConductors(c.conductors), (e) => setError(e.message));
    api('GET', '/v1/drivers?detail=true').then((d) => setDrivers(d.drivers), (e) => setError(e.message));
    fetch('/metrics', { credentials: 'same-origin' }).then((r) => r.text()).then((t) => setCalls(driverCalls(t)), () => {});
  };
  useEffect(() => { load(); const t = setInterval(load, 5000); return () => clearInterval(t); }, []);
  const upload = async (e) => {
    e.preventDefault();
    const file = e.target.elements.component.files[0];
    if (!file) return;
    setNote('loading…');
    try {
      const driver = await api('POST', '/v1/deployd/drivers', file);
      setNote(`loaded ${driver.name} ${(driver.deployd || {}).version || ''}`);
    } catch (refused) {
      setNote(`refused: ${refused.message}`);
    }
    load();
  };
  return html`<section class="engines">
    ${error ? html`<p class="refused">${error}</p>` : ''}
    <h2>engines</h2>
    <table><thead><tr><th>hostname</th><th>group</th><th>alive</th><th>drivers</th><th>since</th></tr></thead>
      <tbody>${(conductors || []).map((c) => html`<tr data-engine=${c.hostname}><td>${c.hostname}</td>
        <td>${c.conductor_group || '(default)'}</td><td>${c.alive ? 'yes' : 'no'}</td>
        <td>${(c.drivers || []).join(', ')}</td><td>${c.created_at || ''}</td></tr>`)}</tbody></table>
    <h2>drivers</h2>
    <table><thead><tr><th>name</th><th>family</th><th>version</th><th>WIT</th><th>calls</th></tr></thead>
      <tbody>${(drivers || []).map((d) => {
        const c = d.deployd || {};
        const byCall = calls[d.name] || {};
        return html`<tr data-driver=${d.name}><td>${d.name}</td><td>${c.family || ''}</td><td>${c.version || ''}</td>
          <td>${c.wit || ''}</td><td>${Object.entries(byCall).map(([name, v]) => html`<span class="call">
            ${name}: ${v.count} × ${v.count ? ((1000 * v.sum) / v.count).toFixed(1) : 0} ms</span>`)}</td></tr>`;
      })}</tbody></table>
    <h2>load a driver</h2>
    <form onSubmit=${upload}><input type="file" name="component" accept=".wasm" />
      <button type="submit">load</button> ${note ? html`<span class="note">${note}</span>` : ''}</form>
  </section>`;
}
