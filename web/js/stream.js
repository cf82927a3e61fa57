// The session event stream: NDJSON over fetch (EventSource cannot send the
// auth headers), re-attached after a drop with the last seq seen so no
// event is shown twice or lost.

// LineDecoder splits a byte stream into lines; a line may arrive across
// chunks, and a multi-byte character across reads.
export class LineDecoder {
  constructor() {
    this.decoder = new TextDecoder();
    this.buf = '';
  }

  // push takes a chunk of bytes and returns the complete lines in it.
  push(bytes) {
    this.buf += this.decoder.decode(bytes, { stream: true });
    const lines = this.buf.split('\n');
    this.buf = lines.pop();
    return lines;
  }

  // end returns what is left after the last newline.
  end() {
    const rest = this.buf + this.decoder.decode();
    this.buf = '';
    return rest ? [rest] : [];
  }
}

// StreamError is a response the stream cannot retry its way out of.
export class StreamError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// The events an open question, permission prompt or draft is sent again
// with when a client re-attaches, even if it saw them before.
const RESENT = new Set(['question', 'permission', 'draft']);

// EventStream attaches to one session's events and keeps attached.
//
// Options:
//   url(after)        the events URL for "after this seq"
//   headers()         request headers (auth)
//   onEvent(ev, info) each new event in order; info.again is true for an
//                     open question or permission sent again on re-attach
//   onState(state)    'connecting' | 'live' | 'retrying' | 'stopped'
//   onReset()         the server no longer has our seq: everything is
//                     replayed from the start, so drop what is shown
//   onFatal(err)      a StreamError (401, 403, 404, ...); the stream stops
//   idleTimeout       ms without a byte before the connection is presumed
//                     dead (the server pings every 5 s when idle)
//   minDelay, maxDelay  reconnect backoff bounds in ms
export class EventStream {
  constructor(opts) {
    this.opts = { idleTimeout: 20000, minDelay: 300, maxDelay: 10000, fetch: (...a) => globalThis.fetch(...a), ...opts };
    this.lastSeq = 0;
    this.stopped = false;
    this.attempt = 0;
    this.controller = null;
    this.timer = null;
    this.state = '';
  }

  start() {
    this.stopped = false;
    this.connect();
    return this;
  }

  // stop ends the stream for good; no callback runs afterwards.
  stop() {
    if (this.stopped) return;
    this.stopped = true;
    clearTimeout(this.timer);
    if (this.controller) this.controller.abort();
    this.setState('stopped');
  }

  setState(s) {
    if (s === this.state) return;
    this.state = s;
    if (this.opts.onState) this.opts.onState(s);
  }

  async connect() {
    if (this.stopped) return;
    this.setState(this.attempt === 0 ? 'connecting' : 'retrying');
    const controller = new AbortController();
    this.controller = controller;
    let idle = null;
    const arm = () => {
      clearTimeout(idle);
      idle = setTimeout(() => controller.abort(), this.opts.idleTimeout);
    };
    let delivered = false;
    const started = Date.now();
    try {
      arm();
      const res = await this.opts.fetch(this.opts.url(this.lastSeq), {
        headers: { Accept: 'application/x-ndjson', ...this.opts.headers() },
        signal: controller.signal,
        cache: 'no-store',
      });
      if (this.stopped) return;
      if (res.status === 410) {
        // Our seq is older than what the server keeps: start over.
        this.lastSeq = 0;
        if (this.opts.onReset) this.opts.onReset();
        this.attempt = 0;
        this.schedule(0);
        return;
      }
      if (!res.ok) {
        const msg = await errorMessage(res);
        if (res.status >= 400 && res.status < 500 && res.status !== 408 && res.status !== 429) {
          this.fail(new StreamError(res.status, msg));
          return;
        }
        throw new StreamError(res.status, msg);
      }
      this.setState('live');
      const reader = res.body.getReader();
      const lines = new LineDecoder();
      for (;;) {
        const { value, done } = await reader.read();
        if (this.stopped) return;
        if (done) break;
        arm();
        for (const line of lines.push(value)) delivered = this.line(line) || delivered;
      }
      // Whatever follows the last newline is a line cut short: the server
      // ends every line with one. It comes again after the re-attach.
    } catch (err) {
      if (this.stopped) return;
      // A network error, an idle timeout or a 5xx: retry below.
    } finally {
      clearTimeout(idle);
    }
    if (this.stopped) return;
    // A connection that carried events or lasted a while was healthy: the
    // next try starts from the shortest delay.
    if (delivered || Date.now() - started > 5000) this.attempt = 0;
    const base = Math.min(this.opts.maxDelay, this.opts.minDelay * 2 ** this.attempt);
    this.attempt++;
    this.schedule(base / 2 + (Math.random() * base) / 2);
  }

  schedule(ms) {
    if (this.stopped) return;
    this.setState('retrying');
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.connect(), ms);
  }

  fail(err) {
    this.stop();
    if (this.opts.onFatal) this.opts.onFatal(err);
  }

  // line handles one NDJSON line; true if it carried a new event.
  line(text) {
    text = text.trim();
    if (!text) return false;
    let ev;
    try {
      ev = JSON.parse(text);
    } catch {
      return false; // not ours to show; the next line is still good
    }
    if (!ev || typeof ev !== 'object' || ev.type === 'ping') return false;
    if (typeof ev.seq === 'number') {
      if (ev.seq <= this.lastSeq) {
        if (RESENT.has(ev.type)) this.opts.onEvent(ev, { again: true });
        return false;
      }
      this.lastSeq = ev.seq;
    }
    this.opts.onEvent(ev, { again: false });
    return true;
  }
}

async function errorMessage(res) {
  try {
    const body = await res.json();
    if (body && typeof body.error === 'string') return body.error;
  } catch {
    // not JSON
  }
  return `HTTP ${res.status}`;
}
