// The API as the page calls it (with the browser's credentials), and the fleet as the
// engine's event stream keeps it.

const VERSION = 'latest';

// An API call: its JSON, or an Error whose message is the API's own words. `body` is
// sent as JSON, or as it is when it is a file.
export async function api(method, path, body) {
  const headers = { 'X-OpenStack-Ironic-API-Version': VERSION, Accept: 'application/json' };
  // A file (a driver component) is sent as it is; anything else as JSON.
  const raw = body instanceof Blob;
  if (body !== undefined) headers['Content-Type'] = raw ? 'application/wasm' : 'application/json';
  const response = await fetch(path, {
    method, headers, credentials: 'same-origin',
    body: body === undefined || raw ? body : JSON.stringify(body),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(refusal(response.status, text));
  return text ? JSON.parse(text) : null;
}

// Ironic's error body: {"error_message": "<JSON with faultstring>"}.
function refusal(status, text) {
  try {
    const outer = JSON.parse(text).error_message;
    const inner = typeof outer === 'string' ? JSON.parse(outer) : outer;
    if (inner && inner.faultstring) return inner.faultstring;
  } catch (_) { /* not Ironic's shape: the text as it is */ }
  return `${status}: ${text || 'no answer'}`;
}

// The fleet: uuid → summary, from /dashboard/events. `now` is the engine's clock at the
// last scan; `skew` turns the browser's clock into the engine's.
export const fleet = {
  nodes: new Map(),
  skew: 0,
  connected: false,
  version: 0,
  listeners: new Set(),
  now() { return Date.now() + this.skew; },
  changed() { this.version++; for (const l of this.listeners) l(this.version); },
};

function apply(data, replace) {
  if (replace) fleet.nodes = new Map();
  for (const node of data.nodes) fleet.nodes.set(node.uuid, node);
  for (const uuid of data.removed) fleet.nodes.delete(uuid);
  fleet.skew = data.now - Date.now();
  fleet.changed();
}

// The stream is closed when the page is hidden for another (a browser keeps a page it
// navigated away from, and its open stream, in its back-forward cache: over HTTP/1.1 six
// such streams took every connection to the engine and the next page waited a minute),
// and opened again if the page is shown again.
export function connect() {
  let source = null;
  const open = () => {
    source = new EventSource('/dashboard/events');
    source.addEventListener('fleet', (e) => { fleet.connected = true; apply(JSON.parse(e.data), true); });
    source.addEventListener('changes', (e) => apply(JSON.parse(e.data), false));
    source.onerror = () => { fleet.connected = false; fleet.changed(); };
  };
  window.addEventListener('pagehide', () => { source.close(); fleet.connected = false; });
  window.addEventListener('pageshow', (e) => { if (e.persisted) open(); });
  open();
}
