// The Major web client: sign-in, the list of chats, the open chat
// attached to its event stream, and the notification settings.

import { Api, ApiError } from './api.js';
import { EventStream } from './stream.js';
import { ChatView, h } from './chat.js';
import { TerminalView } from './terminal.js';
import { Tray, NotesPanel, DiffDialog, attachedFiles } from './notes.js';
import { DevicesView, pairingCode, redeemPairing } from './devices.js';
import { Notifications, pageID, visible } from './notifications.js';
import { UsageView } from './usage.js';

const AUTH_KEY = 'major.auth';
const SESSION_KEY = 'major.session';
const POLL_MS = 5000;

const $ = (id) => document.getElementById(id);

const ui = {
  signin: $('signin'),
  signinForm: $('signin-form'),
  token: $('signin-token'),
  person: $('signin-person'),
  signinError: $('signin-error'),
  signinSubmit: $('signin-submit'),
  app: $('app'),
  menu: $('menu'),
  title: $('chat-title'),
  connection: $('connection'),
  who: $('who'),
  whoSide: $('who-side'),
  signout: $('signout'),
  sidebar: $('sidebar'),
  scrim: $('scrim'),
  newChat: $('new-chat'),
  sessions: $('sessions'),
  sessionsEmpty: $('sessions-empty'),
  transcript: $('transcript'),
  empty: $('empty'),
  status: $('status'),
  composer: $('composer'),
  message: $('message'),
  send: $('send'),
  sendNow: $('send-now'),
  interrupt: $('interrupt'),
  queue: $('queue'),
  hint: $('composer-hint'),
  controls: $('controls'),
  model: $('model'),
  mode: $('mode'),
  spend: $('spend'),
  fork: $('fork'),
  openTerminal: $('open-terminal'),
  terminalView: $('terminal-view'),
  terminalStatus: $('terminal-status'),
  closeTerminal: $('close-terminal'),
  terminal: $('terminal'),
  openNotes: $('open-notes'),
  attachFiles: $('attach-files'),
  attachCamera: $('attach-camera'),
  attachNote: $('attach-note'),
  tray: $('tray'),
  notesPanel: $('notes-panel'),
  diffDialog: $('diff-dialog'),
  pairForm: $('pair-form'),
  pairCode: $('pair-code'),
  pairError: $('pair-error'),
  openDevices: $('open-devices'),
  openSettings: $('open-settings'),
  openUsage: $('open-usage'),
  chatSearch: $('chat-search'),
  chatMenu: $('chat-menu'),
};

const notifications = new Notifications({
  view: $('settings-view'),
  status: $('settings-status'),
  deviceStatus: $('this-device-status'),
  deviceOn: $('device-on'),
  deviceOff: $('device-off'),
  devices: $('push-devices'),
  devicesEmpty: $('devices-empty'),
  ntfyForm: $('ntfy-form'),
  ntfyURL: $('ntfy-url'),
  ntfyToken: $('ntfy-token'),
  form: $('settings-form'),
  events: $('events'),
  quietOn: $('quiet-on'),
  quietFrom: $('quiet-from'),
  quietTo: $('quiet-to'),
  quietTZ: $('quiet-tz'),
  test: $('test-notification'),
}, () => app.api, (id) => {
  notifications.hide();
  if (id !== app.current) openSession(id);
});

const app = {
  api: null,
  sessions: [],
  current: null, // open session id
  stream: null,
  posting: false,
  // A message was accepted but its turn_start has not arrived yet.
  awaitingTurn: false,
  // steering are the messages given to the running reply ("Send now")
  // that have not gone in yet: queue id -> text.
  steering: new Map(),
  interrupting: false,
  poll: null,
  notice: '',
  // usage is today's spending and the limits (GET /usage).
  usage: null,
  // controlling counts the setting changes on their way to the server.
  controlling: 0,
  // query is the chat list's search, found what it found (null without
  // one); the list shows found, the rest of the page reads sessions.
  query: '',
  found: null,
  // rowOpen is the chat whose options are open in the list, and what
  // they show: 'menu', 'rename' or 'delete'.
  rowOpen: null,
};

const tray = new Tray(ui.tray, () => updateChrome());
const notes = new NotesPanel(ui.notesPanel, null, { onPick: (path) => tray.addNote(path) });
const diff = new DiffDialog(ui.diffDialog, { api: null, session: () => app.current, onDone: () => refreshSoon() });

const view = new ChatView(ui.transcript, {
  answer: (requestID, answers) => app.api.answer(app.current, requestID, answers),
  permission: (requestID, behavior, remember) => app.api.permission(app.current, requestID, behavior, remember),
  attached: (files, paths) => attachedFiles(app.api, files, paths, (p) => notes.open(p)),
  showChanges: (turn) => diff.show(turn),
  regenerate: (turn, message, changed) => regenerate(turn, message, changed),
}, (kind) => {
  if (kind === 'turn_start' || kind === 'done' || kind === 'error') {
    app.awaitingTurn = false;
    app.interrupting = false;
  }
  if (kind !== 'text' && kind !== 'reset') {
    renderSessions();
    refreshSoon();
  } else {
    updateChrome();
  }
});

// ---- sign-in ----

function loadAuth() {
  try {
    const a = JSON.parse(localStorage.getItem(AUTH_KEY) || 'null');
    if (a && typeof a.token === 'string' && typeof a.person === 'string') return a;
  } catch {
    // a damaged entry: sign in again
  }
  return null;
}

function showSignin(message) {
  stopStream();
  clearInterval(app.poll);
  notifications.hide();
  app.api = null;
  ui.app.hidden = true;
  ui.signin.hidden = false;
  const saved = loadAuth();
  if (saved && !ui.person.value) ui.person.value = saved.person;
  ui.signinError.textContent = message || '';
  ui.signinError.hidden = !message;
  (ui.person.value ? ui.token : ui.person).focus();
  firstScreen();
}

// firstScreen marks when the page first became usable (the sign-in or
// the chat), for the browser test's performance timeline.
function firstScreen() {
  if (!performance.getEntriesByName('major-usable').length) performance.mark('major-usable');
}

async function signIn(auth) {
  const api = new Api(auth);
  const sessions = await api.listSessions();
  app.api = api;
  notes.setApi(api);
  diff.setApi(api);
  app.sessions = sessions;
  localStorage.setItem(AUTH_KEY, JSON.stringify(auth));
  ui.signin.hidden = true;
  ui.app.hidden = false;
  ui.who.textContent = auth.person;
  ui.whoSide.textContent = 'Signed in as ' + auth.person;
  ui.token.value = '';
  clearInterval(app.poll);
  app.poll = setInterval(refreshSessions, POLL_MS);
  const wanted = decodeURIComponent(location.hash.slice(1)) || localStorage.getItem(SESSION_KEY);
  if (wanted && sessions.some((s) => s.id === wanted)) openSession(wanted);
  else closeSession();
  renderSessions();
  notifications.start();
  firstScreen();
}

function signInError(err) {
  if (!(err instanceof ApiError)) return 'Signing in failed: ' + err.message;
  switch (err.status) {
    case 401:
      return 'That access token is not valid.';
    case 403:
      return 'This token may not act as that person.';
    case 400:
      return 'The person is a lowercase name such as "sebastian".';
  }
  return err.message;
}

ui.signinForm.addEventListener('submit', async (e) => {
  e.preventDefault();
  const auth = { token: ui.token.value.trim(), person: ui.person.value.trim().toLowerCase() };
  if (!auth.token || !auth.person) {
    ui.signinError.textContent = 'Enter your access token and your name.';
    ui.signinError.hidden = false;
    return;
  }
  ui.signinSubmit.disabled = true;
  try {
    await signIn(auth);
  } catch (err) {
    ui.signinError.textContent = signInError(err);
    ui.signinError.hidden = false;
  } finally {
    ui.signinSubmit.disabled = false;
  }
});

ui.signout.addEventListener('click', () => {
  localStorage.removeItem(AUTH_KEY);
  localStorage.removeItem(SESSION_KEY);
  closeSession();
  showSignin('');
});

// sessionLost handles a request that says our sign-in no longer works.
function authLost(err) {
  if (err instanceof ApiError && (err.status === 401 || err.status === 403)) {
    localStorage.removeItem(AUTH_KEY);
    showSignin('Your sign-in is no longer valid. Sign in again.');
    return true;
  }
  return false;
}

// ---- sessions ----

let refreshTimer = null;
function refreshSoon() {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(refreshSessions, 300);
}

async function refreshSessions() {
  if (!app.api) return;
  try {
    const query = app.query;
    const [sessions, found] = await Promise.all([app.api.listSessions(), query ? app.api.searchSessions(query) : null]);
    // A search typed meanwhile answers for itself.
    if (query !== app.query) return;
    app.sessions = sessions;
    app.found = found;
    app.usage = await app.api.usage();
    renderSessions();
  } catch (err) {
    authLost(err);
  }
}

const STATE_LABEL = { running: 'Running', waiting: 'Needs your answer' };

// renderSessions brings the chat list up to date in place: a row is made
// once per chat and then only changed, so a click whose press and release
// straddle a redraw (the list redraws on every event of the open chat)
// still lands on the same element and opens the chat.
function renderSessions() {
  const rows = new Map([...ui.sessions.children].map((li) => [li.dataset.sessionId, li]));
  const shown = app.found || app.sessions;
  shown.forEach((s, i) => {
    const li = sessionRow(rows.get(s.id), s);
    if (ui.sessions.children[i] !== li) ui.sessions.insertBefore(li, ui.sessions.children[i] || null);
  });
  while (ui.sessions.children.length > shown.length) ui.sessions.lastElementChild.remove();
  ui.sessionsEmpty.textContent = app.query ? 'No chat has these words.' : 'No chats yet.';
  ui.sessionsEmpty.hidden = shown.length > 0;
  updateChrome();
}

// sessionRow makes chat s's row in the list, or brings li, its row, up
// to date.
function sessionRow(li, s) {
  if (!li) {
    li = h('li', { class: 'session-row' },
      h('button', { type: 'button', class: 'session', 'data-session-id': s.id, onclick: () => { openSession(s.id); closeDrawer(); } },
        h('span', { class: 'session-title' }),
        h('span', { class: 'session-meta' }, h('span', { class: 'badge' }), h('time', {})),
        h('span', { class: 'session-match' })),
      h('button', { type: 'button', class: 'session-more', 'aria-expanded': 'false', onclick: () => toggleRow(s.id) }, h('span', { 'aria-hidden': 'true', text: '⋯' })),
      h('div', { class: 'session-options', hidden: true }));
    li.dataset.sessionId = s.id;
  }
  li.classList.toggle('pinned', !!s.pinned);
  const more = li.children[1];
  more.setAttribute('aria-label', 'Options for ' + (s.title || 'New chat'));
  const current = s.id === app.current;
  // The open chat's stream knows its state sooner than the list does.
  const state = current && app.stream && app.stream.state === 'live'
    ? (view.waiting ? 'waiting' : view.running ? 'running' : 'idle') : s.state;
  const label = STATE_LABEL[state];
  const button = li.firstElementChild;
  button.className = 'session' + (current ? ' current' : '');
  if (current) button.setAttribute('aria-current', 'page');
  else button.removeAttribute('aria-current');
  const [title, meta, match] = button.children;
  title.replaceChildren(
    s.pinned ? h('span', { class: 'mark pin', text: 'Pinned' }) : '',
    s.forked_from ? h('span', { class: 'mark fork', text: 'Fork', title: 'Forked from another chat' }) : '',
    s.title || 'New chat');
  title.title = s.title || '';
  match.textContent = s.match || '';
  match.hidden = !s.match;
  const [badge, time] = meta.children;
  badge.className = 'badge ' + (label ? state : '');
  badge.textContent = label || '';
  badge.hidden = !label;
  time.dateTime = s.last_activity || '';
  time.textContent = ago(s.last_activity);
  return li;
}

// toggleRow opens or closes a chat's options in the list.
function toggleRow(id, mode = 'menu') {
  app.rowOpen = app.rowOpen && app.rowOpen.id === id && mode === 'menu' ? null : { id, mode };
  drawRowOptions();
}

// drawRowOptions shows the open chat's options (Rename, Pin, Delete), or
// its rename form or its delete question, and hides every other row's.
function drawRowOptions() {
  for (const li of ui.sessions.children) {
    const open = app.rowOpen && app.rowOpen.id === li.dataset.sessionId ? app.rowOpen : null;
    const [, more, panel] = li.children;
    more.setAttribute('aria-expanded', String(!!open));
    if (!open) {
      if (!panel.hidden) panel.replaceChildren();
      panel.hidden = true;
      continue;
    }
    const s = (app.found || app.sessions).find((x) => x.id === open.id) || { id: open.id };
    panel.hidden = false;
    if (open.mode === 'rename') {
      const input = h('input', { type: 'text', value: s.title || '', maxlength: '200', 'aria-label': 'New title', spellcheck: 'false' });
      const form = h('form', { class: 'rename-form' }, input,
        h('button', { type: 'submit', class: 'primary', text: 'Save' }),
        h('button', { type: 'button', text: 'Cancel', onclick: () => closeRow(more) }));
      form.addEventListener('submit', (e) => {
        e.preventDefault();
        rowAction(() => app.api.renameSession(s.id, input.value), more);
      });
      panel.replaceChildren(form, h('p', { class: 'form-error', role: 'alert', hidden: true }));
      input.focus();
      input.select();
    } else if (open.mode === 'delete') {
      const keep = h('button', { type: 'button', text: 'Keep it', onclick: () => closeRow(more) });
      panel.replaceChildren(h('p', { class: 'delete-question', text: 'Delete this chat and its history?' }),
        h('div', { class: 'row-actions' },
          h('button', { type: 'button', class: 'danger', text: 'Delete', onclick: () => deleteChat(s.id) }), keep),
        h('p', { class: 'form-error', role: 'alert', hidden: true }));
      keep.focus();
    } else {
      const first = h('button', { type: 'button', text: 'Rename', onclick: () => toggleRow(s.id, 'rename') });
      panel.replaceChildren(h('div', { class: 'row-actions' }, first,
        h('button', { type: 'button', text: s.pinned ? 'Unpin' : 'Pin on top', onclick: () => rowAction(() => app.api.pinSession(s.id, !s.pinned), more) }),
        h('button', { type: 'button', class: 'danger', text: 'Delete', onclick: () => toggleRow(s.id, 'delete') })),
      h('p', { class: 'form-error', role: 'alert', hidden: true }));
      first.focus();
    }
  }
}

function closeRow(focus) {
  app.rowOpen = null;
  drawRowOptions();
  if (focus) focus.focus();
}

// rowAction runs a change to a chat from its options, then closes them
// and shows the list as the server has it; a refusal shows in the row.
async function rowAction(fn, more) {
  const panel = more.nextElementSibling;
  try {
    await fn();
  } catch (err) {
    if (authLost(err)) return;
    const error = panel.querySelector('.form-error');
    error.textContent = err.message;
    error.hidden = false;
    return;
  }
  closeRow(more);
  await refreshSessions();
}

async function deleteChat(id) {
  const li = [...ui.sessions.children].find((x) => x.dataset.sessionId === id);
  await rowAction(() => app.api.deleteSession(id), li.children[1]);
  if (!app.sessions.some((s) => s.id === id)) {
    if (app.current === id) closeSession('');
    ui.newChat.focus();
  }
}

// The list's search asks the server once typing pauses.
let searchTimer = null;
ui.chatSearch.addEventListener('input', () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(() => {
    app.query = ui.chatSearch.value.trim();
    app.rowOpen = null;
    refreshSessions();
  }, 250);
});
ui.chatSearch.addEventListener('keydown', (e) => {
  if (e.key === 'Escape' && ui.chatSearch.value) {
    e.stopPropagation();
    ui.chatSearch.value = '';
    app.query = '';
    refreshSessions();
  }
});
ui.sessions.addEventListener('keydown', (e) => {
  if (e.key === 'Escape' && app.rowOpen) {
    e.stopPropagation();
    const li = [...ui.sessions.children].find((x) => x.dataset.sessionId === app.rowOpen.id);
    closeRow(li && li.children[1]);
  }
});

// ago is a short relative time.
function ago(iso) {
  const t = Date.parse(iso);
  if (!t) return '';
  const s = Math.max(0, (Date.now() - t) / 1000);
  if (s < 60) return 'just now';
  if (s < 3600) return Math.floor(s / 60) + ' min ago';
  if (s < 86400) return Math.floor(s / 3600) + ' h ago';
  return new Date(t).toLocaleDateString();
}

function stopStream() {
  if (app.stream) app.stream.stop();
  app.stream = null;
}

function openSession(id) {
  stopStream();
  app.current = id;
  app.awaitingTurn = false;
  app.steering.clear();
  app.interrupting = false;
  app.notice = '';
  view.reset();
  localStorage.setItem(SESSION_KEY, id);
  if (decodeURIComponent(location.hash.slice(1)) !== id) history.replaceState(null, '', '#' + encodeURIComponent(id));
  const api = app.api;
  app.stream = new EventStream({
    url: (after) => api.eventsURL(id, after, pageID, visible()),
    headers: () => api.headers(),
    onEvent: (ev, info) => view.apply(ev, info),
    onState: (state) => {
      ui.connection.textContent = { connecting: 'Connecting…', retrying: 'Reconnecting…' }[state] || '';
      ui.connection.dataset.state = state;
    },
    onReset: () => view.reset(),
    onFatal: (err) => {
      if (authLost(err)) return;
      closeSession(err.status === 404 ? 'That chat no longer exists.' : err.message);
      refreshSessions();
    },
  }).start();
  renderSessions();
}

function closeSession(notice) {
  stopStream();
  app.current = null;
  closeControls();
  app.steering.clear();
  view.reset();
  app.notice = notice || '';
  localStorage.removeItem(SESSION_KEY);
  if (location.hash) history.replaceState(null, '', location.pathname + location.search);
  ui.connection.textContent = '';
  renderSessions();
}

ui.newChat.addEventListener('click', async () => {
  ui.newChat.disabled = true;
  try {
    const s = await app.api.createSession();
    app.sessions = [s, ...app.sessions.filter((x) => x.id !== s.id)];
    openSession(s.id);
    closeDrawer();
    ui.message.focus();
  } catch (err) {
    if (!authLost(err)) showNotice(err.message);
  } finally {
    ui.newChat.disabled = false;
  }
});

window.addEventListener('hashchange', () => {
  const id = decodeURIComponent(location.hash.slice(1));
  if (app.api && id && id !== app.current) openSession(id);
});

// ---- session controls: model, permission mode, spending, fork ----

const usd = (n) => '$' + (n || 0).toFixed(2);

// renderControls shows the open chat's model, mode and what it and today
// cost, against the limits.
function renderControls(current) {
  ui.controls.hidden = !current;
  if (!current) return;
  // The model in effect, by the name a person reads: the one chosen,
  // else the one the CLI said it runs, else its default (not yet known).
  const model = current.model || '';
  const alias = [...ui.model.options].find((o) => !o.dataset.inEffect && o.value === model);
  let effect = ui.model.querySelector('option[data-in-effect]');
  if (alias) {
    if (effect) effect.remove();
  } else {
    if (!effect) {
      effect = h('option', { 'data-in-effect': 'true' });
      ui.model.prepend(effect);
    }
    effect.value = model;
    effect.textContent = model ? current.model_name || model : 'Default model';
    effect.disabled = !model;
  }
  // A change on its way to the server is not undone by an older list.
  if (!app.controlling) {
    ui.model.value = model;
    ui.mode.value = current.permission_mode || 'acceptEdits';
  }
  const limits = (app.usage && app.usage.limits) || {};
  let text = usd(current.spent_usd) + (limits.session_usd ? ' of ' + usd(limits.session_usd) : '') + ' in this chat';
  if (app.usage) text += ' · today ' + usd(app.usage.today_usd) + (limits.person_day_usd ? ' of ' + usd(limits.person_day_usd) : '');
  ui.spend.textContent = text;
  const over = (limits.session_usd && current.spent_usd >= limits.session_usd) ||
    (limits.person_day_usd && app.usage && app.usage.today_usd >= limits.person_day_usd);
  ui.spend.classList.toggle('over', !!over);
}

async function control(fn) {
  if (!app.current) return;
  const id = app.current;
  app.controlling++;
  try {
    await fn(id);
    app.notice = '';
  } catch (err) {
    if (!authLost(err)) showNotice(err.message);
  }
  await refreshSessions();
  app.controlling--;
  updateChrome();
}

// regenerate asks for the last answer again: the conversation goes back
// to before its message (and the notes it changed, when it changed any)
// and the same message is sent once more.
function regenerate(turn, message, changed) {
  return control(async (id) => {
    await app.api.rewind(id, { message_id: `turn-${turn}-user`, conversation: true, files: changed });
    await app.api.postMessage(id, message);
    app.awaitingTurn = true;
  });
}

ui.model.addEventListener('change', () => control((id) => app.api.setModel(id, ui.model.value)));
ui.mode.addEventListener('change', () => control((id) => app.api.setPermissionMode(id, ui.mode.value)));
ui.fork.addEventListener('click', () => control(async (id) => {
  const s = await app.api.fork(id);
  app.sessions = [s, ...app.sessions.filter((x) => x.id !== s.id)];
  openSession(s.id);
}));

// ---- composer ----

function busy() {
  return view.running || app.posting || app.awaitingTurn;
}

// send sends the composer's text. While a reply runs it waits behind it
// (shown in the queue, where it can be cancelled); with steer it goes
// into the running reply instead, at the assistant's next step.
async function send(steer = false) {
  const text = ui.message.value;
  if ((!text.trim() && tray.empty) || app.posting || !app.api) return;
  app.posting = true;
  app.notice = '';
  updateChrome();
  try {
    if (!app.current) {
      const s = await app.api.createSession();
      app.sessions = [s, ...app.sessions];
      openSession(s.id);
    }
    const turns = view.turns;
    const sent = await app.api.postMessage(app.current, text, { files: tray.files, attach: tray.notes, steer: steer && view.running });
    ui.message.value = '';
    tray.clear();
    autosize();
    if (sent && sent.steered) {
      // Shown as on its way until its steered event (or a refusal) says.
      if (!view.settled.has(sent.queue_id)) app.steering.set(sent.queue_id, text);
      return;
    }
    if (sent && sent.queued) return; // its queued event shows it

    // Unless the stream already brought the turn (it may even be over).
    app.awaitingTurn = view.turns === turns;
    // The turn's events normally arrive at once; never stay locked if the
    // stream is down.
    setTimeout(() => { if (app.awaitingTurn) { app.awaitingTurn = false; updateChrome(); } }, 15000);
  } catch (err) {
    if (!authLost(err)) showNotice(err.status === 429 ? 'Too many messages are waiting in this chat. Wait for the replies.' : err.message);
    if (err.status === 402) refreshSessions();
  } finally {
    app.posting = false;
    updateChrome();
    if (!ui.message.disabled) ui.message.focus();
  }
}

ui.composer.addEventListener('submit', (e) => {
  e.preventDefault();
  send();
});

ui.sendNow.addEventListener('click', () => send(true));

ui.message.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    send();
  }
});

function autosize() {
  ui.message.style.height = 'auto';
  ui.message.style.height = Math.min(ui.message.scrollHeight, window.innerHeight * 0.4) + 'px';
}
ui.message.addEventListener('input', autosize);

ui.interrupt.addEventListener('click', async () => {
  if (!app.current) return;
  app.interrupting = true;
  updateChrome();
  try {
    await app.api.interrupt(app.current);
  } catch (err) {
    // 409: the turn ended meanwhile; nothing to stop.
    if (!authLost(err) && err.status !== 409) {
      app.interrupting = false;
      showNotice(err.message);
    }
  }
  updateChrome();
});

// renderQueue lists the open chat's waiting messages, each with a cancel,
// and the ones on their way into the running reply. The list is drawn
// again only when it changed, so a click on a cancel is never lost to a
// redraw (the chrome redraws on every event of the open chat).
let queueDrawn = '';
function renderQueue() {
  for (const id of view.settled) app.steering.delete(id);
  const key = JSON.stringify([view.queue, [...app.steering]]);
  if (key === queueDrawn) return;
  queueDrawn = key;
  const items = [
    ...view.queue.map((q) => h('li', { 'data-queue-id': q.id },
      h('span', { class: 'queue-text', text: q.message, title: q.message }),
      h('span', { class: 'queue-state', text: 'after this reply' }),
      h('button', { type: 'button', text: 'Cancel', 'aria-label': 'Cancel: ' + q.message, onclick: () => cancelQueued(q.id) }))),
    ...[...app.steering].map(([id, text]) => h('li', { 'data-queue-id': id, class: 'steering' },
      h('span', { class: 'queue-text', text, title: text }),
      h('span', { class: 'queue-state', text: 'going in now…' }))),
  ];
  ui.queue.replaceChildren(...items);
  ui.queue.hidden = items.length === 0;
}

async function cancelQueued(queueID) {
  if (!app.current) return;
  try {
    await app.api.cancelQueued(app.current, queueID);
  } catch (err) {
    // 404: it runs already (or was cancelled elsewhere); its events say.
    if (!authLost(err) && err.status !== 404) showNotice(err.message);
  }
}

function showNotice(text) {
  app.notice = text;
  updateChrome();
}

// updateChrome brings everything outside the transcript in line with the
// state: title, status bar, composer, interrupt button.
function updateChrome() {
  const running = view.running;
  const current = app.sessions.find((s) => s.id === app.current);
  ui.title.textContent = view.title || (current && current.title) || view.firstMessage || 'New chat';
  document.title = app.current && ui.title.textContent !== 'New chat' ? ui.title.textContent + ' · Major' : 'Major';
  ui.empty.hidden = !view.empty;
  ui.transcript.hidden = view.empty && !view.running;
  ui.transcript.setAttribute('aria-busy', String(running));

  const status = app.notice || view.status || (running ? 'Working…' : '');
  ui.status.textContent = status;
  ui.status.classList.toggle('error', !!app.notice);
  ui.status.hidden = !status;

  const locked = busy();
  // The composer stays open while a reply runs: Enter queues, Send now
  // steers.
  ui.message.disabled = app.posting;
  ui.send.disabled = app.posting;
  ui.send.textContent = running ? 'Queue' : 'Send';
  ui.sendNow.hidden = !running;
  ui.composer.classList.toggle('running', running);
  ui.sendNow.disabled = app.posting;
  ui.hint.textContent = running
    ? 'Enter queues your message for after this reply; Send now gives it to the assistant while it works.'
    : 'Enter sends, Shift+Enter starts a new line.';
  renderQueue();
  ui.interrupt.hidden = !running;
  ui.interrupt.disabled = app.interrupting;
  ui.interrupt.textContent = app.interrupting ? 'Interrupting…' : 'Interrupt';
  ui.fork.disabled = locked;
  renderControls(current);
  ui.openTerminal.hidden = !app.current;
  ui.chatMenu.hidden = !app.current;
  ui.openTerminal.disabled = locked;
  if (!locked && document.activeElement === document.body) ui.message.focus();
}

// ---- files and notes ----

ui.attachFiles.addEventListener('change', () => {
  tray.addFiles(ui.attachFiles.files);
  ui.attachFiles.value = '';
});
ui.attachCamera.addEventListener('change', () => {
  tray.addFiles(ui.attachCamera.files);
  ui.attachCamera.value = '';
});
ui.attachNote.addEventListener('click', () => notes.browse('.', true));
ui.openNotes.addEventListener('click', () => notes.browse('.', false));

// Pasted and dropped files go with the next message.
ui.message.addEventListener('paste', (e) => {
  const files = [...(e.clipboardData?.files || [])];
  if (files.length) {
    e.preventDefault();
    tray.addFiles(files);
  }
});
for (const el of [ui.composer, ui.transcript]) {
  el.addEventListener('dragover', (e) => {
    if ([...(e.dataTransfer?.types || [])].includes('Files')) e.preventDefault();
  });
  el.addEventListener('drop', (e) => {
    if (!e.dataTransfer?.files?.length) return;
    e.preventDefault();
    tray.addFiles(e.dataTransfer.files);
  });
}

// ---- the Terminal view ----

const terminal = new TerminalView(ui.terminal, ui.terminalStatus, () => {});

ui.openTerminal.addEventListener('click', () => {
  if (!app.current || busy()) return;
  ui.terminalView.hidden = false;
  terminal.open(app.api, app.current);
});

ui.closeTerminal.addEventListener('click', async () => {
  ui.closeTerminal.disabled = true;
  ui.terminalStatus.textContent = 'Closing…';
  await terminal.close();
  ui.closeTerminal.disabled = false;
  ui.terminalView.hidden = true;
  refreshSoon();
  ui.message.focus();
});

// ---- the Usage page ----

const usageView = new UsageView({
  view: $('usage-view'), summary: $('usage-summary'), cost: $('usage-cost'), tokens: $('usage-tokens'), table: $('usage-table'),
}, () => app.api);
ui.openUsage.addEventListener('click', () => {
  usageView.show();
  $('close-usage').focus();
});
$('close-usage').addEventListener('click', () => {
  usageView.hide();
  ui.message.focus();
});

// ---- small screens: the chat's settings are behind a menu button ----

function closeControls() {
  ui.app.classList.remove('controls-open');
  ui.chatMenu.setAttribute('aria-expanded', 'false');
}
ui.chatMenu.addEventListener('click', () => {
  const open = !ui.app.classList.contains('controls-open');
  ui.app.classList.toggle('controls-open', open);
  ui.chatMenu.setAttribute('aria-expanded', String(open));
  if (open) ui.model.focus();
});
ui.fork.addEventListener('click', closeControls);
for (const b of ui.controls.querySelectorAll('[data-opens]')) {
  b.addEventListener('click', () => {
    closeControls();
    $(b.dataset.opens).click();
  });
}

// ---- devices and pairing ----

const devices = new DevicesView({
  view: $('devices-view'), close: $('close-devices'), list: $('devices'), add: $('add-device'), name: $('device-name'),
  pairing: $('pairing'), qr: $('pairing-qr'), code: $('pairing-code'), expires: $('pairing-expires'), error: $('devices-error'),
  androidSetup: $('android-setup'), androidFields: $('android-fields'), androidServer: $('android-server'),
  androidPerson: $('android-person'), androidToken: $('android-token'), androidCopy: $('android-copy'),
}, () => app.api);

ui.openDevices.addEventListener('click', () => devices.open());

// pair signs this device in with a token of its own for a pairing code.
async function pair(code) {
  ui.pairError.hidden = true;
  try {
    const t = await redeemPairing(code);
    await signIn({ token: t.token, person: t.person });
  } catch (err) {
    ui.pairError.textContent = err instanceof ApiError && err.status === 401 ? 'That pairing code is not valid (any more): make a new one.' : err.message;
    ui.pairError.hidden = false;
    showSignin('');
  }
}

ui.pairForm.addEventListener('submit', (e) => {
  e.preventDefault();
  if (ui.pairCode.value.trim()) pair(ui.pairCode.value.trim());
});

// ---- notifications: the settings page, and whether this page is seen ----

ui.openSettings.addEventListener('click', () => notifications.show());
$('close-settings').addEventListener('click', () => {
  notifications.hide();
  ui.message.focus();
});

// "Install the app" shows when the browser offers to install the page
// as an app (it fires beforeinstallprompt once the manifest and service
// worker qualify), and asks it to.
let installOffer = null;
const installButton = $('install-app');
window.addEventListener('beforeinstallprompt', (e) => {
  e.preventDefault();
  installOffer = e;
  installButton.hidden = false;
});
installButton.addEventListener('click', async () => {
  if (!installOffer) return;
  const offer = installOffer;
  installOffer = null;
  installButton.hidden = true;
  await offer.prompt();
});
window.addEventListener('appinstalled', () => {
  installOffer = null;
  installButton.hidden = true;
});

// The server notifies only when no page of the person watches the chat:
// this one says when it is hidden and seen again.
document.addEventListener('visibilitychange', () => {
  if (app.api && app.stream) app.api.presence(pageID, visible());
});
window.addEventListener('pagehide', () => {
  if (app.api && app.stream) app.api.presence(pageID, false);
});

// ---- small screens: the chat list is a drawer ----

function openDrawer() {
  ui.app.classList.add('drawer-open');
  ui.menu.setAttribute('aria-expanded', 'true');
  ui.scrim.hidden = false;
}

function closeDrawer() {
  ui.app.classList.remove('drawer-open');
  ui.menu.setAttribute('aria-expanded', 'false');
  ui.scrim.hidden = true;
}

// The drawer's own Devices, Notifications and Sign out do what the top
// bar's do (which a phone's width leaves no room for).
for (const b of ui.sidebar.querySelectorAll('[data-opens]')) {
  b.addEventListener('click', () => {
    closeDrawer();
    $(b.dataset.opens).click();
  });
}
ui.menu.addEventListener('click', () => (ui.app.classList.contains('drawer-open') ? closeDrawer() : openDrawer()));
ui.scrim.addEventListener('click', closeDrawer);
document.addEventListener('keydown', (e) => {
  if (e.key !== 'Escape') return;
  if (!$('usage-view').hidden) {
    $('close-usage').click();
    return;
  }
  if (ui.app.classList.contains('controls-open')) {
    closeControls();
    ui.chatMenu.focus();
    return;
  }
  closeDrawer();
});

// ---- start ----

const saved = loadAuth();
const linked = pairingCode(location.hash);
if (linked) {
  // Opened from a pairing QR code: the code leaves the address at once.
  history.replaceState(null, '', location.pathname);
  pair(linked);
} else if (saved) {
  signIn(saved).catch((err) => {
    if (err instanceof ApiError && (err.status === 401 || err.status === 403 || err.status === 400)) localStorage.removeItem(AUTH_KEY);
    showSignin(err instanceof ApiError && err.status === 0 ? err.message : signInError(err));
  });
} else {
  showSignin('');
}
