// The Major HTTP API as the web client uses it.

// ApiError is a failed request: the HTTP status (0 when the server could
// not be reached) and the server's message.
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// Api calls the server as one person with one token.
export class Api {
  constructor({ token, person, base = '' }) {
    this.token = token;
    this.person = person;
    this.base = base;
  }

  headers() {
    return { Authorization: 'Bearer ' + this.token, 'X-Notes-Person': this.person };
  }

  async request(method, path, body) {
    const init = { method, headers: { ...this.headers(), Accept: 'application/json' }, cache: 'no-store' };
    if (body instanceof FormData) {
      init.body = body; // multipart: the browser sets the type and boundary
    } else if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(this.base + path, init);
    } catch {
      throw new ApiError(0, 'The server cannot be reached. Check your connection and try again.');
    }
    let data = null;
    try {
      data = await res.json();
    } catch {
      // an empty or non-JSON body
    }
    if (!res.ok) {
      const msg = data && typeof data.error === 'string' ? data.error : `The server answered ${res.status}.`;
      throw new ApiError(res.status, msg);
    }
    return data;
  }

  session(id) {
    return '/api/claude/sessions/' + encodeURIComponent(id);
  }

  async listSessions() {
    const data = await this.request('GET', '/api/claude/sessions');
    return (data && data.sessions) || [];
  }

  // searchSessions lists the person's chats whose title or messages hold
  // every word of query, the most recently active first.
  async searchSessions(query) {
    const data = await this.request('GET', '/api/claude/sessions?q=' + encodeURIComponent(query));
    return (data && data.sessions) || [];
  }

  renameSession(id, title) {
    return this.request('POST', this.session(id) + '/title', { title });
  }

  pinSession(id, pinned) {
    return this.request('POST', this.session(id) + '/pin', { pinned });
  }

  deleteSession(id) {
    return this.request('DELETE', this.session(id));
  }

  createSession() {
    return this.request('POST', '/api/claude/sessions');
  }

  // postMessage sends a message: it starts a turn, or waits behind the
  // running one; with steer it goes into the running one (a message with
  // files or notes never does). files (File objects) go with it in a
  // multipart body, attach names notes of the person's.
  postMessage(id, message, { files = [], attach = [], steer = false } = {}) {
    if (!files.length) {
      const body = { message };
      if (attach.length) body.attach = attach;
      else if (steer) body.steer = true;
      return this.request('POST', this.session(id) + '/messages', body);
    }
    const form = new FormData();
    form.append('message', message);
    if (attach.length) form.append('attach', attach.join(','));
    for (const f of files) form.append('files', f, f.name);
    return this.request('POST', this.session(id) + '/messages', form);
  }

  // tree lists one folder of the person's notes.
  tree(path) {
    return this.request('GET', '/api/claude/vault/tree?path=' + encodeURIComponent(path || '.'));
  }

  // file fetches one file of the person's notes: {blob, type}, type being
  // the media type the server sniffed.
  async file(path) {
    let res;
    try {
      res = await fetch(this.base + '/api/claude/vault/file?path=' + encodeURIComponent(path), { headers: this.headers(), cache: 'no-store' });
    } catch {
      throw new ApiError(0, 'The server cannot be reached. Check your connection and try again.');
    }
    if (!res.ok) {
      let msg = `The server answered ${res.status}.`;
      try {
        msg = (await res.json()).error || msg;
      } catch {
        // not JSON
      }
      throw new ApiError(res.status, msg);
    }
    const type = (res.headers.get('Content-Type') || '').split(';')[0].trim();
    return { blob: await res.blob(), type };
  }

  changes(id) {
    return this.request('GET', this.session(id) + '/changes');
  }

  turnDiff(id, turn) {
    return this.request('GET', this.session(id) + '/changes/' + turn);
  }

  rewind(id, body) {
    return this.request('POST', this.session(id) + '/rewind', body);
  }

  cancelQueued(id, queueID) {
    return this.request('DELETE', this.session(id) + '/queue/' + encodeURIComponent(queueID));
  }

  setModel(id, model) {
    return this.request('POST', this.session(id) + '/model', { model });
  }

  setPermissionMode(id, mode) {
    return this.request('POST', this.session(id) + '/permission-mode', { mode });
  }

  fork(id) {
    return this.request('POST', this.session(id) + '/fork');
  }

  // usage is the spending and tokens of the last days days (default
  // today only), and the limits.
  usage(days = 1) {
    return this.request('GET', '/api/claude/usage?days=' + days);
  }

  interrupt(id) {
    return this.request('POST', this.session(id) + '/interrupt');
  }

  answer(id, requestID, answers) {
    return this.request('POST', this.session(id) + '/answer', { request_id: requestID, answers });
  }

  permission(id, requestID, behavior, remember) {
    return this.request('POST', this.session(id) + '/permission', { request_id: requestID, behavior, remember: !!remember });
  }

  // eventsURL is the stream of a session after seq, only with the event
  // types this client shows (the raw CLI events are large); page names this
  // page and visible says whether it is seen, so the server knows whether
  // the person is watching (see presence).
  eventsURL(id, after, page, visible) {
    let url = this.base + this.session(id) + '/events?after=' + after + '&types=' + SHOWN_TYPES.join(',');
    if (page) url += '&page=' + encodeURIComponent(page) + '&visible=' + (visible ? 'true' : 'false');
    return url;
  }

  // presence tells the server whether this page is visible; it is sent
  // even while the page is being hidden or closed (keepalive).
  presence(page, visible) {
    return fetch(this.base + '/api/claude/presence', {
      method: 'POST',
      headers: { ...this.headers(), 'Content-Type': 'application/json' },
      body: JSON.stringify({ page, visible }),
      keepalive: true,
      cache: 'no-store',
    }).catch(() => {});
  }

  pushConfig() {
    return this.request('GET', '/api/claude/push/config');
  }

  async devices() {
    const data = await this.request('GET', '/api/claude/devices');
    return (data && data.devices) || [];
  }

  addDevice(device) {
    return this.request('POST', '/api/claude/devices', device);
  }

  removeDevice(id) {
    return this.request('DELETE', '/api/claude/devices/' + encodeURIComponent(id));
  }

  notificationSettings() {
    return this.request('GET', '/api/claude/notifications');
  }

  saveNotificationSettings(settings) {
    return this.request('PUT', '/api/claude/notifications', settings);
  }

  testNotification() {
    return this.request('POST', '/api/claude/notifications/test');
  }
}

export const SHOWN_TYPES = [
  'turn_start', 'text', 'status', 'tool', 'done', 'error',
  'question', 'question_answered', 'permission', 'permission_answered',
  'draft', 'draft_answered', 'settings', 'refused', 'rate_limit',
  'changes', 'imported', 'queued', 'queue_cancelled', 'steered',
  'tool_result', 'title', 'rewound', 'terminal_turns',
];
