// Devices: the signed-in person's tokens, each device's own, listed and
// revoked; "Add a device" makes a one-time pairing code (a QR code and a
// short code, valid 10 minutes) that gives a new device a token of its
// own without anyone copying one; and the Android app's settings, filled
// from a token made for it here.

import { ApiError } from './api.js';
import { h } from './chat.js';

// pairingCode is the code in a pairing link (#pair=CODE), or ''.
export function pairingCode(hash) {
  const m = /^#pair=([0-9A-Za-z-]{6,24})$/.exec(hash || '');
  return m ? m[1] : '';
}

// redeemPairing gives this device a token of its own for a pairing code:
// {token, person, name, server}.
export async function redeemPairing(code, base = '') {
  let res;
  try {
    res = await fetch(base + '/api/claude/pair', {
      method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
      body: JSON.stringify({ code }), cache: 'no-store',
    });
  } catch {
    throw new ApiError(0, 'The server cannot be reached. Check your connection and try again.');
  }
  const data = await res.json().catch(() => null);
  if (!res.ok) {
    throw new ApiError(res.status, (data && data.error) || `The server answered ${res.status}.`);
  }
  return data;
}

function when(iso) {
  if (!iso) return 'never';
  return new Date(iso).toLocaleString();
}

export class DevicesView {
  // ui holds the view's elements; api() is the signed-in Api.
  constructor(ui, api) {
    this.ui = ui;
    this.api = api;
    ui.close.addEventListener('click', () => this.close());
    ui.add.addEventListener('submit', (e) => {
      e.preventDefault();
      this.addDevice();
    });
    ui.androidSetup.addEventListener('click', () => this.setUpApp());
    ui.androidCopy.addEventListener('click', () => navigator.clipboard?.writeText(ui.androidToken.value));
  }

  open() {
    this.ui.view.hidden = false;
    this.ui.pairing.hidden = true;
    this.error('');
    this.load();
  }

  close() {
    this.ui.view.hidden = true;
    this.ui.androidToken.value = '';
    this.ui.androidFields.hidden = true;
  }

  error(msg) {
    this.ui.error.textContent = msg;
    this.ui.error.hidden = !msg;
  }

  async load() {
    let tokens;
    try {
      tokens = (await this.api().request('GET', '/api/claude/tokens')).tokens || [];
    } catch (err) {
      this.error(err.message);
      return;
    }
    const rows = tokens.map((t) => {
      const note = [t.current ? 'this device' : '', t.shared ? 'shared with ' + t.persons.join(', ') : '', 'last used ' + when(t.last_used)]
        .filter(Boolean).join(' · ');
      const revoke = h('button', { type: 'button', class: 'danger', disabled: t.shared, title: t.shared ? 'Only the server\'s owner revokes a shared token' : null,
        onclick: () => this.revoke(t.name) }, 'Revoke');
      return h('li', { class: 'device', 'data-name': t.name }, h('span', { class: 'device-name', text: t.name }), h('span', { class: 'muted', text: note }), revoke);
    });
    this.ui.list.replaceChildren(...rows);
  }

  async revoke(name) {
    try {
      await this.api().request('DELETE', '/api/claude/tokens/' + encodeURIComponent(name));
    } catch (err) {
      this.error(err.message);
      return;
    }
    this.load();
  }

  async addDevice() {
    this.error('');
    let p;
    try {
      p = await this.api().request('POST', '/api/claude/pairings', { name: this.ui.name.value.trim() || 'Device' });
    } catch (err) {
      this.error(err.message);
      return;
    }
    this.ui.qr.src = 'data:image/png;base64,' + p.qr_png;
    this.ui.qr.dataset.url = p.url;
    this.ui.code.textContent = p.code;
    this.ui.expires.textContent = `For "${p.name}", once, until ${new Date(p.expires).toLocaleTimeString()}.`;
    this.ui.pairing.hidden = false;
  }

  // setUpApp makes the Android app a token of its own (a pairing made and
  // redeemed at once) and shows what its settings take.
  async setUpApp() {
    this.error('');
    try {
      const p = await this.api().request('POST', '/api/claude/pairings', { name: 'Android app' });
      const t = await redeemPairing(p.code);
      this.ui.androidServer.value = t.server;
      this.ui.androidPerson.value = t.person;
      this.ui.androidToken.value = t.token;
      this.ui.androidFields.hidden = false;
    } catch (err) {
      this.error(err.message);
    }
    this.load();
  }
}
