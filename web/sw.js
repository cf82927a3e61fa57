// The service worker of the Major web app: it shows the notifications the
// server pushes (their payload: {type, session_id, request_id, title, body,
// actions: [{label, url}]}) and answers from their buttons. An action's URL
// takes a POST with no credential but the token in it; the worker shows
// what came of it in place of the notification. A click elsewhere on a
// notification opens its chat. It caches nothing: the app needs the server
// anyway.

const ICON = 'icons/icon-192.png';
const BADGE = 'icons/badge-96.png';
// The notifications that wait for an answer stay until answered.
const WAITS = new Set(['question', 'permission', 'draft']);

self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));

// tagOf is one notification per request (or per chat and kind), so a
// newer one replaces an older one of the same thing.
function tagOf(p) {
  return 'major:' + (p.session_id || '') + ':' + (p.request_id || p.type || '');
}

function payloadOf(data) {
  if (!data) return null;
  try {
    const p = data.json();
    if (p && typeof p === 'object') return p;
  } catch {
    // not JSON: shown as text below
  }
  return { type: 'test', title: 'Major', body: data.text(), actions: [] };
}

function show(p) {
  const actions = Array.isArray(p.actions) ? p.actions : [];
  const max = (self.Notification && Notification.maxActions) || 2;
  return self.registration.showNotification(p.title || 'Major', {
    body: p.body || '',
    tag: tagOf(p),
    data: p,
    icon: ICON,
    badge: BADGE,
    requireInteraction: WAITS.has(p.type),
    actions: actions.slice(0, max).map((a, i) => ({ action: String(i), title: String(a.label) })),
  });
}

self.addEventListener('push', (event) => {
  const p = payloadOf(event.data);
  if (p) event.waitUntil(show(p));
});

// answer posts the action and shows what came of it.
async function answer(p, action) {
  let text;
  try {
    const res = await fetch(action.url, { method: 'POST', credentials: 'omit', cache: 'no-store' });
    const body = await res.json().catch(() => ({}));
    if (res.ok) text = body.message || 'Done.';
    else if (res.status === 410) text = 'Nothing changed: this was answered already, or it ended.';
    else text = body.error || `Nothing changed: the server answered ${res.status}.`;
  } catch {
    text = 'Nothing changed: the server cannot be reached. Open the chat to answer.';
  }
  await self.registration.showNotification(p.title || 'Major', {
    body: text,
    tag: tagOf(p),
    data: { ...p, actions: [] },
    icon: ICON,
    badge: BADGE,
    silent: true,
  });
}

// open brings the app to the notification's chat: an open window of it is
// focused and told which chat, or a new one opens on it.
async function open(p) {
  const wins = await self.clients.matchAll({ type: 'window', includeUncontrolled: true });
  const mine = wins.find((w) => w.url.startsWith(self.registration.scope));
  if (mine) {
    await mine.focus();
    if (p.session_id) mine.postMessage({ type: 'open', session_id: p.session_id });
    return;
  }
  const hash = p.session_id ? '#' + encodeURIComponent(p.session_id) : '';
  await self.clients.openWindow(self.registration.scope + hash);
}

self.addEventListener('notificationclick', (event) => {
  const n = event.notification;
  const p = n.data || {};
  n.close();
  const actions = Array.isArray(p.actions) ? p.actions : [];
  const action = event.action !== '' ? actions[Number(event.action)] : null;
  event.waitUntil(action && action.url ? answer(p, action) : open(p));
});
