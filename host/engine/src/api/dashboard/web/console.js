// A node's serial console in a terminal (xterm.js), over the engine's websocket. The
// engine says first whether this user may type; a watcher's terminal takes no input.
import { html, useEffect, useRef, useState } from '/dashboard/assets/preact-htm.js';
import { Terminal } from '/dashboard/assets/xterm.js';

export function Console({ uuid }) {
  const box = useRef(null);
  const [status, setStatus] = useState('connecting…');
  useEffect(() => {
    const term = new Terminal({ cursorBlink: true, rows: 24, cols: 100, disableStdin: true });
    term.open(box.current);
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    const socket = new WebSocket(`${scheme}://${location.host}/dashboard/nodes/${uuid}/console`);
    socket.binaryType = 'arraybuffer';
    let writable = false;
    socket.onmessage = (e) => {
      if (typeof e.data === 'string') {
        writable = JSON.parse(e.data).writable;
        term.options.disableStdin = !writable;
        setStatus(writable ? 'attached' : 'attached, read-only');
        if (writable) term.focus();
        return;
      }
      term.write(new Uint8Array(e.data));
    };
    socket.onclose = (e) => setStatus(`closed${e.reason ? `: ${e.reason}` : ''}`);
    const encoder = new TextEncoder();
    const typing = term.onData((d) => {
      if (writable && socket.readyState === WebSocket.OPEN) socket.send(encoder.encode(d));
    });
    return () => { typing.dispose(); socket.close(); term.dispose(); };
  }, [uuid]);
  return html`<div class="console"><p class="console-status">${status}</p><div class="terminal" ref=${box}></div></div>`;
}
