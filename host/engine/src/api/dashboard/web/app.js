// The dashboard: a hash router over the fleet view, a node's page and the engines.
import { html, render, useState, useEffect, useMemo, useRef } from '/dashboard/assets/preact-htm.js';
import { fleet, connect } from '/dashboard/assets/api.js';
import { NodePage } from '/dashboard/assets/node.js';
import { useFleet, Clock, Progress } from '/dashboard/assets/widgets.js';
import { EnginesPage } from '/dashboard/assets/engines.js';

const ROW = 34; // px: the virtualised list draws only the rows in view

const SORTS = {
  name: (a, b) => (a.name || a.uuid).localeCompare(b.name || b.uuid),
  state: (a, b) => a.state.localeCompare(b.state) || SORTS.name(a, b),
  clock: (a, b) => (a.timeout ? a.updated_at : Infinity) - (b.timeout ? b.updated_at : Infinity) || SORTS.name(a, b),
  progress: (a, b) => (b.total ? b.written / b.total : 0) - (a.total ? a.written / a.total : 0) || SORTS.name(a, b),
};

function Select({ label, value, options, onChange, name }) {
  return html`<label>${label} <select name=${name} value=${value} onChange=${(e) => onChange(e.target.value)}>
    <option value="">all</option>${options.map((o) => html`<option value=${o}>${o}</option>`)}</select></label>`;
}

function FleetView() {
  const f = useFleet();
  const [filter, setFilter] = useState({ state: '', driver: '', group: '', maintenance: '', search: '' });
  const [sort, setSort] = useState('name');
  const [top, setTop] = useState(0);
  const [height, setHeight] = useState(600);
  const list = useRef(null);
  const all = [...f.nodes.values()];
  const set = (k) => (v) => { setFilter({ ...filter, [k]: v }); if (list.current) list.current.scrollTop = 0; };
  const distinct = (k) => [...new Set(all.map((n) => n[k]))].sort();
  const counts = useMemo(() => {
    const c = new Map();
    for (const n of all) c.set(n.state, (c.get(n.state) || 0) + 1);
    return [...c.entries()].sort();
  }, [f.version]);
  const search = filter.search.trim().toLowerCase();
  const shown = useMemo(() => all.filter((n) =>
    (!filter.state || n.state === filter.state)
    && (!filter.driver || n.driver === filter.driver)
    && (!filter.group || n.group === filter.group)
    && (!filter.maintenance || String(n.maintenance) === filter.maintenance)
    && (!search || (n.name || '').toLowerCase().includes(search) || n.uuid.includes(search)
        || (n.last_error || '').toLowerCase().includes(search)))
    .sort(SORTS[sort]), [f.version, filter, sort]);
  useEffect(() => {
    const measure = () => list.current && setHeight(list.current.clientHeight);
    measure();
    window.addEventListener('resize', measure);
    return () => window.removeEventListener('resize', measure);
  }, []);
  // The first paint of a fleet, as a User Timing mark (what `deployd bench dashboard` reads).
  useEffect(() => {
    if (all.length && !performance.getEntriesByName('fleet-painted').length) performance.mark('fleet-painted');
  });
  const first = Math.max(0, Math.floor(top / ROW) - 5);
  const last = Math.min(shown.length, Math.ceil((top + height) / ROW) + 5);
  const now = f.now();
  return html`<section class="fleet">
    <div class="counts">
      <button class=${filter.state === '' ? 'count on' : 'count'} onClick=${() => set('state')('')}>all <b>${all.length}</b></button>
      ${counts.map(([state, n]) => html`<button class=${filter.state === state ? 'count on' : 'count'}
        data-state=${state} onClick=${() => set('state')(filter.state === state ? '' : state)}>${state} <b>${n}</b></button>`)}
    </div>
    <div class="filters">
      <input type="search" name="search" placeholder="name, uuid or error" value=${filter.search} onInput=${(e) => set('search')(e.target.value)} />
      <${Select} label="state" name="state" value=${filter.state} options=${distinct('state')} onChange=${set('state')} />
      <${Select} label="driver" name="driver" value=${filter.driver} options=${distinct('driver')} onChange=${set('driver')} />
      <${Select} label="group" name="group" value=${filter.group} options=${distinct('group')} onChange=${set('group')} />
      <${Select} label="maintenance" name="maintenance" value=${filter.maintenance} options=${['true', 'false']} onChange=${set('maintenance')} />
      <label>sort <select name="sort" value=${sort} onChange=${(e) => setSort(e.target.value)}>
        ${Object.keys(SORTS).map((s) => html`<option value=${s}>${s}</option>`)}</select></label>
      <span class="shown">${shown.length} shown</span>
    </div>
    <div class="row head"><span>name</span><span>driver</span><span>power</span><span>state</span>
      <span>progress</span><span>clock</span><span>last error</span></div>
    <div class="list" ref=${list} onScroll=${(e) => setTop(e.target.scrollTop)}>
      <div style="height: ${shown.length * ROW}px; position: relative">
        ${shown.slice(first, last).map((n, i) => html`<div class="row node" key=${n.uuid} data-uuid=${n.uuid}
            data-state=${n.state} style="top: ${(first + i) * ROW}px">
          <a href="#/nodes/${n.uuid}">${n.name || n.uuid}</a>
          <span>${n.driver}</span>
          <span>${n.power || '–'}</span>
          <span class="state">${n.state}${n.target ? html` <span class="muted">→ ${n.target}</span>` : ''}${n.maintenance ? html` <span class="maint">maintenance</span>` : ''}</span>
          <${Progress} node=${n} />
          <${Clock} node=${n} now=${now} />
          <span class="error" title=${n.last_error || ''}>${n.last_error || ''}</span>
        </div>`)}
      </div>
    </div>
  </section>`;
}

function route() {
  const hash = location.hash.replace(/^#\/?/, '');
  const [page, id] = hash.split('/');
  return { page: page || 'fleet', id };
}

function App() {
  const [where, setWhere] = useState(route());
  const f = useFleet();
  useEffect(() => {
    const go = () => setWhere(route());
    window.addEventListener('hashchange', go);
    return () => window.removeEventListener('hashchange', go);
  }, []);
  return html`<header>
      <a class="brand" href="#/">deployd</a>
      <nav><a href="#/" class=${where.page === 'fleet' ? 'on' : ''}>fleet</a>
        <a href="#/engines" class=${where.page === 'engines' ? 'on' : ''}>engines and drivers</a></nav>
      <span class=${f.connected ? 'live on' : 'live'}>${f.connected ? 'live' : 'connecting…'}</span>
    </header>
    <main>${where.page === 'nodes' && where.id ? html`<${NodePage} uuid=${where.id} />`
      : where.page === 'engines' ? html`<${EnginesPage} />` : html`<${FleetView} />`}</main>`;
}

connect();
const root = document.getElementById('app');
root.textContent = '';
render(html`<${App} />`, root);
