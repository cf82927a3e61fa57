// The Terminal view: the open chat's conversation in Claude Code's own
// terminal interface, drawn by xterm.js over a WebSocket (see the README
// for the framing). Closing the view ends the terminal, and the chat
// continues with what happened there; a dropped connection is re-opened
// and the server replays the screen.

import { Terminal } from '../vendor/xterm/xterm.mjs';
import { FitAddon } from '../vendor/xterm/addon-fit.mjs';

const RETRIES = 5;

// The page's policy allows no inline style, and xterm.js styles its cells
// inline: with <style> elements it makes (the policy applies only those
// that carry the page's nonce, so this document gives it to every style
// element made here) and with style attributes it sets on cells (set here
// through the CSSOM instead, which the policy does not govern). Markup
// injected into the page gets neither: only the page's scripts call these.
const NONCE = document.querySelector('meta[name="csp-nonce"]')?.content || '';
if (NONCE) {
  const create = document.createElement.bind(document);
  document.createElement = (tag, options) => {
    const el = create(tag, options);
    if (String(tag).toLowerCase() === 'style') el.nonce = NONCE;
    return el;
  };
}
const setAttribute = Element.prototype.setAttribute;
Element.prototype.setAttribute = function setAttributeThroughCSSOM(name, value) {
  if (String(name).toLowerCase() === 'style' && this instanceof HTMLElement) {
    this.style.cssText = String(value);
    return;
  }
  setAttribute.call(this, name, value);
};

// base64url is s (UTF-8) in base64url without padding, as the bearer
// subprotocol carries the token.
function base64url(s) {
  const bytes = new TextEncoder().encode(s);
  let bin = '';
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

export class TerminalView {
  // el holds the screen, status shows the connection's state, onClosed
  // runs when the terminal has ended.
  constructor(el, status, onClosed) {
    this.el = el;
    this.status = status;
    this.onClosed = onClosed;
    this.term = null;
    this.ws = null;
    this.closing = false;
  }

  async open(api, sessionID) {
    this.api = api;
    this.sessionID = sessionID;
    this.closing = false;
    this.retries = 0;
    this.everOpen = false;
    // xterm.js measures its cells once: the vendored font (and the signs
    // Claude Code draws, from its symbols font) must be there first.
    await Promise.all(['14px "Major Mono"', 'bold 14px "Major Mono"', '14px "Major Symbols"', '14px "Major Symbols 1"']
      .map((f) => document.fonts.load(f, 'a⎿⏺').catch(() => null)));
    if (this.closing) return; // closed while the fonts loaded
    this.term = new Terminal({ cursorBlink: true, fontSize: 14, scrollback: 5000,
      fontFamily: '"Major Mono", "Major Symbols", "Major Symbols 1", ui-monospace, Menlo, Consolas, "DejaVu Sans Mono", monospace' });
    this.fit = new FitAddon();
    this.term.loadAddon(this.fit);
    this.term.open(this.el);
    this.fit.fit();
    const encoder = new TextEncoder();
    this.term.onData((d) => this.send(encoder.encode(d)));
    this.term.onResize(({ cols, rows }) => this.send(JSON.stringify({ type: 'resize', cols, rows })));
    this.onWindowResize = () => this.fit.fit();
    window.addEventListener('resize', this.onWindowResize);
    this.connect();
    this.term.focus();
  }

  connect() {
    const url = new URL(this.api.base + this.api.session(this.sessionID) + '/terminal', location.href);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    this.status.textContent = 'Connecting…';
    const ws = new WebSocket(url, ['major.v1', 'bearer.' + base64url(this.api.token), 'person.' + this.api.person]);
    ws.binaryType = 'arraybuffer';
    this.ws = ws;
    this.term.reset();
    ws.onopen = () => {
      this.retries = 0;
      this.status.textContent = '';
      this.send(JSON.stringify({ type: 'resize', cols: this.term.cols, rows: this.term.rows }));
    };
    ws.onmessage = (e) => {
      if (e.data instanceof ArrayBuffer) this.term.write(new Uint8Array(e.data));
    };
    ws.onclose = (e) => {
      if (this.ws !== ws || this.closing) return;
      if (e.code === 1000) return this.ended('The terminal has ended.');
      if (e.code === 4000) return this.ended('The terminal was opened in another window.');
      if (e.code === 1006 && this.retries === 0 && !this.everOpen) {
        // The upgrade was refused: most often a reply is still running.
        return this.ended('The terminal could not be opened. If a reply is still running, wait for it and try again.');
      }
      if (this.retries++ >= RETRIES) return this.ended('The connection to the terminal was lost.');
      this.status.textContent = 'Reconnecting…';
      setTimeout(() => { if (!this.closing) this.connect(); }, 1000);
    };
    ws.addEventListener('open', () => { this.everOpen = true; });
  }

  send(data) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(data);
  }

  ended(message) {
    this.status.textContent = message;
    this.ws = null;
    if (this.onClosed) this.onClosed(message);
  }

  // close ends the terminal and resolves once the server has given the
  // conversation back to the chat (it then closes the connection).
  close() {
    this.closing = true;
    const ws = this.ws;
    this.ws = null;
    window.removeEventListener('resize', this.onWindowResize);
    const done = new Promise((resolve) => {
      if (!ws || ws.readyState !== WebSocket.OPEN) {
        if (ws) ws.close(1000);
        return resolve();
      }
      const t = setTimeout(() => { ws.close(1000); resolve(); }, 10000);
      ws.addEventListener('close', () => { clearTimeout(t); resolve(); });
      ws.send(JSON.stringify({ type: 'close' }));
    });
    return done.then(() => {
      if (this.term) this.term.dispose();
      this.term = null;
    });
  }
}
