// Notifications in the web client: the service worker that shows what the
// server pushes (sw.js), this browser's push subscription as one of the
// person's devices, the settings page (devices, events, quiet hours, a
// test notification), and whether this page is seen: the server notifies
// only when no page of the person watches the chat.

import { h } from './chat.js';

const DEVICE_KEY = 'major.device';

// The events a person may choose, as the server names them.
const EVENTS = [
  ['question', 'Major asks you a question'],
  ['permission', 'Major needs your permission for a tool'],
  ['draft', 'A post waits for your approval'],
  ['done', 'A reply is ready'],
  ['error', 'A reply failed'],
  ['refused', 'What you sent was refused (budget, rate limit)'],
];

// pageID names this page for its visibility reports; a new one per load.
export const pageID = (crypto.randomUUID ? crypto.randomUUID() : String(Math.random()).slice(2)).replace(/-/g, '');

// visible reports whether the person can see this page.
export function visible() {
  return document.visibilityState === 'visible';
}

// appKey is a VAPID public key (base64url) as PushManager takes it.
function appKey(b64) {
  const s = atob(b64.replace(/-/g, '+').replace(/_/g, '/') + '='.repeat((4 - (b64.length % 4)) % 4));
  return Uint8Array.from(s, (c) => c.charCodeAt(0));
}

const supported = () => 'serviceWorker' in navigator && 'PushManager' in window && 'Notification' in window;

export class Notifications {
  // ui holds the settings page's elements; openChat(id) opens a chat (a
  // notification was clicked); api() is the signed-in Api or null.
  constructor(ui, api, openChat) {
    this.ui = ui;
    this.api = api;
    this.openChat = openChat;
    this.registration = null;
    this.devices = [];
    for (const [value, label] of EVENTS) {
      ui.events.append(h('label', { class: 'option check' },
        h('input', { type: 'checkbox', name: 'event', value }),
        h('span', { class: 'option-body' }, h('span', { class: 'option-label', text: label }))));
    }
    ui.deviceOn.addEventListener('click', () => this.turnOn());
    ui.deviceOff.addEventListener('click', () => this.turnOff());
    ui.form.addEventListener('submit', (e) => {
      e.preventDefault();
      this.save();
    });
    ui.test.addEventListener('click', () => this.test());
    ui.ntfyForm.addEventListener('submit', (e) => {
      e.preventDefault();
      this.addNtfy();
    });
    if ('serviceWorker' in navigator) {
      navigator.serviceWorker.addEventListener('message', (e) => {
        if (e.data && e.data.type === 'open' && typeof e.data.session_id === 'string') this.openChat(e.data.session_id);
      });
    }
  }

  // start registers the service worker once signed in, and, where this
  // browser already subscribed, registers its subscription again (its keys
  // may have changed; the server keeps one device per endpoint).
  async start() {
    if (!('serviceWorker' in navigator)) return;
    try {
      this.registration = await navigator.serviceWorker.register('sw.js');
      if (!supported() || Notification.permission !== 'granted') return;
      const sub = await this.registration.pushManager.getSubscription();
      if (sub) await this.register(sub);
    } catch {
      // no worker or no push here: the settings page says so
    }
  }

  async register(sub) {
    const device = await this.api().addDevice({ kind: 'webpush', subscription: sub.toJSON(), name: deviceName() });
    localStorage.setItem(DEVICE_KEY, device.id);
    return device;
  }

  status(text, error = false) {
    this.ui.status.textContent = text;
    this.ui.status.classList.toggle('error', error);
  }

  async show() {
    this.ui.view.hidden = false;
    this.status('');
    await this.refresh();
  }

  hide() {
    this.ui.view.hidden = true;
  }

  async refresh() {
    const api = this.api();
    if (!api) return;
    try {
      const [devices, settings] = await Promise.all([api.devices(), api.notificationSettings()]);
      this.devices = devices;
      this.renderDevices();
      this.renderSettings(settings);
    } catch (err) {
      this.status(err.message, true);
    }
    await this.renderThisDevice();
  }

  async renderThisDevice() {
    const { deviceStatus, deviceOn, deviceOff } = this.ui;
    const mine = this.devices.some((d) => d.id === localStorage.getItem(DEVICE_KEY));
    deviceOn.hidden = mine;
    deviceOff.hidden = !mine;
    if (!supported()) {
      deviceStatus.textContent = 'This browser cannot show notifications from Major. On an iPhone, add Major to the home screen first.';
      deviceOn.disabled = true;
    } else if (Notification.permission === 'denied') {
      deviceStatus.textContent = 'Notifications are blocked for this site in the browser settings.';
      deviceOn.disabled = true;
    } else {
      deviceStatus.textContent = mine ? 'This browser gets notifications.' : 'This browser gets no notifications.';
      deviceOn.disabled = false;
    }
  }

  renderDevices() {
    const items = this.devices.map((d) => h('li', { class: 'device' },
      h('span', {},
        h('span', { class: 'device-name', text: d.name || { webpush: 'Browser', ntfy: 'ntfy', fcm: 'Android app' }[d.kind] || d.kind }),
        h('br'),
        h('span', { class: 'device-meta', text: `${d.kind} · ${d.host || ''} · added ${new Date(d.created).toLocaleDateString()}` })),
      h('button', { type: 'button', text: 'Remove', onclick: () => this.remove(d.id) })));
    this.ui.devices.replaceChildren(...items);
    this.ui.devicesEmpty.hidden = items.length > 0;
  }

  renderSettings(s) {
    const events = new Set(s.events || EVENTS.map(([v]) => v));
    for (const box of this.ui.events.querySelectorAll('input[name=event]')) box.checked = events.has(box.value);
    const q = s.quiet_hours;
    this.ui.quietOn.checked = !!q;
    if (q) {
      this.ui.quietFrom.value = q.from;
      this.ui.quietTo.value = q.to;
    }
    this.ui.quietTZ.value = (q && q.tz) || Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
  }

  async save() {
    const events = [...this.ui.events.querySelectorAll('input[name=event]:checked')].map((b) => b.value);
    const quiet = this.ui.quietOn.checked
      ? { from: this.ui.quietFrom.value, to: this.ui.quietTo.value, tz: this.ui.quietTZ.value.trim() }
      : null;
    try {
      this.renderSettings(await this.api().saveNotificationSettings({ events, quiet_hours: quiet }));
      this.status('Saved.');
    } catch (err) {
      this.status(err.message, true);
    }
  }

  async turnOn() {
    this.ui.deviceOn.disabled = true;
    try {
      if ((await Notification.requestPermission()) !== 'granted') {
        this.status('Notifications were not allowed in the browser.', true);
        return;
      }
      const reg = this.registration || (await navigator.serviceWorker.register('sw.js'));
      const { vapid_public_key: key } = await this.api().pushConfig();
      let sub = await reg.pushManager.getSubscription();
      if (!sub) sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: appKey(key) });
      await this.register(sub);
      this.status('Notifications are on for this browser.');
    } catch (err) {
      this.status('Notifications could not be turned on: ' + err.message, true);
    } finally {
      this.ui.deviceOn.disabled = false;
      await this.refresh();
    }
  }

  async turnOff() {
    const id = localStorage.getItem(DEVICE_KEY);
    try {
      if (this.registration) {
        const sub = await this.registration.pushManager.getSubscription();
        if (sub) await sub.unsubscribe();
      }
      if (id) await this.api().removeDevice(id).catch(() => {});
      localStorage.removeItem(DEVICE_KEY);
      this.status('Notifications are off for this browser.');
    } catch (err) {
      this.status(err.message, true);
    }
    await this.refresh();
  }

  async remove(id) {
    try {
      await this.api().removeDevice(id);
      if (id === localStorage.getItem(DEVICE_KEY)) localStorage.removeItem(DEVICE_KEY);
    } catch (err) {
      this.status(err.message, true);
    }
    await this.refresh();
  }

  async addNtfy() {
    try {
      await this.api().addDevice({ kind: 'ntfy', url: this.ui.ntfyURL.value.trim(), token: this.ui.ntfyToken.value.trim(), name: 'ntfy' });
      this.ui.ntfyURL.value = '';
      this.ui.ntfyToken.value = '';
      this.status('The ntfy topic gets notifications now.');
    } catch (err) {
      this.status(err.message, true);
    }
    await this.refresh();
  }

  async test() {
    try {
      const res = await this.api().testNotification();
      const failed = res.results.filter((r) => r.error);
      if (!res.results.length) this.status('You have no device to send to yet.', true);
      else if (!failed.length) this.status(`Sent to ${res.sent} device${res.sent === 1 ? '' : 's'}.`);
      else this.status(`Sent to ${res.sent}; not to ${failed.map((r) => (r.device.name || r.device.kind) + ' (' + r.error + ')').join(', ')}.`, true);
    } catch (err) {
      this.status(err.message, true);
    }
    await this.refresh();
  }
}

// deviceName names this browser in the device list.
function deviceName() {
  const ua = navigator.userAgent;
  const browser = /Firefox\//.test(ua) ? 'Firefox' : /Edg\//.test(ua) ? 'Edge' : /Chrome\//.test(ua) ? 'Chrome' : /Safari\//.test(ua) ? 'Safari' : 'Browser';
  const os = /Android/.test(ua) ? 'Android' : /iPhone|iPad/.test(ua) ? 'iOS' : /Mac OS X/.test(ua) ? 'macOS' : /Windows/.test(ua) ? 'Windows' : /Linux/.test(ua) ? 'Linux' : '';
  return os ? `${browser} on ${os}` : browser;
}
